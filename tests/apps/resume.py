"""The job of tests/test_backfill_resume.py: ``long`` records, through ``ctx.db``, what each
attempt was handed as ``ctx.resume`` (``rs_seen``), then takes its steps from there to 3, a
checkpoint after each (its state names the fence that took it). A daily slot RS_SLOT (the
same for every process of a test), tracked from a minute before it: one catch-up run at
start."""

import os
from datetime import datetime, timedelta

from psycopg.types.json import Jsonb

from runner import JobContext, Runner

app = Runner()
SLOT = datetime.fromisoformat(os.environ["RS_SLOT"])
STEPS = 3


@app.job("long", cron=f"{SLOT.minute} {SLOT.hour} * * *", track_from=SLOT - timedelta(minutes=1))
def long(ctx: JobContext) -> None:
    ctx.db.execute("INSERT INTO rs_seen (run_id, fence, resume) VALUES (%s, %s, %s)",
                   (ctx.run_id, ctx.fence, Jsonb(ctx.resume)))
    start = (ctx.resume or {"next": 0})["next"]
    for step in range(start, STEPS):
        ctx.checkpoint({"next": step + 1, "fence": ctx.fence}, summary=f"step {step + 1} of {STEPS}")
