"""Shared plumbing for the benchmark scripts in scripts/bench/.

Only psycopg is needed here, so the harness runs under either the project's environment or the
benchmark virtualenv. Code that needs a peer library (pgqueuer, procrastinate) runs in worker
subprocesses started with :func:`bench_python`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


class BenchError(RuntimeError):
    """A benchmark could not produce a figure (setup failed, a worker died, a deadline passed)."""


# --------------------------------------------------------------------------------------------
# interpreters


def bench_venv() -> Path:
    return Path(os.environ.get("BENCH_VENV") or REPO / ".venv-bench")


def bench_python() -> str:
    """The interpreter that has the peers installed: $BENCH_VENV/bin/python, else this one."""
    candidate = bench_venv() / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


# --------------------------------------------------------------------------------------------
# databases


def dsn_for(dsn: str, dbname: str) -> str:
    """`dsn` pointed at database `dbname` (URL or key=value input, key=value output)."""
    return make_conninfo(dsn, dbname=dbname)


def dbname_of(dsn: str) -> str:
    return str(conninfo_to_dict(dsn).get("dbname") or "postgres")


def recreate_database(admin_dsn: str, name: str) -> str:
    """Drop (if present) and create database `name`; return a DSN for it."""
    if dbname_of(admin_dsn) == name:
        raise BenchError(f"--dsn must name another database than the scratch one ({name})")
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return dsn_for(admin_dsn, name)


def drop_database(admin_dsn: str, name: str) -> None:
    if os.environ.get("BENCH_KEEP_DB"):  # debugging: look at the peer's tables afterwards
        print(f"(database {name} kept)", file=sys.stderr)
        return
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def server_version(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


# --------------------------------------------------------------------------------------------
# processes


class Workers:
    """Worker subprocesses started by one benchmark run, and only those.

    Each worker gets its own session (so its process group id is its pid), stderr to a log
    file, and a pipe on stdin/stdout for the start barrier: a worker that takes part prints
    ``READY`` once it is connected and waits for a line on stdin before it starts work, so
    that interpreter start-up is kept out of the measurement and both workers begin together.
    ``stop()`` sends SIGTERM, waits, then SIGKILLs stragglers; it is idempotent and is also
    run at interpreter exit.
    """

    def __init__(self, label: str, logdir: Path) -> None:
        self.label = label
        self.logdir = logdir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        _LIVE.append(self)

    def spawn(self, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        index = len(self.procs)
        log = self.logdir / f"{self.label}-worker{index}.log"
        with open(log, "wb") as err:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        self.procs.append(proc)
        self.logs.append(log)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until every worker printed READY (or raise, with the log tails)."""
        pending = {p.stdout.fileno(): p for p in self.procs if p.stdout is not None}
        buffers: dict[int, bytes] = dict.fromkeys(pending, b"")
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            for fd in pending:
                sel.register(fd, selectors.EVENT_READ)
            while pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(f"{self.label}: workers not ready after {timeout:.0f}s\n" + self.tails())
                for key, _ in sel.select(timeout=min(left, 0.5)):
                    chunk = os.read(key.fd, 4096)
                    if not chunk:
                        sel.unregister(key.fd)
                        del pending[key.fd]
                        raise BenchError(f"{self.label}: a worker exited before READY\n" + self.tails())
                    buffers[key.fd] += chunk
                    if b"READY" in buffers[key.fd]:
                        sel.unregister(key.fd)
                        del pending[key.fd]
                self.check_alive()

    def go(self) -> float:
        """Release the start barrier; returns the wall-clock release time."""
        released = time.time()
        for proc in self.procs:
            if proc.stdin is not None:
                proc.stdin.write(b"GO\n")
                proc.stdin.flush()
        return released

    def check_alive(self) -> None:
        dead = [p for p in self.procs if p.poll() is not None]
        if dead:
            codes = ", ".join(f"pid {p.pid} rc={p.returncode}" for p in dead)
            raise BenchError(f"{self.label}: worker exited early ({codes})\n" + self.tails())

    def tails(self, lines: int = 15) -> str:
        out = []
        for log in self.logs:
            with contextlib.suppress(OSError):
                text = log.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(out)

    def stop(self, grace: float = 5.0) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        if self in _LIVE:
            _LIVE.remove(self)


_LIVE: list[Workers] = []


def _stop_all() -> None:
    for workers in list(_LIVE):
        workers.stop(grace=2.0)


