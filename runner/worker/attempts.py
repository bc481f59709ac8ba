"""The attempts one process is executing, and the advisory-lock holds its lock session has
taken for them: one registry behind one lock, written by the loop thread (a start, a timeout,
a reconnect, the shutdown), the handler threads and event loops (a begin, an end) and the
completer (a recorded outcome gives its hold back).

Attempts are keyed by (run id, fence), not by run: one process may run two attempts of a run
(an older one it lost with its lock session, still in its handler, and a newer one it took
over itself). Holds are one entry per hold of the re-entrant session lock. Each attempt's end
releases its own hold, and only its own: a refused (stale) outcome of an older attempt must
never unlock the newer attempt's lock, and a retry this process claims between the older
attempt's outcome commit and its unlock holds the key twice, so both ends unlock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from runner.context import RunContext
from runner.store.ledger import ClaimedRun


@dataclass
class Active:
    """A run this process is executing."""

    run: ClaimedRun
    ctx: RunContext  # a JobContext, or an AsyncJobContext for an async def handler
    deadline: float | None = None  # monotonic; set when the handler begins (job.timeout)
    finishing: bool = False  # the handler returned and its success is being recorded


Key = tuple[int, int]  # (run id, fence)


class Attempts:
    """The attempts running here and the session's holds (module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._active: dict[Key, Active] = {}
        self.holds: set[Key] = set()

    def __bool__(self) -> bool:
        return bool(self._active)

    def add_held(self, entries: Iterable[tuple[ClaimedRun, RunContext]]) -> None:
        """Attempts just started, whose keys the lock session took: each one's hold and
        its entry, under one take of the lock."""
        with self.lock:
            for run, ctx in entries:
                key = (run.id, run.fence)
                self.holds.add(key)
                self._active[key] = Active(run, ctx)

    def begin(self, run: ClaimedRun, deadline: float) -> None:
        """The attempt's handler began: it is given up at ``deadline`` (monotonic)."""
        with self.lock:
            active = self._active.get((run.id, run.fence))
            if active is not None:
                active.deadline = deadline

    def finishing(self, run: ClaimedRun) -> bool:
        """A handler returned and is about to record its success (runner/worker/attempt.py
        ``_given_up``): False if the runner gave up on the attempt first (its timed_out or
        released outcome is recorded instead, and the success is not), else True, and from
        then on the timeout no longer applies to it."""
        with self.lock:
            active = self._active.get((run.id, run.fence))
            if active is None or active.ctx._cancelled:
                return False
            active.finishing = True
            return True

    def end(self, run: ClaimedRun) -> bool:
        """The attempt's handler ended: False when the runner gave up on it meanwhile."""
        with self.lock:
            return self._active.pop((run.id, run.fence), None) is not None

    def overdue(self, now: float) -> list[Active]:
        """The attempts past their deadline, taken out."""
        with self.lock:
            overdue = [a for a in self._active.values()
                       if a.deadline is not None and now >= a.deadline and not a.finishing]
            for a in overdue:
                del self._active[(a.run.id, a.run.fence)]
        return overdue

    def running(self) -> list[Active]:
        with self.lock:
            return list(self._active.values())

    def take_all(self) -> list[Active]:
        with self.lock:
            actives = list(self._active.values())
            self._active.clear()
        return actives

    def nearest_deadline(self) -> float | None:
        with self.lock:
            return min((a.deadline for a in self._active.values() if a.deadline is not None), default=None)

    def keys(self) -> list[Key]:
        with self.lock:
            return [(a.run.id, a.run.fence) for a in self._active.values()]

    def keep(self, kept: set[Key]) -> list[Active]:
        """A new lock session holds ``kept`` (the old one's holds died with it); returns the
        attempts it does not hold: another process owns their runs now."""
        with self.lock:
            lost = [a for a in self._active.values() if (a.run.id, a.run.fence) not in kept]
            self.holds = set(kept)
        return lost

    def held_runs(self) -> list[int]:
        """The runs whose key this session holds: running, and returned but not yet recorded."""
        with self.lock:
            return sorted({run_id for run_id, _ in self.holds})

    def release(self, ended: Iterable[ClaimedRun]) -> list[int]:
        """The holds of these recorded attempts, given back: the runs to unlock (a run twice:
        two holds, two unlocks)."""
        with self.lock:
            ends = {(run.id, run.fence) for run in ended} & self.holds
            self.holds -= ends
            return [run_id for run_id, _ in sorted(ends)]
