"""A sync and an async job in one app, every second over three partitions; each run writes
one sink row through ctx.db (a Connection for the sync one, an AsyncConnection for the other)."""

import asyncio

from runner import AsyncJobContext, JobContext, Runner

app = Runner()

INSERT = "INSERT INTO sink (job_name, slot, partition_key, fence) VALUES (%s, %s, %s, %s)"


@app.job("mixed-sync", every="1s", partitions=["a", "b", "c"])
def sync_tick(ctx: JobContext) -> None:
    ctx.db.execute(INSERT, ("mixed-sync", ctx.slot, ctx.partition, ctx.fence))


@app.job("mixed-async", every="1s", partitions=["a", "b", "c"])
async def async_tick(ctx: AsyncJobContext) -> None:
    await asyncio.sleep(0.05)
    await ctx.db.execute(INSERT, ("mixed-async", ctx.slot, ctx.partition, ctx.fence))
