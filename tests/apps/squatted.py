"""A quick job for the lock-squatter tests (tests/security/test_lock_squatters.py)."""

from runner import JobContext, Runner

app = Runner()


@app.job("squatted", every="1s", max_attempts=3, backoff="100ms")
def squatted(ctx: JobContext) -> None:
    pass