def install_cleanup() -> None:
    """Stop our workers on exit, Ctrl-C and SIGTERM (the caller's finally blocks drop the DBs)."""
    import atexit

    atexit.register(_stop_all)

    def on_term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)


def run_helper(argv: Sequence[str], timeout: float = 300.0) -> dict[str, Any]:
    """Run a short-lived helper subprocess that prints one JSON object as its last stdout line."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        hint = ""
        if "ModuleNotFoundError" in proc.stderr:
            hint = f"\n(no peer in {argv[0]}: run scripts/bench/setup_peers.sh, or set BENCH_VENV)"
        raise BenchError(f"helper failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr[-3000:]}{hint}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines:
        return {}
    return json.loads(lines[-1])


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    keep = os.environ.get("BENCH_KEEP_LOGS")
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)
        else:
            print(f"(logs kept in {path})", file=sys.stderr)


# --------------------------------------------------------------------------------------------
# worker side


async def barrier() -> None:
    """Worker side of the start barrier (see Workers): announce READY, wait for GO on stdin."""
    import asyncio

    sys.stdout.write("READY\n")
    sys.stdout.flush()
    await asyncio.to_thread(sys.stdin.readline)


class StartLog:
    """Append-only record of handler start times, one line per start, cheap enough for a hot path.

    Lines are ``key<TAB>slot<TAB>start`` (slot may be empty when the handler cannot know it);
    each line is one write(2) on an O_APPEND descriptor, so nothing is lost on SIGKILL.
    """

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def record(self, key: object, slot: object, start: float) -> None:
        os.write(self.fd, f"{key}\t{'' if slot is None else slot}\t{start:.6f}\n".encode())


def read_start_logs(paths: Sequence[Path]) -> list[tuple[str, str, float]]:
    rows: list[tuple[str, str, float]] = []
    for path in paths:
        with contextlib.suppress(FileNotFoundError), open(path) as fh:
            for line in fh:
                if not line.endswith("\n"):  # a line being written right now
                    continue
                parts = line[:-1].split("\t")
                if len(parts) == 3 and parts[2]:
                    rows.append((parts[0], parts[1], float(parts[2])))
    return rows


# --------------------------------------------------------------------------------------------
# waiting


def poll_until(
    check: Callable[[], Any],
    *,
    timeout: float,
    interval: float = 0.05,
    what: str = "condition",
    alive: Callable[[], None] | None = None,
) -> Any:
    """Call `check` until it returns something truthy; raise BenchError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if alive is not None:
            alive()
        if time.monotonic() >= deadline:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# --------------------------------------------------------------------------------------------
# statistics and output


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), as numpy's default; nan when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def environment(dsn: str) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "postgres": server_version(dsn),
        "host": platform.node(),
        # Other work on the machine skews every figure: note how busy it was when we started.
        "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers]] + [[fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print(
            "  ".join(
                c.rjust(w) if n and i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if n == 0:
            print("  ".join("-" * w for w in widths))


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.2f}"
    return str(value)


def json_safe(value: Any) -> Any:
    """nan -> None, recursively, so --json output is strict JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def newest_server_log() -> str:
    """The newest PostgreSQL server log of this machine (Debian's /var/log/postgresql)."""
    return subprocess.run("ls -t /var/log/postgresql/*.log | head -1", shell=True, capture_output=True,
                          text=True, check=False).stdout.strip()


def auto_explain_buffers(conn: psycopg.Connection[Any], statement: str, log: str) -> tuple[int, int] | None:
    """(shared hit, read) of the largest node of one run of ``statement``, nested statements
    included (a function's own plan), from auto_explain in the server log ``log`` (readable by
    this process), read once the statement's own plan is there (at most 5 s)."""
    import re

    size = os.path.getsize(log)
    for setting in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                    "SET auto_explain.log_nested_statements = on", "SET auto_explain.log_analyze = on",
                    "SET auto_explain.log_buffers = on"):
        conn.execute(setting)  # type: ignore[arg-type]
    conn.execute(statement).fetchall()  # type: ignore[arg-type]
    conn.execute("SET auto_explain.log_min_duration = -1")
    deadline = time.monotonic() + 5
    text = ""
    while f"Query Text: {statement}" not in text and time.monotonic() < deadline:  # (its log)
        with open(log) as f:
            f.seek(size)
            text = f.read()
    found = [(int(h), int(r or 0)) for h, r in re.findall(r"\n\s*Buffers: shared hit=(\d+)(?: read=(\d+))?", text)]
    return max(found, key=lambda t: t[0] + t[1]) if found else None
