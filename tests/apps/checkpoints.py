"""Jobs for the checkpoint tests (tests/test_checkpoints.py): ``settle`` (a plain def) and
``asettle`` (async def) each insert CK_TOTAL rows into ``ck_rows`` in chunks of CK_CHUNK
through ``ctx.db``, with a checkpoint after each chunk, starting from ``ctx.resume``. Every
chunk is also counted in ``ck_work`` on a connection of its own (autocommit, outside
``ctx.db``), so the count includes the chunks that were rolled back: the total work done.
Before each chunk an attempt waits while ``ck_gate`` holds it: its fence is above the row's
``below`` (the test holds the attempts after the one it is about to stop until it has
replaced the stopped runner), or the chunk would start at or past the row's ``gate`` (the
test stops the run there while it picks its moment: a loaded machine cannot then let the run
end before the test saw it).
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
HELD = "SELECT EXISTS (SELECT 1 FROM ck_gate WHERE job = %s AND (below < %s OR gate <= %s))"
INSERT = "INSERT INTO ck_rows (job, n) SELECT %s, g FROM generate_series(%s::int, %s::int) AS g"


JOBS = os.environ.get("CK_JOBS", "settle,asettle").split(",")


def job(name: str):  # type: ignore[no-untyped-def]
    """The job, registered only when CK_JOBS names it (a test drives one at a time)."""
    if name not in JOBS:
        return lambda fn: fn
    return app.job(name, cron=DAILY, track_from=TRACK_FROM, max_attempts=10)


@job("settle")
def settle(ctx: JobContext) -> None:
    start = (ctx.resume or {"next": 0})["next"]
    with psycopg.connect(URL, autocommit=True) as side:
        for first in range(start, TOTAL, CHUNK):
            last = min(first + CHUNK, TOTAL) - 1
            while side.execute(HELD, ("settle", ctx.fence, first)).fetchone()[0]:  # type: ignore[index]
                time.sleep(0.02)
            ctx.db.execute(INSERT, ("settle", first, last))
            side.execute(COUNT, (last - first + 1, "settle"))
            ctx.checkpoint({"next": last + 1}, summary=f"{last + 1} of {TOTAL} rows")
            time.sleep(PAUSE)


@job("asettle")
async def asettle(ctx: AsyncJobContext) -> None:
    start = (ctx.resume or {"next": 0})["next"]
    async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as side:
        for first in range(start, TOTAL, CHUNK):
            last = min(first + CHUNK, TOTAL) - 1
            while (await (await side.execute(HELD, ("asettle", ctx.fence, first))).fetchone())[0]:  # type: ignore[index]
                await asyncio.sleep(0.02)
            await ctx.db.execute(INSERT, ("asettle", first, last))
            await side.execute(COUNT, (last - first + 1, "asettle"))
            await ctx.checkpoint({"next": last + 1}, summary=f"{last + 1} of {TOTAL} rows")
            await asyncio.sleep(PAUSE)
