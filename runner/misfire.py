"""The misfire duty: what happens to slots that were not started in time.

A slot is *late* when no run was started for it within its job's ``grace`` after its
instant: every runner was down, or stopped, or too busy. The loop never claims a late slot
as if it were on time; it hands the job to ``run_once``, which decides, under the job's row
lock (so concurrent runners decide once), for the slots after the newest slot that already
has a run, up to ``now - grace``:

* ``skip``: each late slot × partition is recorded ``skipped``, with the reason.
* ``coalesce`` (the default): one run, for the newest late slot, whose business window is
  widened to start where the oldest late slot's window started; every other late slot is
  recorded ``coalesced``, pointing (``coalesced_into_slot``) to that slot.
* ``replay``: each late slot runs (trigger ``catch_up``), oldest first and one at a time per
  job and partition, but only the newest ``max_catch_up`` slots that are younger than
  ``max_catch_up_age``; the rest are held as ``awaiting_approval``.
* ``manual``: every late slot is held as ``awaiting_approval`` until an operator approves
  (``runner approve``) or skips (``runner skip``) it.

A replay of a job that declares ``verify=`` is verified like a backfill: its catch-up runs
belong to a plan in runner.backfills (requested by the runner itself, concurrency 1, so one at
a time and oldest first), which the backfill lane executes and, once done, checks with the
job's ``verify`` over the replayed range, recording the outcome on the plan
(``runner backfill show``).

Every decision is a run row with its reason in ``status_reason``. A runner back after days
applies the policy in bounded batches (``batch`` rows per job per pass of the loop), so the
loop neither floods nor stalls. Slots *before* the newest slot that has a run are not
decided here: if any lack a run, the gap scan (``runner.missing_slots``) lists them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from runner.app import JobDef
from runner.events import event
from runner.schedule import idempotency_key
from runner.sqlfiles import queries

log = logging.getLogger("runner.misfire")
Q = queries("misfire")
BQ = queries("backfill")

BATCH = 1000
EPSILON = timedelta(microseconds=1)


@dataclass
class Decisions:
    counts: dict[str, int] = field(default_factory=dict)
    more: bool = False  # late slots remain for the next pass

    @property
    def started(self) -> int:
        return self.counts.get("pending", 0)


@dataclass(frozen=True)
class _Row:
    slot: datetime
    partition: str
    window_start: datetime
    window_end: datetime
    status: str
    reason: str
    coalesced_into: datetime | None = None


def cutoff_for(job: JobDef, now: datetime) -> datetime:
    """Slots at or before this instant are late (if they have no run)."""
    return now - job.grace - EPSILON


def run_once(conn: psycopg.Connection[Any], job: JobDef, now: datetime,
             batch: int = BATCH) -> Decisions:
    """Decide up to ``batch`` late slot × partitions of ``job`` (one transaction)."""
    cutoff = cutoff_for(job, now)
    sched = job.schedule
    result = Decisions()
    with conn.transaction():
        if conn.execute(Q["lock_job"], {"job_name": job.name}).fetchone() is None:
            return result  # not synced yet
        row = conn.execute(Q["latest_decided_slot"], {"job_name": job.name, "cutoff": cutoff}).fetchone()
        latest: datetime | None = row[0] if row else None
        if latest is None:
            return result
        newest = sched.latest_at_or_before(cutoff)
        replayed = _replay_set(job, newest, latest, now) if job.misfire == "replay" else set()
        rows: list[_Row] = []
        slot = sched.next_after(latest)
        while slot <= cutoff and len(rows) < batch:
            rows.extend(_decide(job, slot, newest, replayed, now))
            slot = sched.next_after(slot)
        result.more = slot <= cutoff
        main = [r for r in rows if r.status == "pending" and job.misfire == "coalesce"]
        rest = [r for r in rows if r not in main]
        replays = [r for r in rest if r.status == "pending"]
        group = _replay_plan(conn, job, replays) if replays and job.verify is not None else None
        _record(conn, job, rest, now, result, group)
        if main:
            starts = dict(conn.execute(Q["coalesced_window_starts"],
                                       {"job_name": job.name, "slot": newest}).fetchall())
            main = [_Row(r.slot, r.partition, min(r.window_start, starts.get(r.partition, r.window_start)),
                         r.window_end, r.status, r.reason) for r in main]
            _record(conn, job, main, now, result)
    if result.counts:
        event(log, "misfire_decision", job=job.name, policy=job.misfire,
              **{f"runs_{k}": v for k, v in sorted(result.counts.items())})
    return result


def _replay_set(job: JobDef, newest: datetime, latest: datetime, now: datetime) -> set[datetime]:
    chosen: set[datetime] = set()
    slot = newest
    while slot > latest and len(chosen) < job.max_catch_up:
        if job.max_catch_up_age is not None and now - slot > job.max_catch_up_age:
            break
        chosen.add(slot)
        slot = job.schedule.prev_before(slot)
    return chosen


def _decide(job: JobDef, slot: datetime, newest: datetime, replayed: set[datetime],
            now: datetime) -> list[_Row]:
    try:
        partitions = job.partitions_for(slot)
    except Exception as exc:
        log.error("job %r: partitions for late slot %s raised %s; the gap scan shows it",
                  job.name, slot.isoformat(), type(exc).__name__)
        return []
    start, end = job.window_for(slot)
    late = _human(now - slot)
    policy = job.misfire
    status: str
    into = None
    if policy == "skip":
        status, reason = "skipped", f"misfire=skip: not started within grace {job.grace}, late by {late}"
    elif policy == "manual":
        status, reason = "awaiting_approval", f"misfire=manual: late by {late}; held for approval"
    elif policy == "coalesce":
        if slot == newest:
            status, reason = "pending", f"misfire=coalesce: late by {late}; covers the late slots before it"
        else:
            status, into = "coalesced", newest
            reason = f"misfire=coalesce: late by {late}; covered by the run of slot {newest.isoformat()}"
    elif slot in replayed:
        status, reason = "pending", f"misfire=replay: late by {late}; replayed"
    else:
        status = "awaiting_approval"
        beyond = (f"older than max_catch_up_age {job.max_catch_up_age}"
                  if job.max_catch_up_age is not None and now - slot > job.max_catch_up_age
                  else f"beyond max_catch_up={job.max_catch_up}")
        reason = f"misfire=replay: late by {late}, {beyond}; held for approval"
    return [_Row(slot, p, start, end, status, reason, into) for p in partitions]


def _replay_plan(conn: psycopg.Connection[Any], job: JobDef, replays: list[_Row]) -> Any:
    """A plan for the replayed runs of a job with ``verify``; returns its replay group id."""
    slots = sorted({r.slot for r in replays})
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(BQ["insert_plan"], {
            "job_name": job.name, "range_from": slots[0], "range_to": slots[-1] + EPSILON,
            "partitions": None, "lane": "catch_up", "concurrency": 1, "rate": None,
            "max_failures": None, "pause_when": None, "force": False, "expected_runs": len(replays),
            "requested_by": "runner (misfire=replay)",
            "reason": f"verify the {len(slots)} slot(s) replayed after a misfire", "now": None,
        }).fetchone()
    assert row is not None
    return row["replay_group_id"]


def _record(conn: psycopg.Connection[Any], job: JobDef, rows: list[_Row], now: datetime,
            result: Decisions, replay_group: Any = None) -> None:
    if not rows:
        return
    params = {
        "now": None,
        "replay_group_id": replay_group,
        "job_names": [job.name] * len(rows),
        "slots": [r.slot for r in rows],
        "partition_keys": [r.partition for r in rows],
        "business_dates": [job.schedule.business_date(r.window_start) for r in rows],
        "window_starts": [r.window_start for r in rows],
        "window_ends": [r.window_end for r in rows],
        "idempotency_keys": [idempotency_key(job.name, r.window_start, r.window_end, r.partition,
                                             job.version) for r in rows],
        "statuses": [r.status for r in rows],
        "reasons": [r.reason for r in rows],
        "coalesced_into": [r.coalesced_into for r in rows],
    }
    for status, count in conn.execute(Q["record_decisions"], params).fetchall():
        result.counts[status] = result.counts.get(status, 0) + count


def _human(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{delta.total_seconds():.1f}s"
    if seconds < 7200:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
