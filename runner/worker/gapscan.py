"""The gap-scan duty: keep ``runner.missing_slots`` cheap.

The view expands each job's expected slots only above its watermark, below which every
expected slot is known to have a run row (sql/functions/advance_watermarks_v3.sql; the
runners call runner.advance_watermarks_v3). A
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
call costs on this ledger and server: scaled by ``target`` / the call's time, at most halved
or doubled at a time (within ``MIN_BUDGET`` and ``max_budget``, at most ``MAX_BUDGET``), and
grown only while jobs are still behind. The function gives the budget first to the jobs that
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

FIRST_BUDGET = 100_000  # slot x partition probes of one call (about 0.3 s on a quiet two-core machine)
MIN_BUDGET = 1_000
MAX_BUDGET = 10_000_000
# What one call should cost, about (LoopConfig.watermark_target). Issue 32 asked for calls
# well under a second; a quarter of a second was tried with runner.advance_watermarks_v2 and
# measured worse (docs/benchmarks-archive.md, 2026-12-03): every call rewrote the watermark
# row of every job it moved (528,000 dead row versions after a 10M catch-up of 392 calls, read
# by every call) and parsed each cron job's fields twice and more. v3 writes a caught-up
# job's row only when it moves a step and parses each cron once a call: on a 1M ledger a
# 0.25-s target then caught up in 23-27 calls and 6.1-6.9 s (longest 0.54-0.67 s), against 7-10
# calls and 4.2-8.0 s (longest 0.97-1.72 s) at 1 s (2026-12-04, two sittings). The default
# stays 1 s until the same is measured at 10M.
TARGET_SECONDS = 1.0


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

    def __call__(self, conn: psycopg.Connection[Any]) -> None:
        moved_total = 0
        self.took = []
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
        """The budget of the next call, from what this one cost: scaled by target / took, at
        most halved or doubled at a time, and grown only while jobs are behind, never above
        ``max_budget``. (Revision 0022's round: halving above the target and doubling only
        under a quarter of it left calls between the two at their budget for good: 0.4-s
        calls on a 30M ledger whose catch-up then outlasted one uncapped call.)"""
        if took > self.target:
            scale = max(0.5, self.target / took)
            self.budget = min(self.max_budget, max(MIN_BUDGET, int(self.budget * scale)))
        elif behind:
            scale = min(2.0, self.target / took) if took > 0 else 2.0
            self.budget = min(self.max_budget, max(self.budget + 1, int(self.budget * scale)))
