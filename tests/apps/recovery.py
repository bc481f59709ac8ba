"""Jobs for the recovery tests (tests/test_recovery.py): one app of sync handlers, one of
``async def`` handlers, each with ``live`` (realtime, every second, no work) and ``hist``
(hourly, for backfills: its handler holds until the table ``recovery_release``, made by the
test, has a row, so a test keeps bulk runs in flight for exactly as long as it needs).
The ledger's attempts (owner_pid, started_at, finished_at) say who ran what, and when."""

import asyncio
import os
import time

import psycopg

from runner import AsyncJobContext, JobContext, Runner

URL = os.environ.get("RUNNER_DATABASE_URL", "")
RELEASED = "SELECT count(*) FROM recovery_release"
HOLD_FOR = 60.0  # seconds at most: the tests release long before

sync_app = Runner()
async_app = Runner()


@sync_app.job("live", every="1s", grace="30s")
def live(ctx: JobContext) -> None:
    pass


@sync_app.job("hist", every="1h", max_attempts=3)
def hist(ctx: JobContext) -> None:
    deadline = time.monotonic() + HOLD_FOR
    with psycopg.connect(URL, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if conn.execute(RELEASED).fetchone()[0]:  # type: ignore[index]
                return
            time.sleep(0.05)


@async_app.job("live", every="1s", grace="30s")
async def live_async(ctx: AsyncJobContext) -> None:
    await asyncio.sleep(0)


@async_app.job("hist", every="1h", max_attempts=3)
async def hist_async(ctx: AsyncJobContext) -> None:
    deadline = time.monotonic() + HOLD_FOR
    async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = await (await conn.execute(RELEASED)).fetchone()
            if row and row[0]:
                return
            await asyncio.sleep(0.05)
