"""Catching up the gap-scan watermarks of an old ledger: one statement or bounded steps.

    python scripts/bench/watermark_catchup.py --db DB [--timeout SECONDS] [--bounded-first]

On an existing seeded ledger (scripts/bench/ledger_age.py --seed-only DB, or a database
it kept with BENCH_KEEP_DB=1): every watermark and hole is set aside (in a transaction rolled
back at the end, so the ledger is left as found), then

  * uncapped: one call of runner.advance_watermarks_v2(now, NULL, NULL), what runner.advance_watermarks_v1
    (and every runner before revision 0020_bounded) does: its wall time is the age of the
    snapshot it holds;
  * bounded: the same catch-up by the runners' duty (runner/worker/gapscan.py Advancer, its defaults:
    a first budget of 100,000 probes, aiming at ~1 s a call), each call timed: calls, median and longest call,
    total; and whether both leave the same holes.

--bounded-first runs the bounded catch-up before the uncapped call, so that it meets the
cache as found: for the cold-cache figure, restart the server and drop the OS page cache
first (`pg_ctlcluster 15 main restart; sync; echo 3 > /proc/sys/vm/drop_caches`, as root).

The two run in savepoints of one transaction here (so the bounded calls are not separate
transactions as in a runner; what is measured is each call's own time, which is what a
runner's transaction would last).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from benchlib import DEFAULT_DSN, dsn_for, environment  # noqa: E402
from gap_scan import url_of  # noqa: E402

from runner.worker import gapscan  # noqa: E402

HOLES = "SELECT count(*), md5(string_agg(job_name || schedule_slot || partition_key || whole_slot, ',' ORDER BY 1)) FROM" \
        " (SELECT job_name, schedule_slot, partition_key, whole_slot FROM runner.gap_holes ORDER BY 1, 2, 3, 4) h"


def set_aside(conn: psycopg.Connection[Any]) -> None:
    conn.execute("DELETE FROM runner.gap_holes")
    conn.execute("DELETE FROM runner.gap_watermarks")


def catchup(url: str, timeout: float, bounded_first: bool = False) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        conn.execute("SET jit = off")
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        jobs = conn.execute("SELECT count(*) FROM runner.jobs").fetchone()[0]  # type: ignore[index]
        history = conn.execute("SELECT now() - min(track_from) FROM runner.jobs").fetchone()[0]  # type: ignore[index]
        with conn.transaction(force_rollback=True):
            set_aside(conn)
            if not bounded_first:
                uncapped_s, uncapped_holes = uncapped(conn, now)
                set_aside(conn)
            times: list[float] = []
            duty = gapscan.Advancer(threading.Event())
            budgets: list[int] = []
            deadline = time.monotonic() + timeout
            timed_out = False
            while True:
                t = time.perf_counter()
                _, behind = conn.execute("SELECT moved, behind FROM runner.advance_watermarks_v2(%s, NULL, %s, false)",
                                         (now, duty.budget)).fetchone()  # type: ignore[misc]
                took = time.perf_counter() - t
                times.append(took)
                budgets.append(duty.budget)
                print(f"call {len(times)}: budget {duty.budget}, {took:.3f} s, {behind} behind",
                      file=sys.stderr, flush=True)
                duty.adapt(took, behind)  # the Advancer's own rule
                timed_out = time.monotonic() > deadline
                if not behind or timed_out:
                    t = time.perf_counter()  # the duty's last, tidy call
                    conn.execute("SELECT * FROM runner.advance_watermarks_v2(%s, NULL, %s, true)", (now, duty.budget))
                    times.append(time.perf_counter() - t)
                    budgets.append(duty.budget)
                    break
            bounded_holes = conn.execute(HOLES).fetchone()
            if bounded_first:
                set_aside(conn)
                uncapped_s, uncapped_holes = uncapped(conn, now)
    return {
        "jobs": jobs, "history": str(history), "uncapped_s": round(uncapped_s, 2),
        "bounded": {"calls": len(times), "median_call_s": round(statistics.median(times), 3),
                    "longest_call_s": round(max(times), 3), "total_s": round(sum(times), 2),
                    "budgets": budgets, "timed_out": timed_out},
        "holes": uncapped_holes[0] if uncapped_holes else None,  # type: ignore[index]
        "same_holes": uncapped_holes == bounded_holes, "bounded_first": bounded_first,
    }


def uncapped(conn: psycopg.Connection[Any], now: Any) -> tuple[float, Any]:
    """One call for the whole history; its time and the holes it leaves."""
    t = time.perf_counter()
    conn.execute("SELECT * FROM runner.advance_watermarks_v2(%s, NULL, NULL)", (now,))
    took = time.perf_counter() - t
    print(f"uncapped: {took:.1f} s", file=sys.stderr, flush=True)
    return took, conn.execute(HOLES).fetchone()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="an admin DSN")
    parser.add_argument("--db", required=True, help="a seeded ledger")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds the bounded catch-up may take before it is stopped (said in the output)")
    parser.add_argument("--bounded-first", action="store_true",
                        help="the bounded catch-up first, on the cache as found (the cold-cache figure)")
    args = parser.parse_args()
    out = {"environment": environment(args.dsn),
           "catchup": catchup(url_of(dsn_for(args.dsn, args.db)), args.timeout, args.bounded_first)}
    print(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
