"""Page render time of the operator console (`runner web`) over a large ledger.

    python scripts/bench/web_latency.py [--rows 1000000] [--jobs 1000] [--repeat 5]

Creates a scratch database, migrates it, registers `--jobs` hourly jobs tracked from as far
back as their share of `--rows` needs, plus one job `wide` with 1,000 static partitions over
the last 7 days (the grid's aggregated case), and INSERTs the runs with generate_series: mostly
succeeded; one slot in 89 and one in 97 had a problem: failed (waiting for a retry) in the
job's last 48 slots, dead in its last `--unhandled-slots` (default 168: a week), skipped
(handled by an operator) before that; and a hole of 5 slots per job left without a run
(the gap scan lists them). Advances the gap-scan watermarks once (as a running runner does),
then starts a real `runner web` subprocess and times each page over HTTP (`--repeat` times
after one warm-up request): the full response, server render included. Prints one JSON line
per page and a Markdown table. The SPEC's bar: every page under 300 ms at 10 million runs and
1,000 jobs. The scratch database is dropped afterwards (BENCH_KEEP_DB=1 keeps it).

`--db NAME` seeds a database of that name once and keeps it: a later run with the same
`--db` skips the seeding (after `runner db upgrade`, so a ledger seeded on older code is
migrated first, which is also how a before/after pair is measured on one seed). The seed is
relative to the hour it was made: reused hours later, each job has a few more never-started
slots at its end (the runs stop at the seeding hour), which the pages then show.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import psycopg

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import benchrecord  # noqa: E402
from benchlib import DEFAULT_DSN  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"

SEED_JOBS = """
INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, track_from, first_registered_at, options)
SELECT format('job_%%s', lpad(i::text, 4, '0')), 'every', interval '1 hour',
       date_trunc('hour', now(), 'UTC') - make_interval(hours => %(per_job)s),
       date_trunc('hour', now(), 'UTC') - make_interval(hours => %(per_job)s),
       jsonb_build_object('owner', format('team-%%s', i %% 17))
FROM generate_series(1, %(jobs)s) i
"""
SEED_WIDE = """
INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, track_from, first_registered_at, partitions)
SELECT 'wide', 'every', interval '1 hour', date_trunc('hour', now(), 'UTC') - interval '7 days',
       date_trunc('hour', now(), 'UTC') - interval '7 days',
       (SELECT array_agg(format('tenant-%%s', lpad(p::text, 4, '0')) ORDER BY p) FROM generate_series(1, 1000) p)
"""
SEED_SCHEDULES = """
INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval, timezone, partitions)
SELECT job_name, track_from, schedule_kind, every_interval, timezone, partitions FROM runner.jobs
"""
SEED_RUNS = """
INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date, window_start,
                             window_end, status, trigger, attempt, fence, idempotency_key, started_at,
                             finished_at, next_attempt_at, last_error, processed_count)
SELECT j.job_name, s.slot, '', s.slot::date, s.slot, s.slot,
       CASE WHEN (s.n + j.k) %% 89 = 0 OR (s.n + j.k) %% 97 = 0 THEN
                CASE WHEN (s.n + j.k) %% 97 = 0 AND s.n >= %(per_job)s - 48 THEN 'failed'
                     WHEN s.n >= %(per_job)s - %(unhandled)s THEN 'dead'
                     ELSE 'skipped' END  -- older problems were handled (skipped by an operator)
            ELSE 'succeeded' END,
       'schedule', 1, 1, 'k', s.slot + interval '2 seconds',
       CASE WHEN (s.n + j.k) %% 97 = 0 AND (s.n + j.k) %% 89 <> 0 AND s.n >= %(per_job)s - 48 THEN NULL
            ELSE s.slot + make_interval(secs => 5 + (s.n %% 40)) END,
       CASE WHEN (s.n + j.k) %% 97 = 0 AND (s.n + j.k) %% 89 <> 0 AND s.n >= %(per_job)s - 48
            THEN now() + interval '1 hour' END,
       CASE WHEN (s.n + j.k) %% 89 = 0 OR (s.n + j.k) %% 97 = 0 THEN 'RuntimeError: upstream refused' END, 100
FROM (SELECT job_name, track_from, row_number() OVER (ORDER BY job_name) AS k
      FROM runner.jobs WHERE job_name <> 'wide') j
