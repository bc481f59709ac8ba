"""Fan-out under overload (issue 12, point 10): a partitions callable returning more keys than
a slot may have fails that slot with a clear, recorded error; and the claims queued from
fan-outs are bounded (``max_backlog``), so a process that cannot keep up keeps later slots
unexpanded instead of growing. (scripts/bench/fanout_memory.py measures the memory of a real
runner fed 100,000 keys every 2 s.)"""

from __future__ import annotations

import threading
from pathlib import Path

from runner import JobContext, Runner
from runner.worker.fanout import MAX_PARTITIONS
from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, running_worker, scalar


def test_a_slot_past_the_partition_cap_fails_with_a_recorded_error(db_url: str, tmp_path: Path) -> None:
    proc = RunnerProcess("tests/apps/fanout_cap.py:app", db_url, "--poll-interval", "0.2",
                         log=tmp_path / "runner.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.slot_fanouts"
                                          " WHERE job_name = 'wide' AND error IS NOT NULL") >= 2,
                   timeout=60, message="two failed fan-outs recorded")
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'steady'"
                                          " AND status = 'succeeded'") >= 2, timeout=30)
    finally:
        assert proc.terminate() == 0, proc.output()[-3000:]
    errors = rows(db_url, "SELECT DISTINCT error, cardinality(partitions) FROM runner.slot_fanouts"
                          " WHERE job_name = 'wide'")
    assert errors == [(f"ValueError: the partitions callable returned {MAX_PARTITIONS + 1} keys, more than "
                       f"the cap of {MAX_PARTITIONS} per slot", 0)]
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'wide'") == 0
    # (up to the last slot the runner fanned out: the ones due after it stopped are never started)
    states = rows(db_url, "SELECT DISTINCT state FROM runner.missing_slots WHERE job_name = 'wide'"
                          " AND schedule_slot <= (SELECT max(schedule_slot) FROM runner.slot_fanouts"
                          " WHERE job_name = 'wide')")
    assert states == [("fanout_failed",)]
    assert "more than the cap" in proc.output()
    assert_ledger_clean(db_url)


def test_the_queued_fan_out_is_bounded(db_url: str) -> None:
    """500 partitions every 200 ms, one handler thread of 50 ms: 50 times more than the process
    can run. The claims waiting never exceed max_backlog plus one slot's partitions."""
    app = Runner()

    @app.job("flood", every="200ms", partitions=[f"p{i}" for i in range(500)], grace="30s")
    def flood(ctx: JobContext) -> None:
        threading.Event().wait(0.05)

    peak = 0
    with running_worker(app, db_url, workers=1, max_inflight=1, max_backlog=100) as worker:
        def far_behind() -> bool:
            """Whether the next slot to fan out is 3 s old (recording the queue's peak)."""
            nonlocal peak
            peak = max(peak, len(worker.claims.pending) + len(worker.claims.stolen)
                       + sum(len(d.claims) for d in worker.claims.deferred))
            return (worker.now() - worker.claims.next_slot["flood"]).total_seconds() > 3

        eventually(far_behind, timeout=30, interval=0.02,
                   message="later slots wait unexpanded while the backlog is full")
        started = scalar(db_url, "SELECT count(*) FROM runner.job_runs")
    assert 0 < peak <= 100 + 500, peak
    assert started < 500, started  # not even one slot's partitions could be run meanwhile
