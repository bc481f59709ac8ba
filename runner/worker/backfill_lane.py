"""The backfill lane duty of one process: passes over the backfill plans (runner/actions/backfill.py),
below realtime.

After this tick's slots, takeovers and retries; with the free room of the lanes this process
claims from, and none while due slots still wait to be claimed. Every poll interval, and on
the tick after one of the lane's runs finished or a pass claimed some (so a plan keeps its
concurrency busy); the pass also pauses and completes plans. It yields to a slot due within
LANE_YIELD, so that its statements do not hold up that slot's claim (for one poll interval at
most: many jobs of different periods may leave no quiet moment).

The runs a pass started are written down here and crossed out by the completer thread when
recorded (``ended``): that set and the "due" flag have one lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from runner.actions import backfill
from runner.model.jobs import JobDef
from runner.store.ledger import ClaimedRun, Owner
from runner.worker.budget import Capacity
from runner.worker.config import LoopConfig
from runner.worker.session import LockSession

LANE_YIELD = 0.05  # seconds before a slot during which the backfill lane does not start a pass


class BackfillLane:
    """The ``lane`` duty (module docstring). ``claims_waiting`` says whether live claims wait
    in this process; ``slot_within(seconds)`` whether a live slot is due that soon."""

    name = "lane"
    every: float | None = None  # its own cadence: see run_once

    def __init__(self, config: LoopConfig, jobs: dict[str, JobDef], owner: Owner, session: LockSession,
                 capacity: Capacity, start: Callable[[list[ClaimedRun]], None],
                 claims_waiting: Callable[[], bool], slot_within: Callable[[float], bool]) -> None:
        if config.poll_interval <= 0:
            raise ValueError("poll_interval must be > 0")
        self.config = config
        self.jobs = jobs
        self.owner = owner
        self.session = session
        self.capacity = capacity
        self._start = start
        self._claims_waiting = claims_waiting
        self._slot_within = slot_within
        self._next = 0.0  # monotonic: the next pass by the poll interval
        self._lock = threading.Lock()  # the loop thread and the completer
        self._due = False  # a lane run ended, or a pass claimed some: pass again on the next tick
        self._runs: set[int] = set()  # runs a pass started, still running

    def ended(self, runs: list[ClaimedRun]) -> None:
        """Recorded runs (the completer thread): a lane run among them makes a pass due."""
        with self._lock:
            if self._runs:
                for run in runs:
                    if run.id in self._runs:
                        self._runs.discard(run.id)
                        self._due = True

    def run_once(self) -> None:
        mono = time.monotonic()
        conn = self.session.conn()
        free = {} if self._claims_waiting() else {lane: self.capacity.free(lane)
                                                 for lane in self.capacity.claimable(conn)}
        limit = sum(max(n, 0) for n in free.values())
        by_poll = mono >= self._next
        overdue = mono >= self._next + self.config.poll_interval
        with self._lock:
            due = self._due
        if (by_poll or (due and limit > 0)) and (overdue or not self._slot_within(LANE_YIELD)):
            with self._lock:
                self._due = False
            self._next = mono + self.config.poll_interval
            started = backfill.run_once(conn, self.owner, self.jobs, free)
            with self._lock:
                self._runs.update(r.id for r in started)
                if started or limit == 0:  # more may be claimable (never reset here: a lane run
                    self._due = True  # that finished meanwhile set it)
            self._start(started)
