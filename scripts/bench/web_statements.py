"""The Jobs page's statements on two ledgers seeded by web_latency.py --db, alternating in the
same seconds (a before/after pair on a shared machine):

    python scripts/bench/web_statements.py ROUNDS BEFORE_DB AFTER_DB

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
STATEMENTS: dict[str, tuple[str, dict[str, Any]]] = {
    "SELECT * FROM runner.job_health (runner status, Jobs page)": (QO["job_health"], {"job_name": None}),
    "SELECT * FROM runner.alerts (runner status)": (QO["alerts"], {"job_name": None}),
    "alert counts per job (the Jobs page's, after)": (QW["alert_counts"], {}),
    "missing counts (runner.missing_slots_v1, all jobs)": (QO["missing_counts"], {"job_name": None}),
}
NEW_ONLY = {"alert counts per job (the Jobs page's, after)"}


def main() -> None:
    rounds, before_db, after_db = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    conns = {}
    for side, db in (("before", before_db), ("after", after_db)):
        conn = psycopg.connect(f"postgresql://postgres@127.0.0.1/{db}", autocommit=True)
        conn.execute("SET jit = off")
        conns[side] = conn
    times: dict[tuple[str, str], list[float]] = {(s, side): [] for s in STATEMENTS for side in conns}
    for _ in range(rounds):
        for name, (statement, params) in STATEMENTS.items():
            for side, conn in conns.items():
                if name in NEW_ONLY and side == "before":
                    continue
                start = time.perf_counter()
                conn.execute(statement, params).fetchall()
                times[(name, side)].append((time.perf_counter() - start) * 1000)
    for name in STATEMENTS:
        after = statistics.median(times[(name, "after")])
        if times[(name, "before")]:
            before = statistics.median(times[(name, "before")])
            print(f"| {name} | {before:.1f} | {after:.1f} | {before / after:.1f} |")
        else:
            print(f"| {name} | - | {after:.1f} | - |")


if __name__ == "__main__":
    main()
