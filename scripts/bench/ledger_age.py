"""A ledger that is old: the runner's figures on 1M, 10M and 30M seeded runs.

    python scripts/bench/ledger_age.py [--rows 1000000 10000000 30000000] [--jobs 1000] [--days-per-million 3]

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
  * live lag: --lag-jobs jobs every second on two `runner start` processes for --lag-seconds,
    p99 of attempt start - slot instant from the ledger (as scripts/bench/runner_lag.py);
  * the on-call recipes: each fenced query of docs/how-to/on-call.md's "On call: ten questions, ten
    queries", as run by an operator (median of --repeat);
  * churn: the dead tuples the claim and lag phases left in runner.job_runs and
    runner.attempts (pg_stat_user_tables; whether autovacuum ran), the size of the hot
    partial indexes, and the time of a read of the running runs through their partial
    index (the takeover and heartbeat shape), before and after a VACUUM;
  * pruning rate: every job given a 1-hour retention, --prune-passes passes of
    runner.prune_v1(--prune-batch), runs deleted per second.

The scratch database is dropped afterwards (BENCH_KEEP_DB=1 keeps it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
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

import benchrecord  # noqa: E402
from benchlib import (  # noqa: E402
    DEFAULT_DSN,
    drop_database,
    dsn_for,
    environment,
    median,
    percentile,
    print_table,
    recreate_database,
)
from gap_scan import define_jobs, seed, url_of  # noqa: E402

from runner.store import migrate  # noqa: E402

APP = '''
from runner import Runner
app = Runner()

@app.job("fanout", every="{every}s", partitions=[str(i) for i in range({n})], grace="1h")
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


LAG_APP = '''
from runner import Runner
app = Runner()

def noop(ctx):
    pass

for i in range({n}):
    app.job(f"lag-{{i:04d}}", every="1s")(noop)
'''

# dead tuples, and how many autovacuum waits for on this table (its own settings, else the server's)
CHURN = ("SELECT s.relname, s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.autoanalyze_count,"
         " round(coalesce((SELECT split_part(o, '=', 2) FROM unnest(c.reloptions) o"
         "                 WHERE o LIKE 'autovacuum_vacuum_threshold=%%')::float8,"
         "                current_setting('autovacuum_vacuum_threshold')::float8)"
         " + coalesce((SELECT split_part(o, '=', 2) FROM unnest(c.reloptions) o"
         "             WHERE o LIKE 'autovacuum_vacuum_scale_factor=%%')::float8,"
         "            current_setting('autovacuum_vacuum_scale_factor')::float8) * c.reltuples)"
         " FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid"
         " WHERE s.schemaname = 'runner' AND s.relname IN ('job_runs', 'attempts', 'instances', 'gap_watermarks')")
HOT_INDEXES = ("SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
               " WHERE n.nspname = 'runner' AND c.relname IN ('job_runs_running', 'job_runs_due',"
               " 'job_runs_unaccounted', 'attempts_running')")
RUNNING = "SELECT count(*) FROM runner.job_runs WHERE status = 'running' AND job_name = ANY(%s)"


def recipes() -> list[tuple[int, str]]:
    """(number, query) of each fenced sql block of the on-call recipes (docs/how-to/on-call.md)."""
    text = (ROOT / "docs" / "how-to" / "on-call.md").read_text()
    section = text.split("\n## On call: ten questions, ten queries\n", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"^### (\d+)\. .+?\n[^`]*?```sql\n(.*?)```", section, re.S | re.M)
    return [(int(n), q) for n, q in found]


def live_lag(url: str, jobs: int, seconds: float) -> float:
    """p99 (ms) of attempt start - slot, `jobs` every-second jobs on two `runner start`."""
    app_dir = Path(tempfile.mkdtemp())
    (app_dir / "lag_app.py").write_text(LAG_APP.format(n=jobs))
    env = {**os.environ, "RUNNER_DATABASE_URL": url}
    procs = [subprocess.Popen(
        [sys.executable, "-m", "runner", "start", "--app", str(app_dir / "lag_app.py") + ":app",
         "--workers", "32", "--log-level", "WARNING"],
        env=env, cwd=ROOT, stderr=open(app_dir / f"l{i}.log", "w")) for i in range(2)]  # noqa: SIM115
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            deadline = time.monotonic() + 60
            while conn.execute("SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL"
                               " AND 'lag-0000' = ANY(jobs)").fetchone()[0] < 2:
                if time.monotonic() > deadline:
                    raise RuntimeError("the lag runners did not start")
                time.sleep(0.1)
            start = conn.execute("SELECT date_trunc('second', now()) + interval '2 seconds'").fetchone()[0]
            time.sleep(seconds + 2)
            end = conn.execute("SELECT date_trunc('second', now()) - interval '1 second'").fetchone()[0]
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
    with psycopg.connect(url, autocommit=True) as conn:
        lags = [r[0] for r in conn.execute(
            "SELECT extract(epoch FROM a.started_at - r.schedule_slot)::float8 FROM runner.job_runs r"
            " JOIN runner.attempts a ON a.run_id = r.id AND a.attempt = 1"
            " WHERE r.job_name LIKE 'lag-%%' AND r.schedule_slot BETWEEN %s AND %s", (start, end))]
    return percentile(lags, 99) * 1000


def churn(conn: psycopg.Connection[Any], jobs: list[str]) -> dict[str, Any]:
    stats = {r[0]: {"live": r[1], "dead": r[2], "autovacuums": r[3], "autoanalyzes": r[4], "vacuum_after_dead": r[5]}
             for r in conn.execute(CHURN)}
    return {"tables": stats, "hot_indexes": dict(conn.execute(HOT_INDEXES).fetchall()),
            "running_read_ms": median([timed(conn, RUNNING, (jobs,)) for _ in range(5)]) * 1000}


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


def claim_throughput(url: str, partitions: int, churn_slots: int = 0, every: int = 15) -> float:
    """Two `runner start` processes drain one slot of `partitions` runs; runs per second. Then
    they go on for `churn_slots` more slots (churn for the dead-tuple figures)."""
    app_dir = Path(tempfile.mkdtemp())
    (app_dir / "bench_app.py").write_text(APP.format(n=partitions, every=every))
    env = {**os.environ, "RUNNER_DATABASE_URL": url}
    procs = []
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            now = conn.execute("SELECT now()").fetchone()[0]
            slot = datetime.fromtimestamp((int(now.timestamp()) // every + 1) * every, UTC)
            if (slot - now).total_seconds() < 10:
                slot += timedelta(seconds=every)
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
            final = slot + timedelta(seconds=every * churn_slots)
            while churn_slots and conn.execute(
                    "SELECT count(*) FROM runner.job_runs WHERE job_name = 'fanout' AND schedule_slot = %s"
                    " AND status = 'succeeded'", (final,)).fetchone()[0] < partitions:
                if time.monotonic() > deadline + every * churn_slots:
                    raise RuntimeError("the churn slots were not drained")
                time.sleep(0.2)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
    return partitions / (last - slot).total_seconds()


def seed_ledger(url: str, rows: int, jobs: int, days: int) -> int:
    """Migrate the (empty) database at `url` and seed it: runs, one attempt per run."""
    migrate.upgrade(url)
    with psycopg.connect(url, autocommit=True) as conn:
        now: datetime = conn.execute("SELECT now()").fetchone()[0].astimezone(UTC)
    since = now - timedelta(days=days)
    rng = random.Random(rows)
    defs = define_jobs(jobs, rows, days, since, rng)
    seeded = seed(url, defs, since, now, rng, 7000 / rows)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(ATTEMPTS)
        conn.execute("VACUUM ANALYZE runner.attempts")
    return seeded


def measure(admin: str, rows: int, jobs: int, days: int, repeat: int, partitions: int,
            prune_batch: int, prune_passes: int, lag_jobs: int = 100, lag_seconds: float = 15,
            churn_slots: int = 4) -> dict[str, Any]:
    name = f"bench_ledger_age_{rows}"
    dsn = recreate_database(admin, name)
    url = url_of(dsn)
    try:
        t = time.perf_counter()
        seeded = seed_ledger(url, rows, jobs, days)
        seed_s = time.perf_counter() - t
        with psycopg.connect(url, autocommit=True) as conn:
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
            conn.execute("SET TIME ZONE 'UTC'")
            recipe_s = {n: median([timed(conn, q) for _ in range(repeat)]) for n, q in recipes()}
        status_cmd = median([command_time(url, "status", "--json") for _ in range(repeat)])
        runs_cmd = median([command_time(url, "runs", "--job", busiest, "--json") for _ in range(repeat)])
        claim = claim_throughput(url, partitions, churn_slots)
        lag_p99 = live_lag(url, lag_jobs, lag_seconds)
        with psycopg.connect(url, autocommit=True) as conn:
            hot = ["fanout"] + [f"lag-{i:04d}" for i in range(lag_jobs)]
            churned = churn(conn, hot)
            conn.execute("VACUUM runner.job_runs, runner.attempts")
            vacuumed = churn(conn, hot)
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
            "claim_runs_per_s": round(claim), "live_lag_p99_ms": round(lag_p99, 1),
            "recipes_s": recipe_s, "churn": churned, "after_vacuum": vacuumed, "pruned": pruned, "prune_runs_per_s": round(pruned / prune_s),
        }
    finally:
        if not os.environ.get("BENCH_KEEP_DB"):
            drop_database(admin, name)


def record(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One figure row per ledger size, as the Benchmarks page's ledger_age record."""
    keys = ("claim_runs_per_s", "live_lag_p99_ms", "prune_runs_per_s", "status_cmd_s", "runs_job_cmd_s",
            "alerts_sql_s", "gap_scan_s", "job_health_sql_s", "runs_job_sql_s")
    rows = []
    for r in results:
        size = sum(r[t][part] for t in ("runs_bytes_per_m", "attempts_bytes_per_m") for part in ("table", "indexes"))
        recipes = {f"recipe_{n}_s": s for n, s in r["recipes_s"].items()}
        rows.append({"label": benchrecord.size_label(r["rows"]), "values": {
            "rows": r["rows"], "days": r["days"], **{k: r[k] for k in keys}, **recipes, "bytes_per_m": size}})
    return benchrecord.make("ledger_age", "the same figures on ledgers of each size"
                            f" ({results[0]['jobs']:,} jobs; sizes {', '.join(r['label'] for r in rows)})",
                            "mixed: each value's name says", rows)


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
    parser.add_argument("--lag-jobs", type=int, default=100, help="every-second jobs of the live-lag figure")
    parser.add_argument("--lag-seconds", type=float, default=15)
    parser.add_argument("--churn-slots", type=int, default=4,
                        help="slots the claim runners go on draining after the measured one (churn)")
    parser.add_argument("--json", action="store_true")
    benchrecord.add_option(parser)
    parser.add_argument("--seed-only", metavar="DB",
                        help="seed one ledger of --rows[0] runs into database DB (made afresh), keep it, measure nothing")
    args = parser.parse_args()
    if args.seed_only:
        n = args.rows[0]
        t = time.perf_counter()
        seeded = seed_ledger(url_of(recreate_database(args.dsn, args.seed_only)), n, args.jobs,
                             max(1, round(n / 1e6 * args.days_per_million)))
        with psycopg.connect(url_of(dsn_for(args.dsn, args.seed_only)), autocommit=True) as conn:
            conn.execute("SELECT runner.advance_watermarks_v1()")  # as measure() does, untimed
        print(f"{args.seed_only}: {seeded} runs in {time.perf_counter() - t:.1f} s (watermarks advanced)")
        return
    results = []
    for n in args.rows:
        results.append(measure(args.dsn, n, args.jobs, max(1, round(n / 1e6 * args.days_per_million)), args.repeat,
                               args.partitions, args.prune_batch, args.prune_passes, args.lag_jobs, args.lag_seconds, args.churn_slots))
        print(json.dumps(results[-1], default=str), file=sys.stderr, flush=True)  # each size as it is done
    benchrecord.write(args.record, record(results))
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
