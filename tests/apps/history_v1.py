"""Version 1 of one job's code (tests/test_history.py): the same job name as
tests/apps/history_v2.py, every 3s instead of every 2s, two partitions; a late slot is
replayed (grace 1 s), so a downtime goes to the misfire duty."""

from runner import JobContext, Runner

app = Runner()


@app.job("rollout", every="3s", partitions=["a", "b"], misfire="replay", grace="1s")
def rollout(ctx: JobContext) -> None:
    pass
