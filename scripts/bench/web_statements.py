"""The Jobs page's statements on two ledgers seeded by web_latency.py --db, alternating in the
same seconds (a before/after pair on a shared machine):

    python scripts/bench/web_statements.py ROUNDS BEFORE_DB AFTER_DB

BEFORE_DB at 0015_scale (or older), AFTER_DB at 0016_health; the same DB twice measures one
schema against itself.

Prints one Markdown row per statement: median ms before, after, and their ratio.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runner.sqlfiles import queries

QO = queries("operate")
QW = queries("web")
# before 0016_health: the view (one gap scan per job inside) and the all-jobs missing count
# apart; after: runner.job_health_v1 (one gap scan, the counts from it)
OLD_JOB_HEALTH = "SELECT * FROM runner.job_health"
OLD_MISSING_COUNTS = ("SELECT m.job_name, count(*) AS missing FROM runner.missing_slots_v1(now(), NULL::text) m"
                      " GROUP BY m.job_name")
# name -> (the statements before, the statements after, their parameters); a side's
# statements run one after another, timed together
STATEMENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...], dict[str, Any]]] = {
    "job health (before: the view + missing counts; after: runner.job_health_v1)":
        ((OLD_JOB_HEALTH, OLD_MISSING_COUNTS), (QO["job_health"],), {"job_name": None}),
    "SELECT * FROM runner.alerts (runner status)": ((QO["alerts"],), (QO["alerts"],), {"job_name": None}),
    "alert counts per job (the Jobs page's)": ((QW["alert_counts"],), (QW["alert_counts"],), {}),
    "the gap scan, all jobs (runner.missing_slots_v1)": ((OLD_MISSING_COUNTS,), (OLD_MISSING_COUNTS,), {}),
}


def main() -> None:
    rounds, before_db, after_db = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    conns = {}
    for side, db in (("before", before_db), ("after", after_db)):
        conn = psycopg.connect(f"postgresql://postgres@127.0.0.1/{db}", autocommit=True)
        conn.execute("SET jit = off")
        conns[side] = conn
    times: dict[tuple[str, str], list[float]] = {(s, side): [] for s in STATEMENTS for side in conns}
    for _ in range(rounds):
        for name, (before, after, params) in STATEMENTS.items():
            for side, conn in conns.items():
                start = time.perf_counter()
                for one in before if side == "before" else after:
                    conn.execute(one, params if "%(" in one else None).fetchall()
                times[(name, side)].append((time.perf_counter() - start) * 1000)
    for name in STATEMENTS:
        after_ms = statistics.median(times[(name, "after")])
        if times[(name, "before")]:
            before_ms = statistics.median(times[(name, "before")])
            print(f"| {name} | {before_ms:.1f} | {after_ms:.1f} | {before_ms / after_ms:.1f} |")
        else:
            print(f"| {name} | - | {after_ms:.1f} | - |")


if __name__ == "__main__":
    main()
