"""Cost of the backfill metrics at scrape time (runner/worker/metrics.py, LedgerCollector).

A plan of N runs (half succeeded, a few hundred finished in the last minute, the rest
pending) beside a ledger of L other runs of the same job; times one ledger read of the
collector (the query every scrape makes, at most once a second) and, as the baseline
measured in the same run, `runner backfill list`'s query (list_plans) on the same plan.

    python scripts/bench/backfill_metrics.py --runs 10000 100000 --ledger 200000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runner import Runner
from runner.actions import backfill
from runner.store import migrate
from runner.worker.metrics import LedgerCollector
from scripts.bench.benchlib import DEFAULT_DSN, drop_database, recreate_database

FILL = """
INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date, window_start, window_end,
                             status, trigger, attempt, fence, idempotency_key, started_at, finished_at)
SELECT 'bench', to_timestamp(0) + g * interval '1 minute', '', '1970-01-01', to_timestamp(0),
       to_timestamp(0), 'succeeded', 'schedule', 1, 1, 'k' || g, now() - interval '1 day', now() - interval '1 day'
FROM generate_series(1, %(n)s) g
"""
FINISH = """
UPDATE runner.job_runs SET status = 'succeeded', attempt = 1, fence = 1, started_at = now(),
       finished_at = CASE WHEN id %% 100 = 0 THEN now() ELSE now() - interval '1 hour' END
WHERE replay_group_id = %(group)s AND id %% 2 = 0
"""


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", default=DEFAULT_DSN)
    ap.add_argument("--runs", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--ledger", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--keep", action="store_true", help="keep the scratch database (to EXPLAIN)")
    args = ap.parse_args()
    app = Runner()
    app.job("bench", every="1m")(lambda ctx: None)
    name = "bench_backfill_metrics"
    recreate_database(args.dsn, name)
    url = args.dsn.rsplit("/", 1)[0] + "/" + name  # a postgresql:// URL (alembic needs one)
    try:
        migrate.upgrade(url)
        print(f"{'plan runs':>10} {'ledger':>8} {'metrics read ms':>16} {'list_plans ms':>14} {'ratio':>6}")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SET TIME ZONE 'UTC'")
            conn.execute(FILL, {"n": args.ledger})
            first = args.ledger + 10
            for n in args.runs:
                start = datetime.fromtimestamp(first * 60, UTC)
                spec = backfill.Spec(job_name="bench", range_from=start, range_to=start + timedelta(minutes=n),
                                     max_failures=None)
                made = backfill.create(conn, backfill.plan(conn, app.jobs["bench"], spec), "bench", "bench")
                conn.execute(FINISH, {"group": made["backfill"]["replay_group_id"]})
                conn.execute("ANALYZE runner.job_runs")
                first += n + 10
                collector = LedgerCollector(lambda: psycopg.connect(url, autocommit=True), min_interval=0)
                try:
                    metrics = median_ms(collector.read, args.repeat)
                    assert collector.read(), "the collector read nothing"
                finally:
                    collector.close()
                listing = median_ms(lambda: backfill.list_plans(conn), args.repeat)
                print(f"{n:>10} {args.ledger:>8} {metrics:>16.2f} {listing:>14.2f} {metrics / listing:>6.2f}")
    finally:
        if not args.keep:
            drop_database(args.dsn, name)


if __name__ == "__main__":
    main()
