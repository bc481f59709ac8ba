"""The takeover duty of one process: runs whose owner is gone (a dead or hung runner, its lock
session ended) are taken over here (runner/worker/orphans.py), every poll interval.

Only the orphans of the served lanes, each lane within its free in-flight room here (its cap
minus its runs in flight): a takeover counts toward the lane's cap like a claim, so a bulk
process with one free slot takes over one bulk run, and a process serving only realtime never
takes a bulk run. It runs before the retries duty, so recovery takes capacity first.

Ending hung owners' sessions (``end_hung``) is not part of the loop's duty: it runs beside the
loop on a connection of its own (runner/worker/loop.py), so that its read of the server's lock
table never holds up a claim.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from runner.model.jobs import JobDef
from runner.store.ledger import ClaimedRun, Owner
from runner.worker import orphans as takeover
from runner.worker.budget import Capacity
from runner.worker.config import LoopConfig
from runner.worker.metrics import Metrics
from runner.worker.session import LockSession

DEFAULT_LEASE = 60.0  # seconds: the lease of a run whose job this process does not define


class Takeover:
    """The ``takeover`` duty (module docstring)."""

    name = "takeover"

    def __init__(self, config: LoopConfig, jobs: dict[str, JobDef], owner: Owner, session: LockSession,
                 capacity: Capacity, start: Callable[[list[ClaimedRun]], None], metrics: Metrics,
                 stats: dict[str, int]) -> None:
        if config.poll_interval <= 0:
            raise ValueError("poll_interval must be > 0")
        self.every: float | None = config.poll_interval
        self.jobs = jobs
        self.owner = owner
        self.session = session
        self.capacity = capacity
        self._start = start
        self.metrics = metrics
        self.stats = stats

    def run_once(self) -> None:
        conn = self.session.conn()
        free = {lane: max(self.capacity.free(lane), 0) for lane in self.capacity.claimable(conn)}
        result = takeover.run_once(conn, self.owner, list(self.jobs), free)
        self.stats["recovered"] += len(result.taken)
        for r in result.taken:
            self.metrics.of(self.metrics.takeovers, r.job_name).inc()
        self._start(result.taken)

    def end_hung(self, conn: psycopg.Connection[Any]) -> None:
        """Squatters reported and hung owners' sessions ended, on ``conn``, a connection of
        its own (never the lock session, whose backend is never judged here)."""
        takeover.end_hung(conn, self.owner, list(self.jobs), self.session.backend_pid(),
                          default_lease=DEFAULT_LEASE)
