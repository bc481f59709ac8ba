"""The gap scan and pruning on ledgers kept by ledger_age.py, alternating, with buffer counts.

    BENCH_KEEP_DB=1 python scripts/bench/ledger_age.py --rows 1000000 10000000 30000000
    python scripts/bench/age_recheck.py [--clean | --clean-only] [--dbs DB ...] [--dsn DSN] [--log FILE]

--clean first removes the bench's own live jobs (lag-*, fanout: they go on accruing
never-started slots after the measurement), vacuums and advances the watermarks. Then three
rounds over bench_ledger_age_{1000000,10000000,30000000}: count(*) of runner.missing_slots
three times (the fastest kept) and runner.prune_v1(5000) four times; buffer counts (hit,
read) of one scan and one pass from the server log through auto_explain (the server's log
file must be readable: /var/log/postgresql here). Prints JSON. Changes the ledgers (prunes).
--clean-only cleans and stops there (before scan_variants.py on the kept ledgers); --dbs names
the ledgers (default the three above).

--dsn names the server of the ledgers (as ledger_age.py's --dsn; its database is replaced by
each ledger's; default the one on 5432), --log that server's log file (default the newest
/var/log/postgresql/*.log, the only one when a single cluster runs).
"""

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import psycopg
from benchlib import auto_explain_buffers, newest_server_log
from psycopg.conninfo import make_conninfo

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
DBS = ["bench_ledger_age_1000000", "bench_ledger_age_10000000", "bench_ledger_age_30000000"]
DSN = DEFAULT_DSN
LOG = ""  # set by main(): --log, else the newest server log
SCAN = "SELECT count(*) FROM runner.missing_slots"
PASS = "SELECT count(*) FROM runner.prune_v1(5000)"


def url(db: str) -> str:
    return make_conninfo(DSN, dbname=db)


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
    return auto_explain_buffers(conn, statement, LOG)


def main() -> None:
    global DSN, LOG
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clean", action="store_true", help="remove the bench's live jobs, vacuum, advance first")
    parser.add_argument("--clean-only", action="store_true", help="clean (as --clean) and measure nothing")
    parser.add_argument("--dbs", nargs="+", default=DBS, help="the kept ledgers (default: %(default)s)")
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="a DSN of the ledgers' server (its database is replaced)")
    parser.add_argument("--log", help="that server's log file (default: the newest /var/log/postgresql/*.log)")
    args = parser.parse_args()
    DSN = args.dsn
    DBS[:] = args.dbs
    if args.clean or args.clean_only:
        clean()
    if args.clean_only:
        return
    LOG = args.log or newest_server_log()
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
