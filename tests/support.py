"""Helpers shared by the tests: waiting on conditions (never sleeping for an outcome),
runs made in any state, the plans a statement ran (auto_explain), and real ``runner start``
subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import psycopg

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent


def backfill_app_tables(url: str) -> str:
    """Create in ``url`` the tables of the backfill tests (tests/test_backfill.py,
    tests/test_copies.py): bf_gauge and bf_done, which the handlers of tests/apps/backfill.py
    write (their handlers running at once and its peak; one row per run done), and bf_stop,
    which a test's pause condition reads. Returns ``url``, a fixture's value."""
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE TABLE bf_gauge (running int NOT NULL DEFAULT 0, peak int NOT NULL DEFAULT 0)")
        c.execute("INSERT INTO bf_gauge VALUES (0, 0)")
        c.execute("CREATE TABLE bf_done (slot timestamptz, partition_key text, run_id bigint, fence bigint)")
        c.execute("CREATE TABLE bf_stop (id int)")
    return url


def one_late_slot(now: datetime | None = None) -> dict[str, Any]:
    """Schedule options (``cron``, ``track_from``) for a job whose one slot fell 30 minutes
    before ``now`` (default: the wall clock) and whose next is 23.5 hours away: the slot is
    late at start for any grace under 30 minutes (misfire: trigger catch_up), and no slot falls
    due during a test. A job every="1h" tracked from an hour ago has neither property: its
    latest slot is on time within the grace after the top of an hour (trigger schedule), and a
    test crossing the top of an hour sees one more run."""
    slot = ((now or datetime.now(UTC)).astimezone(UTC) - timedelta(minutes=30)).replace(second=0, microsecond=0)
    return {"cron": f"{slot.minute} {slot.hour} * * *", "track_from": slot - timedelta(minutes=1)}


def eventually(check: Callable[[], T], timeout: float = 10.0, interval: float = 0.02,
               message: str = "") -> T:
    """Call ``check`` until it returns a truthy value (returned) or ``timeout`` passes.
    An AssertionError raised by ``check`` counts as not yet."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except AssertionError as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"not true within {timeout}s: {message or check}") from last
        time.sleep(interval)  # polling interval of the condition, not a wait for an outcome


def scalar(url: str, sql: str, params: Any = None) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
        return None if row is None else row[0]


