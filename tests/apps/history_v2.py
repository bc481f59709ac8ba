"""Version 2 of one job's code (tests/test_history.py): the same job name as
tests/apps/history_v1.py, every 2s instead of every 3s, two partitions; a late slot is
replayed (grace 1 s), so a downtime goes to the misfire duty."""

from runner import JobContext, Runner

app = Runner()


@app.job("rollout", every="2s", partitions=["a", "b"], misfire="replay", grace="1s")
def rollout(ctx: JobContext) -> None:
    pass
