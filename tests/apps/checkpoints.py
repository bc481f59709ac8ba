"""Jobs for the checkpoint tests (tests/test_checkpoints.py): ``settle`` (a plain def) and
``asettle`` (async def) each insert CK_TOTAL rows into ``ck_rows`` in chunks of CK_CHUNK
through ``ctx.db``, with a checkpoint after each chunk, starting from ``ctx.resume``. Every
chunk is also counted in ``ck_work`` on a connection of its own (autocommit, outside
``ctx.db``), so the count includes the chunks that were rolled back: the total work done.
A daily slot CK_SLOT (the same for every process of a test), tracked from a minute before
it: one catch-up run of each job at start, the next 24 hours later."""

import asyncio
import os
import time
from datetime import UTC, datetime, timedelta

import psycopg

from runner import AsyncJobContext, JobContext, Runner

app = Runner()
SLOT = datetime.fromisoformat(os.environ.get("CK_SLOT")
                              or (datetime.now(UTC) - timedelta(minutes=30)).replace(second=0, microsecond=0).isoformat())
DAILY = f"{SLOT.minute} {SLOT.hour} * * *"
TRACK_FROM = SLOT - timedelta(minutes=1)
URL = os.environ["RUNNER_DATABASE_URL"]
TOTAL = int(os.environ.get("CK_TOTAL", "10000"))
CHUNK = int(os.environ.get("CK_CHUNK", "100"))
PAUSE = float(os.environ.get("CK_PAUSE", "0.02"))  # seconds between chunks: the handler's other work
COUNT = "UPDATE ck_work SET rows_written = rows_written + %s WHERE job = %s"
INSERT = "INSERT INTO ck_rows (job, n) SELECT %s, g FROM generate_series(%s::int, %s::int) AS g"


@app.job("settle", cron=DAILY, track_from=TRACK_FROM, max_attempts=10)
def settle(ctx: JobContext) -> None:
    start = (ctx.resume or {"next": 0})["next"]
    with psycopg.connect(URL, autocommit=True) as side:
        for first in range(start, TOTAL, CHUNK):
            last = min(first + CHUNK, TOTAL) - 1
            ctx.db.execute(INSERT, ("settle", first, last))
            side.execute(COUNT, (last - first + 1, "settle"))
            ctx.checkpoint({"next": last + 1}, summary=f"{last + 1} of {TOTAL} rows")
            time.sleep(PAUSE)


@app.job("asettle", cron=DAILY, track_from=TRACK_FROM, max_attempts=10)
async def asettle(ctx: AsyncJobContext) -> None:
    start = (ctx.resume or {"next": 0})["next"]
    async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as side:
        for first in range(start, TOTAL, CHUNK):
            last = min(first + CHUNK, TOTAL) - 1
            await ctx.db.execute(INSERT, ("asettle", first, last))
            await side.execute(COUNT, (last - first + 1, "asettle"))
            await ctx.checkpoint({"next": last + 1}, summary=f"{last + 1} of {TOTAL} rows")
            await asyncio.sleep(PAUSE)
