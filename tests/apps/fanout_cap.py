"""Jobs for the fan-out bound tests (tests/security/test_fanout_bound.py): ``wide`` fans out
one key past the per-slot cap (runner/worker/fanout.py: MAX_PARTITIONS) every second; ``steady`` is a
plain job that must keep running beside it."""

from runner import Runner
from runner.worker.fanout import MAX_PARTITIONS

app = Runner()
KEYS = [f"tenant-{i}" for i in range(MAX_PARTITIONS + 1)]


@app.job("wide", every="1s", partitions=lambda slot: KEYS, misfire="skip")
def wide(ctx):
    pass


@app.job("steady", every="1s")
def steady(ctx):
    pass
