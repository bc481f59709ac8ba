"""The gap-scan duty: keep ``runner.missing_slots`` cheap.

The view expands each job's expected slots only above its watermark, below which every
expected slot is known to have a run row (sql/functions/advance_watermarks_v2.sql). A
runner moves the watermarks forward every ``interval`` seconds in a thread of its own, on a
connection of its own, so an advance never holds up the loop. Several runners may do it at
once: the function skips watermark rows another holds.

Bounded passes (revision 0020_bounded). One call expands about ``budget`` slot x partition
probes in all (each job an even share, turned into a span by the job's own density, at least
one slot) and says how many jobs are still behind; a pass calls it again, each call its own
transaction (the connection is in autocommit), until none is behind, and then makes one more
that also forgets the holes that have since got a run (a probe per hole, so once a pass and
not on every step). So the first pass over a
ledger a year old is many short statements, not one of minutes whose snapshot would keep
every vacuum of the database from removing dead rows meanwhile. The budget adapts to what a
call costs on this ledger and server: grown (by ``target`` / the call's time, at most
doubled) while calls take less than ``target`` and jobs are still behind, halved when one
takes more than ``CEILING`` x ``target``, kept in between (within ``MIN_BUDGET`` and
``max_budget``, at most ``MAX_BUDGET``). The function gives the budget first to the jobs that
need least and lets the rest share what is left (revision 0022_probes), so a pass is about as
many calls as the history has budgets, whatever the mix of dense and sparse jobs.
A pass ends early when the runner stops; what it did so far is kept (any watermark is
correct: the view expands from wherever it stands).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg

from runner.sqlfiles import queries

log = logging.getLogger("runner.gapscan")
Q = queries("gaps")

FIRST_BUDGET = 50_000  # slot x partition probes of one call (about 0.15 s on a quiet two-core machine)
MIN_BUDGET = 1_000
MAX_BUDGET = 10_000_000
# What one call should cost: the budget grows while calls take less than TARGET_SECONDS and
# shrinks when one takes more than CEILING x that, and stays between the two. Not one target
# of a second (before issue 32): calls scattered around it, up to 1.4 s on a 30M ledger, and
# no statement of the runner's should reach a second. A band, not one point, because a call
# has a fixed part that no budget shrinks (every job's watermark row, schedules, tracked
# spans and cron fields: 0.15 s for 1,000 jobs on a quiet machine, 0.4-0.5 s under a load of
# 7 on two cores, measured on a 10M ledger): a single target under that fixed part halved the
# budget down to MIN_BUDGET and the catch-up crawled (10M runs: 1.7 % a minute).
TARGET_SECONDS = 0.25
CEILING = 3.0


def run_once(conn: psycopg.Connection[Any], budget: int | None = None, *,
             tidy: bool = True) -> tuple[int, int]:
    """One call of the advance: (jobs moved, jobs still behind). ``budget`` None: no cap.
    ``tidy``: also forget the holes under the watermarks that have since got a run (a probe
    per hole: the pass does it once, in its last call)."""
    row = conn.execute(Q["advance_watermarks_bounded"], {"max_probes": budget, "tidy": tidy}).fetchone()
    if not row:
        return 0, 0
    return int(row[0] or 0), int(row[1] or 0)


class Advancer:
    """The duty's pass beside the loop (``duties.on_own_connection``, every
    ``watermark_interval``): bounded calls until no job is behind, or ``stop`` is set. A
    failure is retried next time (the view stays correct without it, only slower). It keeps
    the budget it learned from one pass to the next. ``target``: seconds a call should take
    (``LoopConfig.watermark_target``); ``max_budget``: the most probes any call may take
    (``LoopConfig.watermark_max_probes``), a hard cap under the adaptive budget."""

    def __init__(self, stop: threading.Event | None = None, *, budget: int = FIRST_BUDGET,
                 target: float = TARGET_SECONDS, max_budget: int = MAX_BUDGET) -> None:
        if max_budget < 1:
            raise ValueError("the gap-scan duty's max_budget must be >= 1")
        self.stop = stop if stop is not None else threading.Event()
        self.max_budget = max_budget
        self.budget = min(budget, max_budget)
        self.target = target
        self.calls = 0  # in all passes (tests, logs)
        self.took: list[float] = []  # seconds of each call of the last pass (benchmarks, logs)
        self._halved: tuple[int, float] | None = None  # (budget, time) of the call before a halving
        self._fixed = False  # halving did not help in this pass: calls are their fixed part

    def __call__(self, conn: psycopg.Connection[Any]) -> None:
        moved_total = 0
        self.took = []
        self._halved, self._fixed = None, False
        while True:
            started = time.monotonic()
            moved, behind = run_once(conn, self.budget, tidy=False)
            took = time.monotonic() - started
            self.took.append(took)
            self.calls += 1
            moved_total += moved
            self.adapt(took, behind)
            if self.stop.is_set():
                break
            if not behind:
                # caught up: one more step (seconds of slots) that also forgets filled holes
                started = time.monotonic()
                moved, _ = run_once(conn, self.budget, tidy=True)
                self.took.append(time.monotonic() - started)
                self.calls += 1
                moved_total += moved
                break
            log.debug("gap-scan watermarks: %d job(s) still behind (%.2f s, next budget %d)",
                      behind, took, self.budget)
        log.debug("gap-scan watermarks advanced for %d job(s) in %d call(s), the longest %.2f s",
                  moved_total, len(self.took), max(self.took))

    def adapt(self, took: float, behind: int) -> None:
        """The budget of the next call, from what this one cost: over CEILING x target,
        halved, unless the last halving made the call less than a quarter faster (then the
        budget goes back and stays for the pass: a call's fixed part does not shrink, and
        halving for it took the 10M catch-up down to MIN_BUDGET); under the target and while
        jobs are behind, scaled by target / took, at most doubled; in between, kept.
        (Revision 0022's round had a band of a quarter of the target to the target, with a
        one-second target: calls of 0.4 s on a 30M ledger never grew and the catch-up
        outlasted one uncapped call; here the band is above the target, where calls are
        already as long as they should be.)"""
        if took > CEILING * self.target:
            if self._halved is not None and took > 0.75 * self._halved[1]:
                # half the budget, not a quarter faster: the time is the call's fixed part
                # (under load, 0.5-0.9 s for 1,000 jobs at any budget), so go back, and halve
                # no more in this pass: smaller calls would only make the catch-up crawl
                self.budget, self._halved, self._fixed = self._halved[0], None, True
            elif not self._fixed:
                self._halved = (self.budget, took)
                self.budget = min(self.max_budget, max(MIN_BUDGET, self.budget // 2))
            return
        self._halved = None
        if behind and took < self.target:
            self._fixed = False
            scale = min(2.0, self.target / took) if took > 0 else 2.0
            self.budget = min(self.max_budget, max(self.budget + 1, int(self.budget * scale)))
