"""Jobs for the fault tests. Each handler announces itself in `marks` (autocommit, so the
test can see it), may block until the test lets it go (a row in `release`), and writes its
result to `sink` through ctx.db (exactly-once with the run's success)."""

import os
import time
from datetime import UTC, datetime, timedelta

import psycopg

from runner import JobContext, Runner

app = Runner()
# daily jobs whose one slot is FAULTS_SLOT (tests/test_faults.py sets it, the same for every
# process of a test; else 30 minutes before import), tracked from a minute before it: that slot
# is late at start, so the misfire policy (coalesce) starts one catch-up run of it at once, and
# the next falls 24 hours later. (Hourly jobs tracked from an hour ago found their slot on
# time within the 60-s grace after the top of an hour, and a test crossing the top of an hour
# saw one more run, whose blocking "slow" attempt held up the runner's shutdown.)
SLOT = datetime.fromisoformat(os.environ.get("FAULTS_SLOT")
                              or (datetime.now(UTC) - timedelta(minutes=30)).replace(second=0, microsecond=0).isoformat())
DAILY = f"{SLOT.minute} {SLOT.hour} * * *"
TRACK_FROM = SLOT - timedelta(minutes=1)
URL = os.environ["RUNNER_DATABASE_URL"]


def mark(ctx: JobContext, what: str) -> None:
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute("INSERT INTO marks (run_id, attempt, fence, pid, what) VALUES (%s, %s, %s, %s, %s)",
                     (ctx.run_id, ctx.attempt, ctx.fence, os.getpid(), what))


def released(ctx: JobContext) -> bool:
    with psycopg.connect(URL, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM release WHERE run_id = %s AND attempt = %s",
                            (ctx.run_id, ctx.attempt)).fetchone()[0] > 0


def block_until_released(ctx: JobContext) -> None:
    while not released(ctx):
        time.sleep(0.05)  # the handler's own work: waiting for the test to let it go


# max_attempts=2: a recovery after the owner died counts as an attempt (with 1, a run whose
# owner dies is dead: at most one attempt)
@app.job("slow", cron=DAILY, lease="2s", max_attempts=2, track_from=TRACK_FROM)
def slow(ctx: JobContext) -> None:
    mark(ctx, "started")
    if ctx.attempt == 1:
        block_until_released(ctx)
    ctx.db.execute("INSERT INTO sink (run_id, attempt, fence) VALUES (%s, %s, %s)",
                   (ctx.run_id, ctx.attempt, ctx.fence))
    mark(ctx, "finished")


@app.job("cooperative-timeout", cron=DAILY, timeout="1s", max_attempts=1, track_from=TRACK_FROM)
def cooperative(ctx: JobContext) -> None:
    mark(ctx, "started")
    while True:
        ctx.heartbeat()  # raises AttemptTimedOut once the runner gives up
        time.sleep(0.05)


@app.job("stubborn-timeout", cron=DAILY, timeout="1s", max_attempts=1, track_from=TRACK_FROM)
def stubborn(ctx: JobContext) -> None:
    mark(ctx, "started")
    ctx.db.execute("SELECT pg_sleep(3600)")  # cancelled by the runner at the timeout


@app.job("quick", every="1s")
def quick(ctx: JobContext) -> None:
    pass
