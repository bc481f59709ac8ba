"""Runs that each hold their key for a while, for the two-logins tests
(tests/security/test_two_logins.py): four partitions every second, a second of work each."""

import time

from runner import JobContext, Runner

app = Runner()


@app.job("held", every="1s", partitions=["a", "b", "c", "d"])
def held(ctx: JobContext) -> None:
    time.sleep(1.0)  # the work: the run's key is held meanwhile
