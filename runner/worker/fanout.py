"""A slot's fan-out: the one place that turns a job's slot into the partitions it expects,
each with its business window, and records what the user's callables said.

Both the loop (on-time slots) and the misfire duty (late slots) call ``plan_slot``. It runs
every user callable a slot needs (``partitions``, ``window``) behind one error boundary: a
callable that raises, returns an unusable value or more than ``max_partitions`` keys fails
*that slot*, never the loop. The failure is recorded in runner.slot_fanouts with its error
(the gap scan shows the slot as ``fanout_failed`` and runner.alerts raises it), logged once
with control characters escaped, and the slot gets no run.

A job with dynamic partitions (a callable) expects whatever the callable returned the first
time the slot was fanned out: that set is recorded in runner.slot_fanouts *before* any of the
slot's runs is claimed, and every later fan-out of the slot (another runner, the misfire
duty, a restart) works from the recorded set. So a shutdown between claims, a row that
cannot be stored, or a partition that waits past grace leaves a hole the gap scan and the
misfire duty both see. Static partitions need no record: the schedule history has them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import psycopg

from runner.errors import error_text
from runner.model.jobs import JobDef
from runner.store import ledger

log = logging.getLogger("runner.fanout")

MAX_PARTITIONS = 100_000  # per slot; a callable returning more fails the slot (recorded)


@dataclass(frozen=True)
class SlotPlan:
    """What one slot of a job expects: its partitions, window and business date, or the
    error that kept them from being computed (then ``partitions`` is empty)."""

    job_name: str
    slot: datetime
    partitions: list[str]
    window_start: datetime | None = None
    window_end: datetime | None = None
    business_date: date | None = None
    error: str | None = None


def plan_slot(conn: psycopg.Connection[Any], job: JobDef, slot: datetime,
              max_partitions: int = MAX_PARTITIONS) -> SlotPlan:
    """The slot's plan; records the fan-out of a dynamic job (first recorded wins) and any
    failure. ``conn`` is in autocommit or inside the caller's transaction."""
    recorded = ledger.fanout_of(conn, job.name, slot) if job.dynamic_partitions else None
    if recorded is not None and recorded[1] is not None:
        return SlotPlan(job.name, slot, [], error=recorded[1])
    try:
        if recorded is not None:
            keys = recorded[0]
        else:
            keys = list(dict.fromkeys(job.partitions_for(slot)))  # each partition once
            if len(keys) > max_partitions:
                raise ValueError(f"the partitions callable returned {len(keys)} keys, more than "
                                 f"the cap of {max_partitions} per slot")
        start, end = job.window_for(slot)
        business_date = job.schedule.business_date(start)
    except Exception as exc:
        cls, msg = error_text(exc)
        failed = f"{cls}: {msg}"
        log.error("job %r: fanning out slot %s failed (%s); the slot gets no run and the gap "
                  "scan shows it as fanout_failed", job.name, slot.isoformat(), failed[:300])
        with conn.transaction():
            ledger.record_fanout(conn, job.name, slot, [], failed)
        return SlotPlan(job.name, slot, [], error=failed)
    if job.dynamic_partitions and recorded is None:
        error: str | None
        try:
            with conn.transaction():  # a savepoint inside the caller's transaction
                keys, error = ledger.record_fanout(conn, job.name, slot, keys)
        except psycopg.DataError as exc:  # a key PostgreSQL cannot store (e.g. a NUL byte)
            cls, msg = error_text(exc)
            error = f"the partitions cannot be recorded ({cls}: {msg})"
            log.error("job %r: slot %s: %s; the slot gets no run and the gap scan shows it as "
                      "fanout_failed", job.name, slot.isoformat(), error[:300])
            ledger.record_fanout(conn, job.name, slot, [], error)
        if error is not None:
            return SlotPlan(job.name, slot, [], error=error)
    return SlotPlan(job.name, slot, keys, start, end, business_date)
