"""1,000 async handlers sleeping at once in one `runner start` process: threads, connections, RSS.

    python scripts/bench/async_sleepers.py [--handlers 1000] [--sleep 5] [--repeat 1] [--sync]

One job with N partitions falls due at one instant (every="30s"); its handler is
``async def`` and does nothing but ``await asyncio.sleep(S)``. One `runner start` process runs
it with ``--workers 4 --async-workers N --max-inflight N``. While the handlers sleep, the
script samples, every 50 ms, how many of the slot's runs are running (ledger), the process's
threads (/proc/PID/task), its resident memory (/proc/PID/status VmRSS) and the connections
open to the scratch database (pg_stat_activity, the script's own excluded); it reports the
peak of each, the same figures idle just before the slot, and the time from the slot until
all N runs succeeded (S plus the runner's overhead if they ran at once; N x S / bound if
not). With --sync, the same again with a plain ``def`` handler doing ``time.sleep(S)`` and
``--workers N``, for contrast (N handler threads). Fresh scratch database per run.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runner.store import migrate  # noqa: E402

APP_ASYNC = '''
import asyncio
from runner import Runner
app = Runner()

@app.job("sleepers", every="30s", partitions=[str(i) for i in range({n})], grace="1h")
async def sleeper(ctx):
    await asyncio.sleep({sleep})
'''

APP_SYNC = '''
import time
from runner import Runner
app = Runner()

@app.job("sleepers", every="30s", partitions=[str(i) for i in range({n})], grace="1h")
def sleeper(ctx):
    time.sleep({sleep})
'''


def proc_figures(pid: int) -> tuple[int, float]:
    """(threads, RSS MiB) of a process."""
    threads = len(os.listdir(f"/proc/{pid}/task"))
    rss_kib = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss_kib = int(line.split()[1])
    return threads, rss_kib / 1024


def measure(admin: str, handlers: int, sleep: float, is_async: bool) -> dict[str, Any]:
    info = psycopg.conninfo.conninfo_to_dict(admin)
    name = "bench_async_sleepers"
    url = f"postgresql://{info.get('user', 'postgres')}@{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    migrate.upgrade(url)
    tmp = Path(tempfile.mkdtemp())
    (tmp / "app.py").write_text((APP_ASYNC if is_async else APP_SYNC).format(n=handlers, sleep=sleep))
    flags = (["--workers", "4", "--async-workers", str(handlers)] if is_async
             else ["--workers", str(handlers)])
    proc = None
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            now = conn.execute("SELECT now()").fetchone()[0]
            slot = datetime.fromtimestamp((int(now.timestamp()) // 30 + 1) * 30, UTC)
            if (slot - now).total_seconds() < 8:
                slot += timedelta(seconds=30)
            time.sleep(max((slot - now).total_seconds() - 6, 0))
            proc = subprocess.Popen(
                [sys.executable, "-m", "runner", "start", "--app", f"{tmp / 'app.py'}:app", *flags,
                 "--max-inflight", str(handlers), "--log-level", "WARNING"],
                env={**os.environ, "RUNNER_DATABASE_URL": url}, cwd=ROOT,
                stderr=open(tmp / "runner.log", "w"))  # noqa: SIM115
            connections = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                           " AND pid <> pg_backend_pid()")
            running = "SELECT count(*) FROM runner.job_runs WHERE schedule_slot = %s AND status = 'running'"
            succeeded = "SELECT count(*) FROM runner.job_runs WHERE schedule_slot = %s AND status = 'succeeded'"
            while (datetime.now(UTC) - slot).total_seconds() < -0.3:
                time.sleep(0.05)
            idle_threads, idle_rss = proc_figures(proc.pid)
            idle_conns = conn.execute(connections).fetchone()[0]
            peak = {"running": 0, "threads": 0, "rss_mib": 0.0, "connections": 0}
            at_peak: dict[str, Any] = {}
            deadline = time.monotonic() + 60 + sleep * (1 if is_async else 2)
            done = 0
            while time.monotonic() < deadline:
                n_running = conn.execute(running, (slot,)).fetchone()[0]
                threads, rss = proc_figures(proc.pid)
                conns = conn.execute(connections).fetchone()[0]
                if n_running > peak["running"]:
                    at_peak = {"threads": threads, "rss_mib": rss, "connections": conns}
                peak = {"running": max(peak["running"], n_running), "threads": max(peak["threads"], threads),
                        "rss_mib": max(peak["rss_mib"], rss), "connections": max(peak["connections"], conns)}
                done = conn.execute(succeeded, (slot,)).fetchone()[0]
                if done == handlers:
                    break
                time.sleep(0.05)
            last = conn.execute("SELECT max(finished_at) FROM runner.job_runs WHERE schedule_slot = %s",
                                (slot,)).fetchone()[0]
            first = conn.execute("SELECT min(a.started_at), max(a.started_at) FROM runner.attempts a"
                                 " JOIN runner.job_runs r ON r.id = a.run_id WHERE r.schedule_slot = %s",
                                 (slot,)).fetchone()
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return {"kind": "async" if is_async else "sync", "handlers": handlers, "succeeded": done,
            "peak_running": peak["running"], "idle_threads": idle_threads, "idle_rss_mib": idle_rss,
            "idle_connections": idle_conns, "peak_threads": peak["threads"], "peak_rss_mib": peak["rss_mib"],
            "peak_connections": peak["connections"], "at_peak": at_peak,
            "all_started_s": (first[1] - slot).total_seconds() if first[1] else None,
            "all_done_s": (last - slot).total_seconds() if last else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--handlers", type=int, default=1000)
    parser.add_argument("--sleep", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--sync", action="store_true", help="also the sync equivalent (N handler threads)")
    args = parser.parse_args()
    kinds = [True, False] if args.sync else [True]
    results: list[dict[str, Any]] = []
    for i in range(args.repeat):
        for is_async in kinds:
            r = measure(args.dsn, args.handlers, args.sleep, is_async)
            results.append(r)
            print(f"round {i + 1}: {r}", file=sys.stderr)
    print(f"{args.handlers} handlers sleeping {args.sleep:g} s, one `runner start`"
          f" (async: --workers 4 --async-workers {args.handlers}; sync: --workers {args.handlers});"
          f" medians of {args.repeat}")
    print(f"{'kind':<6} {'ran at once':>11} {'all done s':>10} {'threads idle/peak':>18}"
          f" {'connections idle/peak':>22} {'RSS MiB idle/peak':>18}")
    for kind in ("async", "sync"):
        rs = [r for r in results if r["kind"] == kind]
        if not rs:
            continue

        def med(key: str, rs: list[dict[str, Any]] = rs) -> float:
            return statistics.median(r[key] for r in rs)

        print(f"{kind:<6} {med('peak_running'):>11.0f} {med('all_done_s'):>10.2f}"
              f" {med('idle_threads'):>8.0f} / {med('peak_threads'):<7.0f}"
              f" {med('idle_connections'):>11.0f} / {med('peak_connections'):<8.0f}"
              f" {med('idle_rss_mib'):>8.0f} / {med('peak_rss_mib'):.0f}")


if __name__ == "__main__":
    main()
