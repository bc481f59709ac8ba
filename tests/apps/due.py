"""Jobs for the tests of backfills against the clock (tests/test_backfill.py, issue 26).

``ticks`` runs every 2 s (a backfill reaching past now would hold its next slots); ``coal``
is a minutely job with misfire="coalesce" (a covering run and the slots coalesced into it)."""

from runner import JobContext, Runner

app = Runner()


@app.job("ticks", every="2s", grace="30s")
def ticks(ctx: JobContext) -> None:
    pass


@app.job("coal", every="1m", misfire="coalesce")
def coal(ctx: JobContext) -> None:
    pass
