"""The lane budgets of one process: which lanes it serves, how many runs of each it may have
in flight (``Capacity``), and how many it has (``InFlight``).

Runs in flight are counted by two threads: the loop thread when it starts a run (a claim, a
takeover, a retry, a backfill pass) and the completer thread when it has recorded the run's
outcome. ``InFlight`` is the one owner of those counts, behind one lock: an unlocked
``count += 1`` on one thread and ``count -= 1`` on the other can lose an update (read, switch,
write), and a count that drifts up leaves the process claiming less and less, one that drifts
down lets it claim past its cap (tests/test_lanes.py: the lost update, forced).

Capacity is read on the loop thread only: a lane's cap (its handler slots; realtime claims
ahead, ``--max-inflight``, by default 2 x its slots; with async handlers, at least the lane's
async bound) minus its runs in flight here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

import psycopg

from runner.model.jobs import JobDef
from runner.worker import lanes
from runner.worker.config import LoopConfig

LANES_REREAD = 30.0  # seconds: serving every lane, the lane list is read again this often


class InFlight:
    """Runs started here and not yet recorded, per lane, behind one lock (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_lane: dict[str, int] = {}
        self._total = 0

    def started(self, lanes_: Iterable[str]) -> int:
        """One run started per lane named (a lane twice: two runs); returns the total."""
        with self._lock:
            for lane in lanes_:
                self._by_lane[lane] = self._by_lane.get(lane, 0) + 1
                self._total += 1
            return self._total

    def ended(self, lanes_: Iterable[str]) -> int:
        """One run ended per lane named; returns the total."""
        with self._lock:
            for lane in lanes_:
                self._by_lane[lane] = self._by_lane.get(lane, 1) - 1
                self._total -= 1
            return self._total

    def of(self, lane: str) -> int:
        with self._lock:
            return self._by_lane.get(lane, 0)

    @property
    def total(self) -> int:
        with self._lock:
            return self._total


class Capacity:
    """The lanes this process serves and each one's free room here (module docstring)."""

    def __init__(self, config: LoopConfig, jobs: dict[str, JobDef]) -> None:
        self.config = config
        self.jobs = jobs
        self.inflight = InFlight()
        self.served = lanes.Served((), {}, True)  # set at start (``resolve``)
        self.live: dict[str, JobDef] = {}  # the jobs whose live slots this process claims
        self._has_async = any(job.is_async for job in jobs.values())
        self._lanes_at = 0.0  # serving every lane: when the lane list was last read

    def resolve(self, conn: psycopg.Connection[Any]) -> None:
        """Which lanes this process serves, and so which jobs' live slots it claims."""
        self.served = lanes.resolve(conn, self.config.lanes, dict(self.config.lane_slots),
                                    self.config.workers, [(j.name, j.lane) for j in self.jobs.values()])
        self.live = {name: job for name, job in self.jobs.items() if self.served.serves(job.lane)}
        self._lanes_at = time.monotonic()

    def claimable(self, conn: psycopg.Connection[Any]) -> list[str]:
        """The lanes this process claims from, by priority; serving every lane, the list is
        read again every LANES_REREAD seconds (a lane added meanwhile is served too)."""
        if self.served.every and time.monotonic() - self._lanes_at > LANES_REREAD:
            self._lanes_at = time.monotonic()
            self.served = lanes.resolve(conn, None, dict(self.config.lane_slots), self.config.workers)
        return list(self.served.lanes)

    def live_lanes(self) -> set[str]:
        return {job.lane for job in self.live.values()}

    def slots(self, lane: str) -> int:
        return self.served.slots.get(lane) or lanes.default_slots(lane, self.served.lanes or (lane,),
                                                                  self.config.workers)

    def cap(self, lane: str) -> int:
        """Runs of a lane in flight on this process at most: its slots; realtime claims ahead
        (--max-inflight, by default 2 x its slots), as the loop always did."""
        if lane == lanes.REALTIME:
            return self.config.max_inflight or 2 * self.slots(lane)
        cap = self.slots(lane)
        if self._has_async:
            # an async handler holds no handler thread of its lane: the lane's async bound
            # (``async_slots``) may be wider than its threads (a catch-up of 300 async
            # partitions runs at once, not one by one)
            cap = max(cap, self.async_slots(lane))
        return cap

    def async_slots(self, lane: str) -> int:
        """How many async handlers of a lane run at once on this process (its event loop's
        semaphore, runner/aio.py): realtime ``--async-workers``; another lane its
        ``--lane-slots`` value when given, else ``--async-workers`` (as before lanes)."""
        wide = self.config.async_workers or self.config.workers
        if lane == lanes.REALTIME:
            return wide
        return dict(self.config.lane_slots).get(lane, wide)

    def free(self, lane: str | None = None) -> int:
        """Free in-flight room of a lane here (None: of the live slots' lanes, the least)."""
        if lane is None:
            live = self.live_lanes() or {lanes.REALTIME}
            return min(self.free(one) for one in live)
        return self.cap(lane) - self.inflight.of(lane)

    def free_by_lane(self, lanes_: Iterable[str]) -> dict[str, int]:
        return {lane: self.free(lane) for lane in lanes_}
