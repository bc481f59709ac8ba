"""Jobs for the operator tests: two that succeed every second, one that always fails."""

from runner import JobContext, Runner

app = Runner()


@app.job("ok", every="1s", owner="team-ok")
def ok(ctx: JobContext) -> None:
    ctx.heartbeat(processed=1)


@app.job("other", every="1s")
def other(ctx: JobContext) -> None:
    pass


@app.job("nope", every="1s", max_attempts=2, backoff="1h", owner="team-nope")
def nope(ctx: JobContext) -> None:
    raise RuntimeError(f"always fails (attempt {ctx.attempt}, trigger {ctx.trigger})")
