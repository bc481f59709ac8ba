"""The bundled example: ``runner start --app runner.example:app``.

Two jobs: a heartbeat every 10 seconds, and an hourly report per tenant that writes its
result through ``ctx.db`` (so the write commits exactly once, with the run's success).
"""

from __future__ import annotations

import logging

from runner import JobContext, Runner

app = Runner()
log = logging.getLogger("runner.example")


@app.job("heartbeat", every="10s")
def heartbeat(ctx: JobContext) -> None:
    log.info("heartbeat for slot %s (attempt %s)", ctx.slot.isoformat(), ctx.attempt)


@app.job("hourly-report", cron="0 * * * *", timezone="Asia/Seoul", partitions=["acme", "globex"])
def hourly_report(ctx: JobContext) -> None:
    # two processes may create the table at once: serialise them on a transaction lock
    ctx.db.execute("SELECT pg_advisory_xact_lock(hashtext('runner.example'))")
    ctx.db.execute(
        "CREATE TABLE IF NOT EXISTS example_reports ("
        " tenant text, business_date date, window_start timestamptz, window_end timestamptz,"
        " idempotency_key text PRIMARY KEY)"
    )
    ctx.db.execute(
        "INSERT INTO example_reports VALUES (%s, %s, %s, %s, %s)",
        (ctx.partition, ctx.business_date, ctx.window_start, ctx.window_end, ctx.idempotency_key),
    )
    log.info("report for %s, %s written", ctx.partition, ctx.business_date)
