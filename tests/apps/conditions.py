"""Jobs for the pause-condition security tests (tests/security/test_pause_condition.py).

``tick`` falls due every 200 ms and runs 150 ms, so the runner holds a run lock most of the
time and a stalled loop shows at once as lag; ``hourly`` is the job the backfill plans
re-run (200 ms a run), so a plan keeps the backfill lane busy for as long as a test needs.
"""

import time

from runner import JobContext, Runner

app = Runner()


@app.job("tick", every="200ms", grace="30s")
def tick(ctx: JobContext) -> None:
    time.sleep(0.15)


@app.job("hourly", every="1h", max_attempts=1)
def hourly(ctx: JobContext) -> None:
    time.sleep(0.2)
