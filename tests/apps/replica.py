"""A job due every second with a grace of one second, for the replica test
(tests/test_replica.py): a replica judged at its own clock while its replay is paused
would see it late within seconds."""

from runner import JobContext, Runner

app = Runner()


@app.job("tick", every="1s", grace="1s", misfire="skip")
def tick(ctx: JobContext) -> None:
    pass
