"""Gap scan cost: `SELECT count(*) FROM runner.missing_slots` over a large ledger.

    python scripts/bench/gap_scan.py [--rows 1000000 10000000] [--jobs 1000] [--days 30]

For each size: creates a scratch database, migrates it, registers the jobs (a mix of every=
and cron= schedules in several zones, some with static partitions, some with dynamic ones, all
tracked from `--days` ago), and COPYs about `--rows` runs for their slots, computed by
runner/model/schedule.py: mostly succeeded, some skipped and coalesced, and `--problems` slots
(default 7,000 at every size; or `--problem-rate`, a fraction) failed, dead or left without a
run: what the scan lists. Then it times the view, median of `--repeat` runs:

  * without watermarks: the scan expands every job's whole tracked range;
  * after runner.advance_watermarks_v1(): the scan expands only the slots since the advance
    and reads the unaccounted runs and recorded holes below it.

It also times the first advance two ways, from no watermark at all:

  * the runners' catch-up (runner/worker/gapscan.py's Advancer, its defaults or `--target` /
    `--max-probes`, on an autocommit connection as the loop gives it: bounded calls of
    runner.advance_watermarks_v3 or the one `--function` names, each its own transaction;
    v2 and v1 call v3 since issue 32, so an older release's advance is measured from that
    release's checkout, migrated into its own scratch database): how many calls, the
    longest and the median call, the catch-up's total, and how many row versions of
    runner.gap_watermarks it wrote; issue 32's goal is no call over 1 s at 10M;
  * one uncapped runner.advance_watermarks_v1() (the whole history in one statement, what no
    runner issues any more), after the catch-up's watermarks and holes are set aside;

and checks that the gap scan's answer at a fixed instant (an hour ahead, so that every slot
up to it is expected) is the same with no watermark, after the catch-up and after the
uncapped call: count and md5 of every row of runner.missing_slots_v1. Then a second uncapped
advance (the periodic, incremental case). The SPEC's bar: < 1 s at 10 million rows, 1,000
jobs, 30 days.
The scratch database is dropped afterwards (BENCH_KEEP_DB=1 keeps it).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg.conninfo import conninfo_to_dict

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (  # noqa: E402
    DEFAULT_DSN,
    drop_database,
    dsn_for,
    environment,
    median,
    print_table,
    recreate_database,
)

from runner import Runner  # noqa: E402
from runner.model.app import JobDef  # noqa: E402
from runner.store import ledger, migrate  # noqa: E402
from runner.worker import gapscan  # noqa: E402

ZONES = ["UTC", "Asia/Seoul", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe"]


def fates_of(problem_rate: float) -> list[tuple[str | None, float]]:
    """Weights of a slot x partition's fate: None leaves the slot without a run (a gap).
    Failed, dead and gaps (what the scan lists) make up `problem_rate`."""
    each = problem_rate / 3
    return [("succeeded", 1 - 0.008 - problem_rate), ("skipped", 0.004), ("coalesced", 0.004),
            ("failed", each), ("dead", each), (None, each)]


def url_of(dsn: str) -> str:
    """A postgresql:// URL (what alembic needs) for a libpq DSN."""
    info = conninfo_to_dict(dsn)
    user = quote(str(info.get("user") or "postgres"), safe="")
    if info.get("password"):
        user += ":" + quote(str(info["password"]), safe="")
    host = str(info.get("host") or "127.0.0.1")
    port = str(info.get("port") or 5432)
    db = quote(str(info.get("dbname") or "postgres"))
    if host.startswith("/"):
        return f"postgresql://{user}@/{db}?host={quote(host)}&port={port}"
    return f"postgresql://{user}@{host}:{port}/{db}"


def define_jobs(jobs: int, rows: int, days: int, since: datetime, rng: random.Random) -> list[JobDef]:
    """`jobs` definitions whose slots x partitions over `days` add up to about `rows`."""
    app = Runner()
    shapes = [rng.choice([1, 1, 1, 1, 1, 1, 1, 2, 3, 0]) for _ in range(jobs)]  # 0: dynamic
    runs_per_slot = sum(max(s, 1) for s in shapes) / jobs
    period = max(1, round(days * 86400 * jobs * runs_per_slot / rows))  # seconds between slots
    for i, shape in enumerate(shapes):
        partitions: Any = None
        if shape > 1:
            partitions = [f"tenant-{k}" for k in range(shape)]
        elif shape == 0:
            partitions = lambda slot: ["tenant-0"]  # noqa: E731
        kw: dict[str, Any] = {"partitions": partitions, "track_from": since}
        if i % 2 == 0 or period < 60:
            kw["every"] = f"{period}s"
        else:
            minutes = max(1, round(period / 60))
            offset = i % min(minutes, 60)
            if minutes < 60:
                kw["cron"] = f"{','.join(str(m) for m in range(offset, 60, minutes))} * * * *"
            else:
                kw["cron"] = f"{offset} */{min(23, minutes // 60)} * * *"
            kw["timezone"] = ZONES[i % len(ZONES)]
        app.job(f"bench-{i:04d}", **kw)(lambda ctx: None)
    return list(app.jobs.values())


