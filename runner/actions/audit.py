"""The ledger audit behind ``runner check``: every invariant violation, with the rows involved.

The invariants are SQL (``runner.check_v1``, sql/functions/check_v1.sql, whose header
defines each one; ``runner.violations`` is its call at now()), so an operator with nothing
but ``psql`` gets the same answer, with no runner alive. This module only calls it and
confirms the one invariant whose evidence is not in the statement's snapshot:
``orphaned_running`` reads ``pg_locks`` live, so an attempt that finished (and released its
lock) while the audit ran could look orphaned; such rows are kept only if a second look, in a
new statement, still finds the attempt running with nobody holding its lock.

The tests (``tests.support.assert_ledger_clean``) and the fault suite call ``violations``
after every scenario: a correct ledger reports nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg

from runner.sqlfiles import queries
from runner.store import ledger

Q = queries("audit")

# the invariants, in the order of the README's list (one line each; sql/functions/check_v1.sql
# defines them exactly)
INVARIANTS: dict[str, str] = {
    "two_successes": "a run with two succeeded attempts and no operator re-queue between them",
    "stale_success": "a run's recorded success and its status disagree (fence, attempt, status)",
    "coalesced_into_nothing": "a coalesced run whose target slot has no live run of its job and partition",
    "attempts_beyond_max": "counted attempts beyond max_attempts (beyond the one recovery of a lost owner)",
    "unlisted_gap": "an expected slot x partition, or a run not accounted for, not in runner.missing_slots",
    "running_without_attempt": "a running run whose attempt at its fence is missing or closed",
    "attempt_without_run_running": "a running attempt whose run is not running at its fence",
    "orphaned_running": "a running attempt whose lock nobody holds, and no takeover after stale_after",
    "skipped_without_reason": "a skipped, coalesced or cancelled run without status_reason",
    "fence_behind": "a run whose fence is lower than one of its attempts' fences",
    "stranded_run": "a pending or failed run no claim will ever start (no next_attempt_at, no live plan)",
    "effect_key_twice": "a confirmed effect key recorded again after its run was pruned (runner.effect_keys)",
    "history_unexplained": "a schedule history row no runner sync, re-assertion or definition explains",
    "started_before_slot": "an attempt that started before its run's slot instant",
    "plan_completed_not_done": "a backfill plan completed while a run of its range was not done",
    "cover_not_covered": "a coalesced run whose cover is dead or awaiting approval, not in missing_slots",
    "checkpoint_not_owned": "a run's committed checkpoint written by a fence that did not own the run then",
}

COLUMNS = ["invariant", "job_name", "schedule_slot", "partition_key", "run_id", "attempt_id", "detail"]


def violations(conn: psycopg.Connection[Any], since: datetime | None = None,
               as_of: datetime | None = None, stale_after: float = 2.0) -> list[dict[str, Any]]:
    """The ledger's invariant violations (``runner.check_v1``), oldest slot first within each
    invariant. ``conn`` should be in autocommit mode, so the confirmation of orphaned attempts
    sees a fresh snapshot."""
    found = ledger.dict_rows(conn, Q["check"], {"as_of": as_of, "since": since,
                                                "stale_after": stale_after})
    orphaned = [r["attempt_id"] for r in found if r["invariant"] == "orphaned_running"]
    if orphaned:
        still = {r["id"] for r in ledger.dict_rows(conn, Q["still_orphaned"],
                                                   {"attempt_ids": orphaned})}
        found = [r for r in found if r["invariant"] != "orphaned_running" or r["attempt_id"] in still]
    for row in found:
        if isinstance(row["schedule_slot"], datetime):
            row["schedule_slot"] = row["schedule_slot"].astimezone(UTC)
    return found


def describe(rows: list[dict[str, Any]], limit: int = 20) -> str:
    """The violations as short text lines (for assertion messages and logs)."""
    lines = [f"{r['invariant']}: job {r['job_name']!r} slot "
             f"{r['schedule_slot'].isoformat() if r['schedule_slot'] else None} partition "
             f"{r['partition_key']!r} run {r['run_id']} attempt {r['attempt_id']} {r['detail']}"
             for r in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"... and {len(rows) - limit} more")
    return "\n".join(lines)
