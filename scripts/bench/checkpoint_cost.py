"""The cost of one fenced checkpoint (runner/worker/checkpoints.py, issue 33).

    python scripts/bench/checkpoint_cost.py [--dsn DSN] [-n 300] [--rows 100]

On a scratch database (bench_checkpoint_cost, migrated to head, dropped after): one run in
the running state at fence 1, and a handler-like loop on one connection: insert ``--rows``
rows in a transaction, then end it in one of three ways, interleaved, ``-n`` times each:

* ``commit``: a plain commit (what a handler could do without the fence: no state, no check);
* ``checkpoint``: ``commit_checkpoint`` (runner.checkpoint_v1 under the run's row lock, then
  the commit), with a state of 30 bytes, 4 KiB and 60 KiB of JSON.

The figures are the time from the end of the insert to the end of the commit, in ms: the
median and p90 of each, and the median cost of the checkpoint over the plain commit. Prints
a table and the JSON (with the environment). The commit waits for the WAL flush either way
(synchronous_commit as the server has it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchlib import drop_database, environment, median, percentile, print_table, recreate_database

from runner.store import migrate
from runner.worker.checkpoints import commit_checkpoint, encode

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
NAME = "bench_checkpoint_cost"
RUN = """
INSERT INTO runner.job_runs (job_name, schedule_slot, business_date, window_start, window_end,
                             status, trigger, attempt, fence, idempotency_key, started_at)
VALUES ('bench', now(), current_date, now() - interval '1 hour', now(), 'running', 'schedule',
        1, 1, 'bench', now())
RETURNING id
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN,
                        help="an admin URL postgresql://.../DB (the scratch database is made beside it)")
    parser.add_argument("-n", type=int, default=300, help="measurements of each kind")
    parser.add_argument("--rows", type=int, default=100, help="rows inserted in each transaction")
    args = parser.parse_args()
    recreate_database(args.dsn, NAME)
    url = args.dsn.rsplit("/", 1)[0] + "/" + NAME  # a URL (runner.migrate takes URLs)
    try:
        migrate.upgrade(url)
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("CREATE TABLE bench_rows (n integer NOT NULL, at timestamptz DEFAULT now())")
            run_id = admin.execute(RUN).fetchone()[0]  # type: ignore[index]
        states = {"checkpoint 30 B": {"next": 123456, "tenant": "t-0042"},
                  "checkpoint 4 KiB": {"next": 1, "seen": ["x" * 60] * 64},
                  "checkpoint 60 KiB": {"next": 1, "seen": ["x" * 60] * 960}}
        encoded = {k: encode(v, None) for k, v in states.items()}
        kinds = ["commit", *states]
        times: dict[str, list[float]] = {k: [] for k in kinds}
        with psycopg.connect(url) as conn:  # a transaction per loop, as ctx.db
            for i in range(args.n + 10):
                for kind in kinds:
                    conn.execute("INSERT INTO bench_rows (n) SELECT g FROM generate_series(1, %s) g",
                                 (args.rows,))
                    t0 = time.perf_counter()
                    if kind == "commit":
                        conn.commit()
                    else:
                        text, summary = encoded[kind]
                        assert commit_checkpoint(conn, run_id, 1, text, summary) is not None
                    if i >= 10:  # (warm-up)
                        times[kind].append((time.perf_counter() - t0) * 1000)
        base = median(times["commit"])
        result: dict[str, Any] = {
            "n": args.n, "rows": args.rows, "environment": environment(url),
            "ms": {k: {"median": round(median(v), 3), "p90": round(percentile(v, 90), 3),
                       "over_commit_median": round(median(v) - base, 3)} for k, v in times.items()},
            "state_bytes": {k: len(t.encode()) for k, (t, _) in encoded.items()},
        }
        print_table(["ending", "median ms", "p90 ms", "median over a plain commit, ms"],
                    [[k, v["median"], v["p90"], v["over_commit_median"]] for k, v in result["ms"].items()])
        print(json.dumps(result, indent=2))
    finally:
        drop_database(args.dsn, NAME)


if __name__ == "__main__":
    main()
