"""Jobs for the lane tests (tests/test_lanes.py).

``live`` is a realtime job due every second (no-op). ``hist`` is an hourly job for backfills:
its handler works ``LANE_WORK`` seconds, or, with ``LANE_HOLD`` set, until the table
``lane_release`` (made by the test) has a row, so a test can keep bulk handlers busy for as
long as it needs without a timing guess. The ledger's attempts (owner_pid, started_at,
finished_at) say which process ran what and what overlapped.
"""

import os
import time

import psycopg

from runner import JobContext, Runner

app = Runner()
URL = os.environ.get("RUNNER_DATABASE_URL", "")
WORK = float(os.environ.get("LANE_WORK", "0.2"))
HOLD = bool(os.environ.get("LANE_HOLD"))


@app.job("live", every="1s", grace="30s")
def live(ctx: JobContext) -> None:
    pass


@app.job("hist", every="1h", max_attempts=1)
def hist(ctx: JobContext) -> None:
    if not HOLD:
        time.sleep(WORK)
        return
    with psycopg.connect(URL, autocommit=True) as conn:
        for _ in range(600):  # at most 60 s: released by the test long before
            if conn.execute("SELECT count(*) FROM lane_release").fetchone()[0]:  # type: ignore[index]
                return
            time.sleep(0.1)