CROSS JOIN LATERAL (
    SELECT n, j.track_from + make_interval(hours => n) AS slot
    FROM generate_series(0, %(per_job)s - 1) n
    WHERE n NOT BETWEEN 100 AND 104  -- a hole: slots that never started
) s
"""
SEED_WIDE_RUNS = """
INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date, window_start,
                             window_end, status, trigger, attempt, fence, idempotency_key, started_at,
                             finished_at, processed_count)
SELECT 'wide', s, p, s::date, s, s, CASE WHEN hashtext(p || s::text) %% 53 = 0 THEN 'dead' ELSE 'succeeded' END,
       'schedule', 1, 1, 'k', s + interval '1 second', s + interval '9 seconds', 10
FROM generate_series(date_trunc('hour', now(), 'UTC') - interval '7 days',
                     date_trunc('hour', now(), 'UTC') - interval '1 hour', interval '1 hour') s,
     unnest((SELECT partitions FROM runner.jobs WHERE job_name = 'wide')) p
"""
SEED_REQUESTS = """
INSERT INTO runner.requests (action, job_name, who, reason, touched)
SELECT 'rerun', format('job_%%s', lpad((1 + i %% %(jobs)s)::text, 4, '0')), 'bench', 'seeded',
       jsonb_build_object('runs', jsonb_build_array(jsonb_build_object('run_id', i)))
FROM generate_series(1, 20000) i
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> float:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as r:
        r.read()
        if r.status != 200:
            raise RuntimeError(f"{url}: HTTP {r.status}")
    return (time.perf_counter() - start) * 1000


