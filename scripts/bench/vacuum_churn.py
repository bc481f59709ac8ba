"""Churn on an old ledger: does autovacuum keep up with the hot tables (revision 0015_scale)?

    BENCH_KEEP_DB=1 python scripts/bench/ledger_age.py --rows 10000000 --seed-only bench_x
    python scripts/bench/vacuum_churn.py --db bench_x [--slots 6] [--partitions 25000]

On an existing seeded ledger (scripts/bench/ledger_age.py --seed-only): two `runner start`
processes drain --slots slots of one job with --partitions partitions each (the claim path
of ledger_age.py: every run one insert and one or two updates of runner.job_runs, one insert
and one update of runner.attempts), while a sampler reads pg_stat_user_tables of both hot
tables every --every seconds: live and dead tuples, rows inserted since the last vacuum, and
the autovacuum / autoanalyze counts. It goes on sampling --settle seconds after the drain, so
a vacuum the churn triggered near its end is seen. Prints one JSON document, with the
server's `autovacuum` setting: with it off (as on the CI server, whose conf.d turns it off)
no threshold matters and the dead tuples only grow; measure on a server with it on.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import DEFAULT_DSN, dsn_for, environment  # noqa: E402
from gap_scan import url_of  # noqa: E402
from ledger_age import claim_throughput  # noqa: E402

STATS = ("SELECT relname, n_live_tup, n_dead_tup, n_ins_since_vacuum, n_mod_since_analyze,"
         " autovacuum_count, autoanalyze_count, last_autovacuum"
         " FROM pg_stat_user_tables WHERE schemaname = 'runner' AND relname IN ('job_runs', 'attempts')"
         " ORDER BY relname")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="an admin DSN (the ledger is on its server)")
    parser.add_argument("--db", required=True, help="the seeded ledger's database")
    parser.add_argument("--slots", type=int, default=6, help="slots drained (the first one, then --slots - 1 more)")
    parser.add_argument("--partitions", type=int, default=25000, help="runs per slot")
    parser.add_argument("--every-slot", type=int, default=30, help="seconds between the job's slots")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between two samples")
    parser.add_argument("--settle", type=float, default=90.0, help="seconds sampled after the drain")
    args = parser.parse_args()
    url = url_of(dsn_for(args.dsn, args.db))
    samples: list[dict[str, Any]] = []
    done = threading.Event()

    def sample() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            t0 = time.monotonic()
            while True:
                rows = conn.execute(STATS).fetchall()
                samples.append({"t": round(time.monotonic() - t0, 1),
                                **{r[0]: {"live": r[1], "dead": r[2], "ins_since_vacuum": r[3],
                                          "mod_since_analyze": r[4], "autovacuums": r[5],
                                          "autoanalyzes": r[6], "last_autovacuum": r[7]} for r in rows}})
                if done.wait(args.every):
                    return

    with psycopg.connect(url, autocommit=True) as conn:
        autovacuum = conn.execute("SELECT current_setting('autovacuum')").fetchone()[0]
    before = time.monotonic()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    runs_per_s = claim_throughput(url, args.partitions, args.slots - 1, args.every_slot)
    drained_at = time.monotonic() - before
    time.sleep(args.settle)
    done.set()
    sampler.join()
    peak = {t: max(s[t]["dead"] for s in samples) for t in ("job_runs", "attempts")}
    print(json.dumps({"environment": environment(args.dsn), "db": args.db, "autovacuum": autovacuum, "slots": args.slots,
                      "partitions": args.partitions, "runs": args.slots * args.partitions,
                      "first_slot_runs_per_s": round(runs_per_s), "drained_after_s": round(drained_at, 1),
                      "peak_dead": peak, "first": samples[0], "last": samples[-1], "samples": samples},
                     indent=2, default=str))


if __name__ == "__main__":
    main()
