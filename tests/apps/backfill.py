"""Jobs for the backfill and approval tests.

``hourly`` records, in the table ``bf_gauge`` (made by the test), how many of its handlers
run at once (on its own autocommit connection, so every process sees it at once), and its
slot in ``bf_done`` through ``ctx.db`` (exactly once with the run's success). Its verify check
(SQL) counts those rows over the window. ``flaky`` always fails; ``live`` is a realtime job;
``held`` has misfire="manual"; ``checked`` has a callable verify check.
"""

import os
import time
from datetime import datetime

import psycopg

from runner import JobContext, Permanent, Runner

app = Runner()
URL = os.environ.get("RUNNER_DATABASE_URL", "")
WORK = float(os.environ.get("BF_WORK_SECONDS", "0.05"))

HOURLY_VERIFY = """
SELECT count(*) = round(extract(epoch FROM %(window_end)s::timestamptz - %(window_start)s::timestamptz) / 3600),
       count(*) || ' row(s) for partition ' || %(partition)s
FROM bf_done
WHERE partition_key = %(partition)s AND slot > %(window_start)s AND slot <= %(window_end)s
"""


@app.job("hourly", every="1h", partitions=["a", "b"], verify=HOURLY_VERIFY, max_attempts=2,
         backoff="100ms")
def hourly(ctx: JobContext) -> None:
    with psycopg.connect(URL, autocommit=True) as gauge:
        gauge.execute("UPDATE bf_gauge SET running = running + 1, peak = greatest(peak, running + 1)")
        try:
            time.sleep(WORK)  # the work itself
        finally:
            gauge.execute("UPDATE bf_gauge SET running = running - 1")
    ctx.db.execute("INSERT INTO bf_done (slot, partition_key, run_id, fence) VALUES (%s, %s, %s, %s)",
                   (ctx.slot, ctx.partition, ctx.run_id, ctx.fence))


@app.job("flaky", every="1h", max_attempts=1)
def flaky(ctx: JobContext) -> None:
    raise Permanent(f"bad input for slot {ctx.slot.isoformat()}")


@app.job("live", every="1s", grace="30s")
def live(ctx: JobContext) -> None:
    pass


@app.job("held", every="1h", misfire="manual")
def held(ctx: JobContext) -> None:
    ctx.db.execute("INSERT INTO bf_done (slot, partition_key, run_id, fence) VALUES (%s, '', %s, %s)",
                   (ctx.slot, ctx.run_id, ctx.fence))


def check_rows(conn: psycopg.Connection, window_start: datetime, window_end: datetime,
               partition: str) -> bool | str:
    row = conn.execute("SELECT count(*) FROM bf_done WHERE slot > %s AND slot <= %s",
                       (window_start, window_end)).fetchone()
    return True if row and row[0] > 0 else f"no rows in [{window_start.isoformat()}, {window_end.isoformat()})"


@app.job("checked", every="1h", verify=check_rows)
def checked(ctx: JobContext) -> None:
    pass