def seed(url: str, rows: int, jobs: int, unhandled: int) -> dict[str, float]:
    per_job = max(rows // jobs, 120)
    timings = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for name, statement in [("jobs", SEED_JOBS), ("wide", SEED_WIDE), ("schedules", SEED_SCHEDULES),
                                ("runs", SEED_RUNS), ("wide_runs", SEED_WIDE_RUNS), ("requests", SEED_REQUESTS),
                                ("analyze", "ANALYZE"),
                                ("watermarks", "SELECT runner.advance_watermarks_v1()")]:
            start = time.perf_counter()
            conn.execute(statement, {"jobs": jobs, "per_job": per_job, "unhandled": unhandled})
            timings[name] = round(time.perf_counter() - start, 1)
            print(f"seed {name}: {timings[name]} s", file=sys.stderr, flush=True)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--unhandled-slots", type=int, default=168,
                        help="dead runs stay dead in each job's newest N slots; older ones were skipped")
    parser.add_argument("--dsn", default=os.environ.get("BENCH_DSN", DEFAULT_DSN))
    parser.add_argument("--db", help="seed this database once and keep it; reuse it when it exists")
    benchrecord.add_option(parser)
    args = parser.parse_args()

    dbname = args.db or f"bench_web_{os.getpid()}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [dbname]).fetchone()
        if exists and not args.db:
            raise SystemExit(f"database {dbname} exists")
        if not exists:
            admin.execute(f'CREATE DATABASE "{dbname}"')
    if "://" not in args.dsn:
        raise SystemExit("--dsn must be a postgresql:// URL (the migrations take URLs)")
    url = args.dsn.split("?")[0].rsplit("/", 1)[0] + "/" + dbname
    proc = None
    try:
        subprocess.run([sys.executable, "-m", "runner", "db", "upgrade", "--database-url", url],
                       check=True, cwd=REPO, capture_output=True)
        with psycopg.connect(url, autocommit=True) as conn:
            ready = conn.execute("SELECT EXISTS (SELECT 1 FROM runner.requests WHERE reason = 'seeded')"
                                 " AND EXISTS (SELECT 1 FROM runner.gap_watermarks"
                                 " WHERE complete_through IS NOT NULL)").fetchone()[0]  # type: ignore[index]
        if ready:
            seeded: dict[str, float] = {"reused": 0.0}
            print(f"reusing the seeded database {dbname}", file=sys.stderr)
        else:
            seeded = seed(url, args.rows, args.jobs, args.unhandled_slots)
        with psycopg.connect(url, autocommit=True) as conn:
            total = conn.execute("SELECT count(*) FROM runner.job_runs").fetchone()[0]  # type: ignore[index]
            dead = conn.execute("SELECT max(id) FROM runner.job_runs WHERE status = 'dead'"
                                " AND job_name = 'job_0001'").fetchone()[0]  # type: ignore[index]
            # a point half way back in the ledger: the Runs page's slot range and a cursor there
            deep = conn.execute("SELECT schedule_slot, id FROM runner.job_runs WHERE job_name = 'job_0001'"
                                " ORDER BY schedule_slot LIMIT 1 OFFSET (SELECT count(*) / 2 FROM runner.job_runs"
                                " WHERE job_name = 'job_0001')").fetchone()
        assert deep is not None
        deep_cursor = quote(f"{deep[0].isoformat()}~{deep[1]}")
        deep_until = quote(deep[0].isoformat())
        deep_since = quote((deep[0] - timedelta(days=2)).isoformat())
        server_log = open(f"/tmp/{dbname}.web.log", "w")  # noqa: SIM115 (closed with the process)
        print(f"runner web's log: {server_log.name}", file=sys.stderr)
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "runner", "web", "--database-url", url, "--port", str(port),
                                 "--log-level", "WARNING"], cwd=REPO, env={**os.environ, "RUNNER_WEB_TOKEN": TOKEN},
                                stdout=subprocess.DEVNULL, stderr=server_log)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/login", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("runner web did not start") from None
                time.sleep(0.2)  # polling for the server to listen
        pages = {
            "Jobs (/)": "/", "Job (hourly)": "/job?name=job_0001", "Job (1,000 partitions)": "/job?name=wide",
            "Run": f"/runs/{dead}", "Gaps (all)": "/gaps", "Gaps (one job, dead)": "/gaps?job=job_0001&state=dead",
            "Backfills": "/backfills", "Alerts": "/alerts", "Requests": "/requests", "Runners": "/runners",
            "Requests (one job)": "/requests?job=job_0001", "API /api/jobs": "/api/jobs",
            # the Runs page (issue 30): every job, then each filter, then a page deep in the ledger
            "Runs (all)": "/runs", "Runs (one job)": "/runs?job=job_0001",
            "Runs (dead, all jobs)": "/runs?status=dead", "Runs (failed, one job)": "/runs?job=job_0001&status=failed",
            "Runs (skipped, all jobs)": "/runs?status=skipped",
            "Runs (one partition of wide)": "/runs?job=wide&partition=tenant-0500",
            "Runs (trigger schedule, lane realtime)": "/runs?trigger=schedule&lane=realtime",
            "Runs (a slot range)": f"/runs?since={deep_since}&until={deep_until}",
            "Runs (page after a deep cursor)": f"/runs?after={deep_cursor}",
            "Runs (one job, deep cursor)": f"/runs?job=job_0001&after={deep_cursor}",
            "Job (7 days back, grid paging)": f"/job?name=job_0001&until={deep_until}",
            "Jobs (search)": "/?search=job_05",
        }
        results = []
        for name, path in pages.items():
            try:
                get(base + path)  # warm-up: pools, plans, caches
            except urllib.error.HTTPError as exc:  # e.g. a statement over the console's timeout
                row = {"page": name, "path": path, "runs": total, "jobs": args.jobs + 1,
                       "median_ms": f"HTTP {exc.code}", "max_ms": "-"}
                results.append(row)
                print(json.dumps(row), flush=True)
                continue
            times = [get(base + path) for _ in range(args.repeat)]
            row = {"page": name, "path": path, "runs": total, "jobs": args.jobs + 1,
                   "median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1)}
            results.append(row)
            print(json.dumps(row), flush=True)
        print(f"\nseeded in {seeded}; {total:,} runs, {args.jobs + 1} jobs\n")
        print("| page | median ms | max ms |\n|---|---:|---:|")
        for row in results:
            print(f"| {row['page']} | {row['median_ms']} | {row['max_ms']} |")
        benchrecord.write(args.record, benchrecord.make(
            "console", f"time to fetch each console page over HTTP, median and max of {args.repeat} fetches after a"
            f" warm-up, {total:,} runs and {args.jobs + 1:,} jobs", "ms",
            [{"label": r["page"], "path": r["path"],
              "values": {"median_ms": r["median_ms"], "max_ms": r["max_ms"], "runs": total}} for r in results]))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        if not os.environ.get("BENCH_KEEP_DB") and not args.db:
            with psycopg.connect(args.dsn, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


if __name__ == "__main__":
    main()