def rows(url: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A JSON plan node and every node under it."""
    yield plan
    for child in plan.get("Plans", ()):
        yield from plan_nodes(child)


def executed_plans(conn: psycopg.Connection[Any], statement: str, params: Any = None,
                   nested: bool = True, analyze: bool = False) -> list[dict[str, Any]]:
    """Run ``statement`` and return the plan of every statement it executed: itself and, with
    ``nested``, each statement run inside the SQL functions it calls (one entry per execution;
    an EXPLAIN of the caller shows only a function scan), as auto_explain logs them (JSON, to
    this client); with ``analyze``, with each node's actual rows and loops (no timing).
    ``conn`` is an autocommit superuser session; auto_explain stays loaded in it."""
    with logged_plans(conn, nested, analyze) as found:
        conn.execute(statement, params).fetchall()
    return found


@contextmanager
def logged_plans(conn: psycopg.Connection[Any], nested: bool = True,
                 analyze: bool = False) -> Iterator[list[dict[str, Any]]]:
    """The plans of the statements run on ``conn`` inside the block (``executed_plans``), in
    the list yielded, filled when the block ends: for a call of the runner's own code that
    issues the statement itself."""
    logged: list[str] = []
    found: list[dict[str, Any]] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary and "plan:" in diag.message_primary:
            logged.append(diag.message_primary)

    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET auto_explain.log_format = 'json'")
    conn.execute("SET auto_explain.log_timing = off")
    conn.execute("SET auto_explain.log_analyze = " + ("on" if analyze else "off"))
    conn.execute("SET auto_explain.log_nested_statements = " + ("on" if nested else "off"))
    conn.add_notice_handler(keep)
    try:
        conn.execute("SET client_min_messages = log")
        yield found
    finally:
        conn.execute("SET client_min_messages = notice")
        conn.remove_notice_handler(keep)
    plans = [json.loads(m[m.index("{"):]) for m in logged]
    found.extend(f for f in plans if "SET client_min_messages" not in f.get("Query Text", ""))


def runner_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "runner", *args]


def run_cli(*args: str, url: str | None = None, env: dict[str, str] | None = None,
            cwd: Path | None = None, timeout: float = 60, stdin: str | None = None,
            ) -> subprocess.CompletedProcess[str]:
    """One ``runner ...`` command in a process of its own (forked from tests/clizygote.py,
    which has the CLI imported already, or a plain subprocess where a fork could differ)."""
    full_env = {**os.environ, **(env or {})}
    if url is not None:
        full_env["RUNNER_DATABASE_URL"] = url
    where = str(cwd or ROOT)
    if _forkable(args, full_env):
        return _zygote_run(list(args), full_env, where, timeout, stdin)
    return subprocess.run(runner_cmd(*args), capture_output=True, text=True, env=full_env,
                          cwd=where, timeout=timeout, input=stdin)


# read at import or at interpreter start-up: a child forked from a server started under other
# values would not see the caller's
_AT_START = ("PYTHON", "RUNNER_CRASH", "LC_", "LANG")


def _forkable(args: tuple[str, ...], env: dict[str, str]) -> bool:
    if env.get("RUNNER_TEST_NO_ZYGOTE") == "1" or (args and args[0] == "web"):
        return False
    with _ZYGOTE_LOCK:
        mine = _ZYGOTE.get(os.getpid())
    base = mine[2] if mine is not None else dict(os.environ)  # the server's environment
    return all(env.get(k) == base.get(k) for k in set(env) | set(base) if k.startswith(_AT_START))


_ZYGOTE: dict[int, tuple[subprocess.Popen[bytes], str, dict[str, str]]] = {}
_ZYGOTE_LOCK = threading.Lock()


def _zygote_path() -> str:
    with _ZYGOTE_LOCK:
        mine = _ZYGOTE.get(os.getpid())
        if mine is not None and mine[0].poll() is None:
            return mine[1]
        path = tempfile.mkdtemp(prefix="runner-cli-") + "/sock"
        started_env = dict(os.environ)
        proc = subprocess.Popen([sys.executable, "-m", "tests.clizygote", path], cwd=ROOT,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=started_env)
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n", "the CLI zygote did not start"
        _ZYGOTE[os.getpid()] = (proc, path, started_env)
        return path


class ForkedProcess:
    """A ``runner ...`` process forked from tests/clizygote.py, with what subprocess.Popen
    gives: ``pid``, ``args``, ``returncode``, ``poll()``, ``wait(timeout)``,
    ``send_signal()``, ``terminate()``, ``kill()``. ``stdin``/``stdout``/``stderr`` are file
    descriptors the child gets as its own (as a subprocess inherits them). Signals go to the
    child's own pid; with ``session`` it has a session and process group of its own, else it
    is in the caller's (the server's), as a subprocess is. The server is its parent: it reaps
    it and reports the exit status (``-N``: killed by signal N)."""

    stdin = stdout = stderr = None  # as a Popen without pipes

    def __init__(self, args: list[str], env: dict[str, str], cwd: str, stdin: int, stdout: int,
                 stderr: int, session: bool = False) -> None:
        self.args = runner_cmd(*args)
        self.returncode: int | None = None
        self._buffer = b""
        self._conn: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._conn.connect(_zygote_path())
            request = (json.dumps({"args": args, "env": env, "cwd": cwd, "session": session}) + "\n").encode()
            sent = socket.send_fds(self._conn, [request], [stdin, stdout, stderr])
            self._conn.sendall(request[sent:])
            line = self._line(60)
            assert line is not None, "the CLI zygote did not fork within 60 s"
            answer = json.loads(line)
            if "pid" not in answer:  # it ended while setting up (its error is on its stderr)
                raise RuntimeError(f"the forked {' '.join(args[:1])} ended at once: {answer}")
            self.pid: int = answer["pid"]
        except BaseException:
            self._conn.close()
            raise

    def _line(self, timeout: float | None) -> bytes | None:
        """The next answer line, or None if none came within ``timeout`` (None: no limit)."""
        assert self._conn is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            if not select.select([self._conn], [], [], left)[0]:
                return None
            more = self._conn.recv(4096)
            if not more:
                raise RuntimeError(f"the CLI zygote went away before reporting on pid {getattr(self, 'pid', '?')}")
            self._buffer += more
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _collect(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            line = self._line(timeout)
            if line is not None:
                self.returncode = int(json.loads(line)["code"])
                assert self._conn is not None
                self._conn.close()
                self._conn = None
        return self.returncode

    def poll(self) -> int | None:
        return self._collect(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: never a signal to a pid already reaped
            # the server reaps the child before its code reaches us: between the two, the pid
            # is gone (ESRCH) although poll() still says running
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __del__(self) -> None:
        if getattr(self, "_conn", None) is not None:
            self._conn.close()  # type: ignore[union-attr]


def _inherited_stdin() -> int:
    try:
        os.fstat(0)
    except OSError:
        return -1
    return 0


def _zygote_run(args: list[str], env: dict[str, str], cwd: str, timeout: float,
                stdin: str | None) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="runner-cli-call-") as tmp:
        files = {name: os.path.join(tmp, name) for name in ("stdin", "stdout", "stderr")}
        Path(files["stdin"]).write_text(stdin or "")
        with open(files["stdin"], "rb") as fin, open(files["stdout"], "wb") as fout, \
                open(files["stderr"], "wb") as ferr:
            proc = ForkedProcess(args, env, cwd, fin.fileno(), fout.fileno(), ferr.fileno(), session=True)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        return subprocess.CompletedProcess(runner_cmd(*args), code, Path(files["stdout"]).read_text(),
                                           Path(files["stderr"]).read_text())


class RunnerProcess:
    """A real ``runner start`` process: forked from tests/clizygote.py (ForkedProcess) where a
    fork sees what a fresh ``python -m runner start`` would, else a plain subprocess. Its
    output (stdout and stderr) goes to ``log``; ``proc`` is Popen-like either way."""

    def __init__(self, app: str, url: str, *extra: str, env: dict[str, str] | None = None,
                 log: Path | None = None) -> None:
        self.log_path = log
        self._log = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115
        args = ("start", "--app", app, *extra)
        full_env = {**os.environ, "RUNNER_DATABASE_URL": url, **(env or {})}
        self.proc: subprocess.Popen[bytes] | ForkedProcess
        if _forkable(args, full_env):
            with open(os.devnull, "r+b") as devnull:
                out = devnull.fileno() if self._log is subprocess.DEVNULL else self._log.fileno()  # type: ignore[union-attr]
                stdin = _inherited_stdin()
                self.proc = ForkedProcess(list(args), full_env, str(ROOT),
                                          devnull.fileno() if stdin < 0 else stdin, out, out)
        else:
            self.proc = subprocess.Popen(runner_cmd(*args), env=full_env, stdout=self._log,
                                         stderr=subprocess.STDOUT, cwd=ROOT)

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM and wait; the exit code (a process already gone keeps its own code). A
        process still there after ``timeout`` is killed and the wait's TimeoutExpired raised,
        its log closed either way (an open log would fail a later test as a ResourceWarning)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise
        finally:
            self._close_log()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not subprocess.DEVNULL and not self._log.closed:  # type: ignore[union-attr]
            self._log.close()  # type: ignore[union-attr]

    def output(self) -> str:
        return self.log_path.read_text() if self.log_path else ""


@contextmanager
def running_worker(app: Any, url: str, **config: Any) -> Iterator[Any]:
    """A ``Worker`` of ``app`` running its loop in a thread (in-process runner), stopped and
    joined on exit. ``config``: LoopConfig fields (default 4 workers, 0.05 s poll)."""
    from runner.worker.loop import LoopConfig, Worker

    worker = Worker(app, url, LoopConfig(**{"workers": 4, "poll_interval": 0.05, **config}))
    worker.start()
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive()


def assert_ledger_clean(url: str, since: Any = None) -> None:
    """The ledger audit (``runner check``, runner.check_v1) finds nothing: every scenario that
    runs real loops ends with this."""
    from runner.actions import audit

    with psycopg.connect(url, autocommit=True) as conn:
        found = audit.violations(conn, since=since)
    assert not found, "the ledger audit (runner check) found violations:\n" + audit.describe(found)