def seed(url: str, defs: list[JobDef], since: datetime, until: datetime, rng: random.Random,
         problem_rate: float) -> int:
    """Runs for the jobs' slots in (since, until], by COPY; returns the number of runs."""
    fates = fates_of(problem_rate)
    labels = [s for s, _ in fates]
    weights = [w for _, w in fates]
    count = 0
    with psycopg.connect(url) as conn:
        ledger.sync_jobs(conn, defs, now=since)
        with conn.cursor() as cur, cur.copy(
            "COPY runner.job_runs (job_name, schedule_slot, partition_key, business_date,"
            " window_start, window_end, status, trigger, attempt, fence, idempotency_key,"
            " scheduled_at, started_at, finished_at) FROM STDIN"
        ) as copy:
            buf = io.StringIO()
            for job in defs:
                keys = ["tenant-0"] if job.dynamic_partitions else job.partitions_for(since)
                slots = job.schedule.slots_between(since - timedelta(microseconds=1), until)
                statuses = rng.choices(labels, weights, k=len(slots) * len(keys))
                n = 0
                prev = since
                for slot in slots:
                    start, end = prev.isoformat(), slot.isoformat()
                    day = slot.date().isoformat()
                    for key in keys:
                        status = statuses[n]
                        n += 1
                        if status is None:
                            continue
                        buf.write(f"{job.name}\t{end}\t{key}\t{day}\t{start}\t{end}\t{status}\tschedule"
                                  f"\t1\t1\t{job.name}/{end}/{key}\t{end}\t{end}\t{end}\n")
                        count += 1
                    prev = slot
                if buf.tell() > 8 << 20:
                    copy.write(buf.getvalue())
                    buf = io.StringIO()
            copy.write(buf.getvalue())
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE runner.job_runs")
        conn.execute("ANALYZE")
    return count


ANSWER = ("SELECT count(*), md5(coalesce(string_agg(m::text, ',' ORDER BY m::text), ''))"
          " FROM runner.missing_slots_v1(%s) AS m")


def answer(conn: psycopg.Connection[Any], as_of: datetime) -> tuple[int, str]:
    """The gap scan's whole answer at as_of: its rows and an md5 of all of them."""
    row = conn.execute(ANSWER, (as_of,)).fetchone()
    assert row is not None
    return int(row[0]), str(row[1])


def set_aside(conn: psycopg.Connection[Any]) -> None:
    conn.execute("DELETE FROM runner.gap_holes")
    conn.execute("DELETE FROM runner.gap_watermarks")
    # (and their dead row versions, so that each measurement starts from the same tables)
    conn.execute("VACUUM runner.gap_holes, runner.gap_watermarks")


def timed(conn: psycopg.Connection[Any], sql: str) -> tuple[float, Any]:
    t = time.perf_counter()
    row = conn.execute(sql).fetchone()
    return time.perf_counter() - t, (row[0] if row else None)


def measure(admin: str, rows: int, jobs: int, days: int, repeat: int, problems: int | None,
            problem_rate: float, target: float, max_probes: int) -> dict[str, Any]:
    name = f"bench_gap_scan_{rows}"
    dsn = recreate_database(admin, name)
    url = url_of(dsn)
    try:
        migrate.upgrade(url)
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SELECT now()").fetchone()
            assert row is not None
            now: datetime = row[0].astimezone(UTC)
        since = now - timedelta(days=days)
        rng = random.Random(rows)
        defs = define_jobs(jobs, rows, days, since, rng)
        t = time.perf_counter()
        rate = problems / rows if problems is not None else problem_rate
        seeded = seed(url, defs, since, now, rng, rate)
        seed_s = time.perf_counter() - t
        return {"rows": seeded, "jobs": jobs, "days": days, "seed_s": seed_s,
                **timings(url, repeat, target, max_probes)}
    finally:
        drop_database(admin, name)


