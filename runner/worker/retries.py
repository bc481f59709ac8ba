"""The retries duty of one process: due retries and queued runs (catch-up and reruns in the
correction lane, approved runs in manual, and any lane's queued runs), every poll interval
and at once when a catch-up run ended or misfire decisions queued runs.

Lane by lane, by priority, each within its free in-flight room here and its fleet budget
(runner.claim_due_runs); while live claims wait in this process, only the live lanes' runs.
"""

from __future__ import annotations

from collections.abc import Callable

from runner.model.jobs import JobDef
from runner.store import ledger
from runner.store.ledger import ClaimedRun, Owner
from runner.worker.budget import Capacity
from runner.worker.config import LoopConfig
from runner.worker.session import LockSession


class DueRuns:
    """The ``retries`` duty (module docstring). ``claims_waiting`` says whether live claims
    wait in this process."""

    name = "retries"

    def __init__(self, config: LoopConfig, jobs: dict[str, JobDef], owner: Owner, session: LockSession,
                 capacity: Capacity, start: Callable[[list[ClaimedRun]], None],
                 claims_waiting: Callable[[], bool]) -> None:
        if config.poll_interval <= 0:
            raise ValueError("poll_interval must be > 0")
        self.every: float | None = config.poll_interval
        self.jobs = jobs
        self.owner = owner
        self.session = session
        self.capacity = capacity
        self._start = start
        self._claims_waiting = claims_waiting

    def run_once(self) -> None:
        conn = self.session.conn()
        lanes_ = self.capacity.claimable(conn)
        if self._claims_waiting():
            live = self.capacity.live_lanes()
            lanes_ = [lane for lane in lanes_ if lane in live]
        limits = {lane: self.capacity.free(lane) for lane in lanes_}
        if any(n > 0 for n in limits.values()):
            _, runs = ledger.claim_due_runs(conn, self.owner, list(self.jobs), limits)
            self._start(runs)
