"""A ledger that is old: the runner's figures on 1M and 10M seeded runs.

    python scripts/bench/ledger_age.py [--rows 1000000 10000000] [--jobs 1000] [--days-per-million 3]

For each size: a scratch database, migrated; the jobs and runs of scripts/bench/gap_scan.py
(a mix of every= and cron= jobs in several zones, static and dynamic partitions; mostly succeeded, some skipped, coalesced, failed, dead, some slots without a
run), COPYed, tracked from `--days-per-million` x millions of runs days ago: the same jobs
at the same rate at every size, so a larger ledger is an older one, not a busier one
(1M: 3 days, 10M: 30 days); one attempt per run (INSERT ... SELECT from the runs); the gap-scan watermarks
advanced once. Then, on that ledger:

  * bytes per million runs: runner.job_runs and runner.attempts, tables and indexes;
  * the gap scan: SELECT count(*) FROM runner.missing_slots (median of --repeat);
  * `runner status --json` and `runner runs --job J --json` as commands (wall time, median),
    and the statements behind them alone (SQL time);
  * claim throughput: two `runner start` processes drain one slot of a job with
    --partitions partitions (runs/s from the ledger, as scripts/bench/runner_throughput.py);
  * pruning rate: every job given a 1-hour retention, --prune-passes passes of
    runner.prune_v1(--prune-batch), runs deleted per second.

The scratch database is dropped afterwards (BENCH_KEEP_DB=1 keeps it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from benchlib import DEFAULT_DSN, drop_database, environment, median, print_table, recreate_database  # noqa: E402
from gap_scan import define_jobs, seed, url_of  # noqa: E402

from runner import migrate  # noqa: E402

APP = '''
from runner import Runner
app = Runner()

@app.job("fanout", every="30s", partitions=[str(i) for i in range({n})], grace="1h")
def fanout(ctx):
    pass
'''

SIZES = ("SELECT relname, pg_table_size(c.oid), pg_indexes_size(c.oid) FROM pg_class c"
         " JOIN pg_namespace n ON n.oid = c.relnamespace"
         " WHERE n.nspname = 'runner' AND c.relname IN ('job_runs', 'attempts')")
ATTEMPTS = ("INSERT INTO runner.attempts (run_id, attempt, fence, trigger, owner_host, owner_pid,"
            " owner_instance, lock_key, status, started_at, heartbeat_at, finished_at)"
            " SELECT r.id, 1, 1, 'schedule', 'bench', 1, '00000000-0000-0000-0000-000000000001', r.id,"
            " CASE r.status WHEN 'succeeded' THEN 'succeeded' WHEN 'dead' THEN 'dead' ELSE 'failed' END,"
            " r.started_at, r.started_at, r.started_at FROM runner.job_runs r"
            " WHERE r.status IN ('succeeded', 'failed', 'dead')")


def timed(conn: psycopg.Connection[Any], statement: str, params: Any = None) -> float:
    t = time.perf_counter()
    conn.execute(statement, params).fetchall()
    return time.perf_counter() - t


def command_time(url: str, *args: str) -> float:
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "runner", *args], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "RUNNER_DATABASE_URL": url}, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"runner {' '.join(args)} failed: {out.stderr.strip()[:300]}")
    return time.perf_counter() - t


def claim_throughput(url: str, partitions: int) -> float:
    """Two `runner start` processes drain one slot of `partitions` runs; runs per second."""
    app_dir = Path(tempfile.mkdtemp())
    (app_dir / "bench_app.py").write_text(APP.format(n=partitions))
    env = {**os.environ, "RUNNER_DATABASE_URL": url}
    procs = []
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            now = conn.execute("SELECT now()").fetchone()[0]
            slot = datetime.fromtimestamp((int(now.timestamp()) // 30 + 1) * 30, UTC)
            if (slot - now).total_seconds() < 10:
                slot += timedelta(seconds=30)
            time.sleep(max((slot - now).total_seconds() - 8, 0))
            for i in range(2):
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "runner", "start", "--app", str(app_dir / "bench_app.py") + ":app",
                     "--workers", "16", "--max-inflight", "512", "--log-level", "WARNING"],
                    env=env, cwd=ROOT, stderr=open(app_dir / f"r{i}.log", "w")))  # noqa: SIM115
            deadline = time.monotonic() + 300
            while conn.execute("SELECT count(*) FROM runner.job_runs WHERE job_name = 'fanout'"
                               " AND schedule_slot = %s AND status = 'succeeded'", (slot,)).fetchone()[0] < partitions:
                if time.monotonic() > deadline:
                    raise RuntimeError("the slot was not drained in 300 s")
                time.sleep(0.05)  # polling the outcome, as runner_throughput.py does
            last = conn.execute("SELECT max(finished_at) FROM runner.job_runs WHERE job_name = 'fanout'"
                                " AND schedule_slot = %s", (slot,)).fetchone()[0]
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
    return partitions / (last - slot).total_seconds()


def measure(admin: str, rows: int, jobs: int, days: int, repeat: int, partitions: int,
            prune_batch: int, prune_passes: int) -> dict[str, Any]:
    name = f"bench_ledger_age_{rows}"
    dsn = recreate_database(admin, name)
    url = url_of(dsn)
    try:
        migrate.upgrade(url)
        with psycopg.connect(url, autocommit=True) as conn:
            now: datetime = conn.execute("SELECT now()").fetchone()[0].astimezone(UTC)
        since = now - timedelta(days=days)
        rng = random.Random(rows)
        defs = define_jobs(jobs, rows, days, since, rng)
        t = time.perf_counter()
        seeded = seed(url, defs, since, now, rng, 7000 / rows)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(ATTEMPTS)
            conn.execute("VACUUM ANALYZE runner.attempts")
            seed_s = time.perf_counter() - t
            t = time.perf_counter()
            conn.execute("SELECT runner.advance_watermarks_v1()")
            first_advance_s = time.perf_counter() - t
            sizes = {r[0]: (r[1], r[2]) for r in conn.execute(SIZES)}
            busiest = conn.execute("SELECT job_name FROM runner.job_runs GROUP BY 1 ORDER BY count(*) DESC"
                                   " LIMIT 1").fetchone()[0]
            gap = median([timed(conn, "SELECT count(*) FROM runner.missing_slots") for _ in range(repeat)])
            conn.execute("SET TIME ZONE 'UTC'")
            health_sql = median([timed(conn, "SELECT * FROM runner.job_health") for _ in range(repeat)])
            alerts_sql = median([timed(conn, "SELECT * FROM runner.alerts") for _ in range(repeat)])
            runs_sql = median([timed(conn, "SELECT * FROM runner.job_runs WHERE job_name = %s"
                                           " ORDER BY schedule_slot DESC, partition_key LIMIT 100", (busiest,))
                               for _ in range(repeat)])
        status_cmd = median([command_time(url, "status", "--json") for _ in range(repeat)])
        runs_cmd = median([command_time(url, "runs", "--job", busiest, "--json") for _ in range(repeat)])
        claim = claim_throughput(url, partitions)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("""UPDATE runner.jobs SET options = options || '{"retention": {"succeeded_seconds": 3600,"""
                         """ "failed_seconds": 3600}}'""")
            pruned = 0
            t = time.perf_counter()
            for _ in range(prune_passes):
                pruned += conn.execute("SELECT count(*) FROM runner.prune_v1(%s)", (prune_batch,)).fetchone()[0]
            prune_s = time.perf_counter() - t
        per_m = 1_000_000 / seeded
        return {
            "rows": seeded, "jobs": jobs, "days": days, "seed_s": round(seed_s, 1),
            "first_advance_s": round(first_advance_s, 2),
            "runs_bytes_per_m": {"table": int(sizes["job_runs"][0] * per_m), "indexes": int(sizes["job_runs"][1] * per_m)},
            "attempts_bytes_per_m": {"table": int(sizes["attempts"][0] * per_m),
                                     "indexes": int(sizes["attempts"][1] * per_m)},
            "gap_scan_s": gap, "job_health_sql_s": health_sql, "alerts_sql_s": alerts_sql,
            "runs_job_sql_s": runs_sql, "status_cmd_s": status_cmd, "runs_job_cmd_s": runs_cmd,
            "claim_runs_per_s": round(claim), "pruned": pruned, "prune_runs_per_s": round(pruned / prune_s),
        }
    finally:
        if not os.environ.get("BENCH_KEEP_DB"):
            drop_database(admin, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="an admin DSN (scratch databases are made on its server)")
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--days-per-million", type=float, default=3.0,
                        help="days of history per million runs (the same job rates at every size)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=5000, help="runs of the drained slot (claim throughput)")
    parser.add_argument("--prune-batch", type=int, default=5000)
    parser.add_argument("--prune-passes", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [measure(args.dsn, n, args.jobs, max(1, round(n / 1e6 * args.days_per_million)), args.repeat, args.partitions, args.prune_batch,
                       args.prune_passes) for n in args.rows]
    if args.json:
        print(json.dumps({"environment": environment(args.dsn), "results": results}, indent=2, default=str))
        return
    print_table(
        ["runs", "days", "gap scan s", "job_health s", "alerts s", "runs --job SQL s", "status cmd s", "runs --job cmd s",
         "claim runs/s", "prune runs/s", "job_runs B/M (table+idx)", "attempts B/M (table+idx)", "seed s"],
        [[r["rows"], r["days"], r["gap_scan_s"], r["job_health_sql_s"], r["alerts_sql_s"], r["runs_job_sql_s"],
          r["status_cmd_s"], r["runs_job_cmd_s"], r["claim_runs_per_s"], r["prune_runs_per_s"],
          f"{r['runs_bytes_per_m']['table']:,}+{r['runs_bytes_per_m']['indexes']:,}",
          f"{r['attempts_bytes_per_m']['table']:,}+{r['attempts_bytes_per_m']['indexes']:,}", r["seed_s"]]
         for r in results])
    env = environment(args.dsn)
    print(f"\nPostgreSQL {env['postgres']}, {env['cpus']} CPUs, load {env['loadavg_1m_at_start']} at start")


if __name__ == "__main__":
    main()
