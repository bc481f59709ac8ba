"""Jobs for the retention tests: `hourly` keeps its runs an hour (the least there is) and
`second` runs every second with the runner's --retention-default."""

from runner import JobContext, Runner

app = Runner()


@app.job("hourly", every="1h", retention={"succeeded": "1h", "failed": "2h"})
def hourly(ctx: JobContext) -> None:
    pass


@app.job("second", every="1s")
def second(ctx: JobContext) -> None:
    pass
