from runner import JobContext, Runner

app = Runner()


@app.job("every-second", every="1s", misfire="skip", grace="1s", partitions=["x", "y"])
def every_second(ctx: JobContext) -> None:
    pass


@app.job("every-second-coalesced", every="1s", misfire="coalesce", grace="1s")
def coalesced(ctx: JobContext) -> None:
    pass