def watermark_writes(conn: psycopg.Connection[Any]) -> int:
    """Row versions of runner.gap_watermarks written so far (inserts and updates; this
    session's counts flushed first)."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute("SELECT n_tup_ins + n_tup_upd FROM pg_stat_user_tables"
                       " WHERE relid = 'runner.gap_watermarks'::regclass").fetchone()
    return int(row[0]) if row else 0


def timings(url: str, repeat: int, target: float, max_probes: int,
            function: str = "advance_watermarks_v3") -> dict[str, Any]:
    """The scan without and with watermarks, the runners' catch-up (through ``function``) and
    the uncapped advance, on a seeded ledger (its watermarks and holes are set aside first)."""
    view = "SELECT count(*) FROM runner.missing_slots"
    gapscan.Q["advance_watermarks_bounded"] = gapscan.Q["advance_watermarks_bounded"].replace(
        "advance_watermarks_v3", function)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET jit = off")  # as the runner's connections (runner/worker/config.py)
        set_aside(conn)
        cold = [timed(conn, view) for _ in range(repeat)]
        fixed = conn.execute("SELECT now() + interval '1 hour'").fetchone()[0]  # type: ignore[index]
        reference = answer(conn, fixed)
        duty = gapscan.Advancer(target=target, max_budget=max_probes)
        writes = watermark_writes(conn)
        t = time.perf_counter()
        duty(conn)
        catchup_s = time.perf_counter() - t
        writes = watermark_writes(conn) - writes
        calls = list(duty.took)
        after_catchup = answer(conn, fixed)
        set_aside(conn)
        first_advance, _ = timed(conn, "SELECT runner.advance_watermarks_v1()")
        after_uncapped = answer(conn, fixed)
        holes = conn.execute("SELECT count(*) FROM runner.gap_holes").fetchone()
        warm = [timed(conn, view) for _ in range(repeat)]
        next_advance, _ = timed(conn, "SELECT runner.advance_watermarks_v1()")
        warm_after = [timed(conn, view) for _ in range(repeat)]
    return {
        "view_no_watermarks_s": median([s for s, _ in cold]),
        "first_advance_s": first_advance,
        "catchup": {"calls": len(calls), "longest_call_s": max(calls), "median_call_s": median(calls),
                    "total_s": catchup_s, "final_budget": duty.budget, "target_s": target,
                    "function": function, "watermark_row_versions": writes,
                    "call_s": [round(c, 4) for c in calls]},
        "same_answer": reference == after_catchup == after_uncapped, "answer_rows": reference[0],
        "view_with_watermarks_s": median([s for s, _ in warm + warm_after]),
        "next_advance_s": next_advance,
        "missing": warm[-1][1], "missing_no_watermarks": cold[-1][1],
        "holes": holes[0] if holes else None,
        "runs": {"no_watermarks": [s for s, _ in cold], "with_watermarks": [s for s, _ in warm + warm_after]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="an admin DSN (scratch databases are made on its server)")
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--problems", type=int, default=7000,
                        help="failed, dead and never-started slots in the ledger, at every size, so "
                             "that sizes differ only in history, not in the answer")
    parser.add_argument("--problem-rate", type=float, default=None,
                        help="instead of --problems: that fraction of the slots (e.g. 0.007)")
    parser.add_argument("--target", type=float, default=gapscan.TARGET_SECONDS,
                        help="seconds one call of the catch-up should take (the runner's default: %(default)s)")
    parser.add_argument("--max-probes", type=int, default=gapscan.MAX_BUDGET,
                        help="probes of one call of the catch-up, at most (default: %(default)s)")
    parser.add_argument("--db", default=None,
                        help="instead of seeding: measure this database, seeded before (BENCH_KEEP_DB=1 keeps "
                             "the scratch database bench_gap_scan_ROWS); its watermarks and holes are deleted")
    parser.add_argument("--function", default="advance_watermarks_v3",
                        help="the advance the catch-up calls (v2 and v1 call v3 since issue 32)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.db:
        env = environment(args.dsn)
        url = url_of(dsn_for(args.dsn, args.db))
        with psycopg.connect(url) as conn:
            rows, jobs = conn.execute("SELECT (SELECT count(*) FROM runner.job_runs),"
                                      " (SELECT count(*) FROM runner.jobs)").fetchone()  # type: ignore[misc]
        result = {"rows": rows, "jobs": jobs, "days": None, "seed_s": None,
                  **timings(url, args.repeat, args.target, args.max_probes, args.function)}
        print(json.dumps({"environment": env, "results": [result]}, indent=2, default=str))
        return
    problems = None if args.problem_rate is not None else args.problems
    results = [measure(args.dsn, n, args.jobs, args.days, args.repeat, problems, args.problem_rate or 0.0,
                       args.target, args.max_probes)
               for n in args.rows]
    if args.json:
        print(json.dumps({"environment": environment(args.dsn), "results": results}, indent=2, default=str))
        return
    print(f"gap scan: SELECT count(*) FROM runner.missing_slots, median of {args.repeat} "
          f"(with watermarks: of {2 * args.repeat}, around a second advance)")
    print_table(
        ["ledger rows", "jobs", "days", "no watermarks s", "first advance s", "with watermarks s",
         "next advance s", "missing", "holes", "seed s"],
        [[r["rows"], r["jobs"], r["days"], r["view_no_watermarks_s"], r["first_advance_s"],
          r["view_with_watermarks_s"], r["next_advance_s"], r["missing"], r["holes"], r["seed_s"]]
         for r in results],
    )
    print(f"\nfirst advance: the runners' bounded catch-up (target {args.target} s a call) against "
          "one uncapped statement, from no watermark")
    print_table(
        ["ledger rows", "calls", "longest call s", "median call s", "catch-up total s", "uncapped s",
         "total / uncapped", "same answer"],
        [[r["rows"], r["catchup"]["calls"], r["catchup"]["longest_call_s"], r["catchup"]["median_call_s"],
          r["catchup"]["total_s"], r["first_advance_s"], r["catchup"]["total_s"] / r["first_advance_s"],
          r["same_answer"]] for r in results],
    )
    env = environment(args.dsn)
    print(f"\nPostgreSQL {env['postgres']}, {env['cpus']} CPUs, load {env['loadavg_1m_at_start']} at start")


if __name__ == "__main__":
    main()
