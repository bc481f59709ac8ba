"""The gap scan and pruning on ledgers kept by ledger_age.py, alternating, with buffer counts.

    BENCH_KEEP_DB=1 python scripts/bench/ledger_age.py --rows 1000000 10000000 30000000
    python scripts/bench/age_recheck.py [--clean] [--dsn DSN] [--log FILE]

--clean first removes the bench's own live jobs (lag-*, fanout: they go on accruing
never-started slots after the measurement), vacuums and advances the watermarks. Then three
rounds over bench_ledger_age_{1000000,10000000,30000000}: count(*) of runner.missing_slots
three times (the fastest kept) and runner.prune_v1(5000) four times; buffer counts (hit,
read) of one scan and one pass from the server log through auto_explain (the server's log
file must be readable: /var/log/postgresql here). Prints JSON. Changes the ledgers (prunes).

--dsn names the server of the ledgers (as ledger_age.py's --dsn; its database is replaced by
each ledger's; default the one on 5432), --log that server's log file (default the newest
/var/log/postgresql/*.log, the only one when a single cluster runs).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
DBS = ["bench_ledger_age_1000000", "bench_ledger_age_10000000", "bench_ledger_age_30000000"]
DSN = DEFAULT_DSN
LOG = ""  # set by main(): --log, else the newest server log
SCAN = "SELECT count(*) FROM runner.missing_slots"
PASS = "SELECT count(*) FROM runner.prune_v1(5000)"


def url(db: str) -> str:
    return make_conninfo(DSN, dbname=db)


def newest_log() -> str:
    return subprocess.run("ls -t /var/log/postgresql/*.log | head -1", shell=True, capture_output=True,
                          text=True, check=False).stdout.strip()


def clean() -> None:
    for db in DBS:
        with psycopg.connect(url(db), autocommit=True) as c:
            c.execute("SET jit = off")
            c.execute("DELETE FROM runner.job_runs WHERE job_name LIKE 'lag-%' OR job_name = 'fanout'")
            c.execute("DELETE FROM runner.jobs WHERE job_name LIKE 'lag-%' OR job_name = 'fanout'")
            c.execute("VACUUM ANALYZE runner.job_runs, runner.attempts, runner.gap_holes")
            c.execute("SELECT runner.advance_watermarks_v1()")
            print(db, "cleaned", file=sys.stderr, flush=True)


def buffers(conn: psycopg.Connection[Any], statement: str) -> tuple[int, int] | None:
    """(shared hit, read) of the statement's top node, from auto_explain in the server log."""
    size = os.path.getsize(LOG)
    for setting in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                    "SET auto_explain.log_nested_statements = on", "SET auto_explain.log_analyze = on",
                    "SET auto_explain.log_buffers = on"):
        conn.execute(setting)  # type: ignore[arg-type]
    conn.execute(statement).fetchall()  # type: ignore[arg-type]
    conn.execute("SET auto_explain.log_min_duration = -1")
    time.sleep(0.5)  # the log is written by the server
    with open(LOG) as f:
        f.seek(size)
        text = f.read()
    tops = [(int(h), int(r or 0)) for h, r in re.findall(r"\n\s*Buffers: shared hit=(\d+)(?: read=(\d+))?", text)]
    return max(tops, key=lambda t: t[0] + t[1]) if tops else None


def main() -> None:
    global DSN, LOG
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clean", action="store_true", help="remove the bench's live jobs, vacuum, advance first")
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="a DSN of the ledgers' server (its database is replaced)")
    parser.add_argument("--log", help="that server's log file (default: the newest /var/log/postgresql/*.log)")
    args = parser.parse_args()
    DSN, LOG = args.dsn, args.log or newest_log()
    if args.clean:
        clean()
    out: dict[str, dict[str, Any]] = {d: {"gap_ms": [], "prune_rps": []} for d in DBS}
    conns = {d: psycopg.connect(url(d), autocommit=True) for d in DBS}
    for c in conns.values():
        c.execute("SET jit = off")
    for d, c in conns.items():
        out[d]["listed"] = c.execute(SCAN).fetchone()[0]  # type: ignore[index]
        out[d]["holes"] = c.execute("SELECT count(*) FROM runner.gap_holes").fetchone()[0]  # type: ignore[index]
        out[d]["gap_buffers"] = buffers(c, SCAN)
    for _ in range(3):
        for d, c in conns.items():
            times = []
            for _ in range(3):
                t = time.perf_counter()
                c.execute(SCAN).fetchone()
                times.append(time.perf_counter() - t)
            out[d]["gap_ms"].append(round(min(times) * 1000, 1))
        for d, c in conns.items():
            t = time.perf_counter()
            n = sum(c.execute(PASS).fetchone()[0] for _ in range(4))  # type: ignore[index]
            out[d]["prune_rps"].append(round(n / (time.perf_counter() - t)))
    for d, c in conns.items():
        out[d]["prune_buffers"] = buffers(c, PASS)
        out[d]["gap_median_ms"] = statistics.median(out[d]["gap_ms"])
        out[d]["prune_median"] = statistics.median(out[d]["prune_rps"])
    print(json.dumps({"load": os.getloadavg(), "results": out}, indent=1))


if __name__ == "__main__":
    main()
