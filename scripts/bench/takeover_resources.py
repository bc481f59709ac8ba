"""Takeover time after kill -9, and connections/RSS per runner process.

    python scripts/bench/takeover_resources.py [--repeat 5] [--handlers 1 100 1000]

Takeover: two `runner start` processes; the owner of a running run (its handler blocks) is
killed with SIGKILL; the time from the kill (database clock, read just before the signal)
to the start of the recovery attempt (the takeover statement's database clock) is read from
the ledger. The default poll interval (1 s) bounds it; median of --repeat.

Resources: one `runner start --workers N` process whose N handlers are all running at once
(each sleeps, holding no ctx.db connection, then one variant where each holds ctx.db); the
connections of that process (pg_stat_activity by application_name and client port) and its
RSS from /proc. The N runs are of a slot missed before the process started, so they are
catch-up runs of the correction lane, to which a process serving every lane gives only part
of its --workers, and it starts every lane's handler threads at once
(runner/worker/lanes.py, executor.py): the job is in that lane and the process serves it alone
(`--lanes correction`), so its N slots are that lane's and the figures are N handlers' own. The ctx.db
variant needs N more connections than the server has free (max_connections, shared): it is
skipped, saying so, when they are not free. A run that does not get its N handlers running
stops with the ledger's counts by lane and status and the runner's log, not a bare timeout.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchrecord  # noqa: E402

from runner.store import migrate  # noqa: E402

TAKEOVER_APP = '''
import time
from datetime import UTC, datetime, timedelta
from runner import Runner
app = Runner()

@app.job("hold", every="1h", track_from=datetime.now(UTC) - timedelta(hours=1))
def hold(ctx):
    if ctx.attempt == 1:
        time.sleep(3600)  # the owner is killed while this runs
'''

RESOURCE_APP = '''
import time
from datetime import UTC, datetime, timedelta
from runner import Runner
app = Runner()
N = {n}

@app.job("hold", every="1h", partitions=[str(i) for i in range(N)], lane="correction",
         track_from=datetime.now(UTC) - timedelta(hours=1))
def hold(ctx):
    if {use_db}:
        ctx.db.execute("SELECT 1")
    time.sleep(3600)
'''


def scratch(admin: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(admin)
    url = f"postgresql://{info.get('user', 'postgres')}@{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    migrate.upgrade(url)
    return url


def drop(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait(check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise TimeoutError("condition not met")


def start(url: str, app: Path, *extra: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    with open(log or os.devnull, "wb") as stderr:  # the child keeps its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-m", "runner", "start", "--app", f"{app}:app",
                                 "--log-level", "WARNING", *extra],
                                env={**os.environ, "RUNNER_DATABASE_URL": url}, cwd=ROOT, stderr=stderr)


class Stalled(RuntimeError):
    """The N handlers did not all run: the message says what the ledger and the runner showed."""


def free_connections(admin: str) -> tuple[int, int]:
    """(connections a new client may still open, max_connections) on the server right now."""
    with psycopg.connect(admin, autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_setting('max_connections')::int,"
            " current_setting('superuser_reserved_connections')::int,"
            " (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')").fetchone()
    assert row is not None
    limit, reserved, used = row
    return limit - reserved - used, limit


def stalled(conn: psycopg.Connection[Any], n: int, proc: subprocess.Popen[bytes], log: Path,
            waited: float) -> Stalled:
    counts = conn.execute("SELECT lane, status, count(*) FROM runner.job_runs GROUP BY 1, 2 ORDER BY 1, 2"
                          ).fetchall()
    ledger = ", ".join(f"{lane} {status} {k}" for lane, status, k in counts) or "no runs"
    exited = proc.poll()
    tail = log.read_text(errors="replace").strip().splitlines()[-5:]
    return Stalled(f"{n} handlers: not all running after {waited:.0f} s (runs by lane and status: {ledger};"
                   " pending runs wait for their lane's handler slots, runner start --lane-slots); "
                   + (f"the runner exited with code {exited}" if exited is not None else "the runner is alive")
                   + ("; its last log lines:\n  " + "\n  ".join(tail) if tail else "; it logged no warning"))


def takeover_once(admin: str) -> float:
    name = "bench_takeover"
    url = scratch(admin, name)
    app = Path(tempfile.mkdtemp()) / "takeover_app.py"
    app.write_text(TAKEOVER_APP)
    a = start(url, app, "--grace", "0")
    b = None
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            wait(lambda: conn.execute("SELECT count(*) FROM runner.attempts a JOIN runner.instances i"
                                      " ON i.instance_id = a.owner_instance WHERE i.pid = %s AND a.status = 'running'",
                                      (a.pid,)).fetchone()[0] == 1)
            b = start(url, app, "--grace", "0")
            wait(lambda: conn.execute("SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL"
                                      ).fetchone()[0] == 2)
            # kill at a random phase of b's takeover pass (every poll interval, 1 s)
            time.sleep(1 + random.random())
            killed = conn.execute("SELECT clock_timestamp()").fetchone()[0]
            a.kill()
            recovered = wait(lambda: conn.execute("SELECT started_at FROM runner.attempts WHERE attempt = 2"
                                                  ).fetchone(), 30)[0]
    finally:
        a.kill()
        a.wait()
        if b:
            b.kill()
            b.wait()
        drop(admin, name)
    return (recovered - killed).total_seconds()


def resources(admin: str, n: int, use_db: bool, timeout: float) -> dict[str, Any]:
    name = "bench_resources"
    url = scratch(admin, name)
    tmp = Path(tempfile.mkdtemp())
    app, log = tmp / "resource_app.py", tmp / "runner.log"
    app.write_text(RESOURCE_APP.format(n=n, use_db=use_db))
    # catch-up runs are the correction lane's: the process serves it alone (module docstring)
    proc = start(url, app, "--workers", str(n), "--lanes", "correction", "--grace", "0", log=log)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            began = time.monotonic()
            try:
                wait(lambda: proc.poll() is not None or conn.execute(
                    "SELECT count(*) FROM runner.job_runs WHERE status = 'running'").fetchone()[0] == n, timeout)
            except TimeoutError:
                raise stalled(conn, n, proc, log, time.monotonic() - began) from None
            if proc.poll() is not None:
                raise stalled(conn, n, proc, log, time.monotonic() - began)
            time.sleep(1)  # let pools settle before reading
            conns = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
                                 " AND application_name LIKE 'runner%%' AND pid <> pg_backend_pid()",
                                 (name,)).fetchone()[0]
        status = Path(f"/proc/{proc.pid}/status").read_text()
        rss = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))
        threads = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads")))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        drop(admin, name)
    return {"handlers": n, "ctx_db": use_db, "connections": conns, "rss_mib": rss / 1024, "threads": threads}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--handlers", type=int, nargs="*", default=[1, 100, 1000])
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds the N handlers get to be all running (default 120)")
    benchrecord.add_option(parser)
    args = parser.parse_args()
    if any(n < 1 or n > 1000 for n in args.handlers):
        parser.error("--handlers: each N must be 1 to 1000 (runner start --workers)")
    figures: list[dict[str, Any]] = []
    if args.repeat:
        samples = [takeover_once(args.dsn) for _ in range(args.repeat)]
        print(f"takeover after kill -9: median {statistics.median(samples):.3f} s, "
              f"max {max(samples):.3f} s, samples {', '.join(f'{s:.3f}' for s in samples)}")
        figures += [{"label": "median", "values": {"takeover_s": statistics.median(samples)}, "samples": samples},
                    {"label": "max", "values": {"takeover_s": max(samples)}}]
    if args.handlers:
        print(f"{'handlers':>8} {'ctx.db':>7} {'connections':>12} {'RSS MiB':>8} {'threads':>8}")
        for n in args.handlers:
            for use_db in (False, True):
                if use_db:  # one connection per running ctx.db, on top of the process's own few
                    free, limit = free_connections(args.dsn)
                    if n + 5 > free:
                        print(f"{n:>8} {'True':>7} skipped: {n} handlers holding ctx.db need about {n + 5}"
                              f" connections, the server has {free} free (max_connections {limit})")
                        continue
                try:
                    r = resources(args.dsn, n, use_db, args.timeout)
                except Stalled as exc:
                    sys.exit(f"takeover_resources: {exc}")
                print(f"{r['handlers']:>8} {r['ctx_db']!s:>7} {r['connections']:>12} {r['rss_mib']:>8.1f}"
                      f" {r['threads']:>8}")
                figures.append({"label": f"{n:,} handler{'s' if n > 1 else ''}" + (", ctx.db" if use_db else ""),
                                "values": {k: r[k] for k in ("handlers", "connections", "rss_mib", "threads")}})
    if args.record and figures:
        benchrecord.write(args.record, benchrecord.make(
            "takeover", f"seconds from kill -9 of a run's owner to another runner's attempt (median and max of"
            f" {args.repeat}), and one process's connections and RSS by running handlers", "s", figures))


if __name__ == "__main__":
    main()
