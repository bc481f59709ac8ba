"""Where the time goes at a wide instant: one JOBSxPARTITIONS slot, two `runner start`, read
back from the ledger.

    python scripts/bench/wide_profile.py [--shape 1x10000] [--every 10] [--processes 2]
        [--workers 100] [--max-inflight 1000] [--py-spy DIR] [--auto-explain MS] [--json]

Same app and flags as scripts/bench/wide_instants.py; one warm-up slot, then one measured
slot. From the ledger of that slot: every claim statement (runs sharing one process's
attempt ``started_at``, which is the statement's database clock) with its process, its size
and its start after the slot instant; the runs each process won; the lag histogram (100 ms
buckets); and, per run, the time from its claim to its outcome being recorded (attempt
``finished_at``: the completer's statement clock), which is how long a run holds its place in
the in-flight window. --py-spy DIR records both processes during the measured slot
(``py-spy record -n -f raw``, 4 s from 1 s before the slot, 50 Hz, the thread holding the GIL, not pausing them; needs py-spy and ptrace rights). --auto-explain MS
sets ``session_preload_libraries = auto_explain`` on the scratch database with that
``log_min_duration`` (the server log shows the plans of slower statements).
CPU seconds of the runner processes and of their database backends over the measured slot
(from 0.5 s before it, /proc) say what the runs cost, whatever the machine's load.
The scratch database (``wide_profile``) is dropped afterwards unless BENCH_KEEP_DB is set.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from benchlib import DEFAULT_DSN, drop_database, install_cleanup, percentile, recreate_database, scratch_dir  # noqa: E402
from wide_instants import APP, url_of  # noqa: E402

from runner.store import migrate  # noqa: E402

RUNS = ("SELECT a.owner_pid, extract(epoch FROM a.started_at - r.schedule_slot)::float8,"
        " extract(epoch FROM a.finished_at - a.started_at)::float8"
        " FROM runner.job_runs r JOIN runner.attempts a ON a.run_id = r.id AND a.attempt = 1"
        " WHERE r.schedule_slot = to_timestamp(%s)")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, all its threads, from /proc (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_of(conn: psycopg.Connection[Any], procs: list[subprocess.Popen[bytes]]) -> dict[str, float]:
    backends = [r[0] for r in conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        " AND application_name LIKE 'runner%%'").fetchall()]
    return {"runners": sum(cpu_seconds(p.pid) for p in procs), "backends": sum(cpu_seconds(b) for b in backends)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--shape", default="1x10000")
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--max-inflight", type=int, default=1000)
    parser.add_argument("--py-spy", type=Path, default=None)
    parser.add_argument("--auto-explain", type=int, default=0)
    parser.add_argument("--log-durations", action="store_true",
                        help="log_min_duration_statement = 0 on the scratch database (server log)")
    parser.add_argument("--prelude", default="", help="Python run by the app module first (experiments)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    install_cleanup()
    jobs, partitions = (int(x) for x in args.shape.lower().split("x"))
    name = "wide_profile"
    url = url_of(recreate_database(args.dsn, name))
    migrate.upgrade(url)
    if args.auto_explain:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE {name} SET session_preload_libraries = 'auto_explain'")
            conn.execute(f"ALTER DATABASE {name} SET auto_explain.log_min_duration = {int(args.auto_explain)}")
            conn.execute(f"ALTER DATABASE {name} SET auto_explain.log_nested_statements = on")
            conn.execute(f"ALTER DATABASE {name} SET auto_explain.log_analyze = on")
    if args.log_durations:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE {name} SET log_min_duration_statement = 0")
            conn.execute(f"ALTER DATABASE {name} SET log_parameter_max_length = 0")
    procs: list[subprocess.Popen[bytes]] = []
    with scratch_dir("wideprof_") as tmp:
        (tmp / "wide_app.py").write_text(args.prelude + "\n" + APP.format(jobs=jobs, partitions=partitions, every=args.every))
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                for i in range(args.processes):
                    procs.append(subprocess.Popen(
                        [sys.executable, "-m", "runner", "start", "--app", f"{tmp / 'wide_app.py'}:app",
                         "--workers", str(args.workers), "--max-inflight", str(args.max_inflight),
                         "--log-level", "WARNING"],
                        env={**os.environ, "RUNNER_DATABASE_URL": url}, cwd=ROOT,
                        stderr=open(tmp / f"r{i}.log", "wb")))  # noqa: SIM115
                live = "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL"
                while conn.execute(live).fetchone()[0] < args.processes:
                    if any(p.poll() is not None for p in procs):
                        raise RuntimeError((tmp / "r0.log").read_text()[-2000:])
                    time.sleep(0.1)
                now = conn.execute("SELECT extract(epoch FROM now())::float8").fetchone()[0]
                slot = (int(now + 2) // args.every + 2) * args.every
                spies = []
                if args.py_spy:
                    args.py_spy.mkdir(parents=True, exist_ok=True)
                    time.sleep(max(slot - 1 - time.time(), 0))
                    spies = [subprocess.Popen(["py-spy", "record", "-n", "--gil", "-r", "50", "-d", "4", "-f", "raw",
                                               "-o", str(args.py_spy / f"r{i}.txt"), "-p", str(p.pid)],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                             for i, p in enumerate(procs)]
                time.sleep(max(slot - 0.5 - time.time(), 0))
                cpu0 = cpu_of(conn, procs)
                time.sleep(max(slot + min(args.every - 1, 6) - time.time(), 0))
                cpu1 = cpu_of(conn, procs)
                for s in spies:
                    try:
                        s.wait(30)
                    except subprocess.TimeoutExpired:
                        s.kill()
                rows = conn.execute(RUNS, (slot,)).fetchall()
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(60)
            drop_database(args.dsn, name)
    stmts: dict[tuple[int, float], int] = Counter((pid, round(lag, 6)) for pid, lag, _ in rows)
    by_pid: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for (pid, lag), n in sorted(stmts.items(), key=lambda kv: kv[0][1]):
        by_pid[pid].append((lag, n))
    lags = [lag for _, lag, _ in rows]
    held = [h for _, _, h in rows if h is not None]
    hist = Counter(int(lag * 10) for lag in lags)
    report: dict[str, Any] = {
        "shape": args.shape, "runs": len(rows), "expected": jobs * partitions,
        "p50_ms": percentile(lags, 50) * 1000, "p99_ms": percentile(lags, 99) * 1000,
        "max_ms": max(lags) * 1000,
        "claim_to_recorded_p50_ms": percentile(held, 50) * 1000,
        "claim_to_recorded_p99_ms": percentile(held, 99) * 1000,
        "cpu_s": {k: round(cpu1[k] - cpu0[k], 2) for k in cpu0},
        "histogram_100ms": {f"{k / 10:.1f}": hist[k] for k in sorted(hist)},
        "claims": {str(pid): [{"at_ms": round(lag * 1000, 1), "won": n} for lag, n in v]
                   for pid, v in by_pid.items()},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.shape}: {len(rows)}/{jobs * partitions} runs, p50 {report['p50_ms']:.0f} ms, "
          f"p99 {report['p99_ms']:.0f} ms, max {report['max_ms']:.0f} ms; claim -> outcome recorded "
          f"p50 {report['claim_to_recorded_p50_ms']:.0f} ms, p99 {report['claim_to_recorded_p99_ms']:.0f} ms")
    print(f"CPU over the slot (from 0.5 s before it): runner processes {report['cpu_s']['runners']} s, "
          f"their database backends {report['cpu_s']['backends']} s")
    print("lags, 100 ms buckets:", ", ".join(f"{k}s:{v}" for k, v in report["histogram_100ms"].items()))
    for pid, v in by_pid.items():
        print(f"process {pid}: {sum(n for _, n in v)} runs in {len(v)} claim statements: "
              + ", ".join(f"{lag * 1000:.0f}ms:{n}" for lag, n in v))


if __name__ == "__main__":
    main()
