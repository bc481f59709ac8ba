"""A job every second with three partitions; each run writes one sink row through ctx.db."""

from runner import JobContext, Runner

app = Runner()


@app.job("tick", every="1s", partitions=["a", "b", "c"])
def tick(ctx: JobContext) -> None:
    ctx.db.execute(
        "INSERT INTO sink (job_name, slot, partition_key, fence, idempotency_key)"
        " VALUES (%s, %s, %s, %s, %s)",
        ("tick", ctx.slot, ctx.partition, ctx.fence, ctx.idempotency_key),
    )
