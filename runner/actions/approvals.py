"""Approvals: an operator decides the runs held as ``awaiting_approval`` (misfire="manual",
or misfire="replay" beyond its caps, or a misfire tier that approves: runner/model/tiers.py), on the
named SQL of ``sql/queries/approvals.sql``.

Same shape as every operator action (runner/actions/operate.py): ``plan`` reads the held runs of the
selection (one slot, a range ``[from, to)``, or all of the job's; optionally one partition),
the operator sees them and confirms, then ``decide`` changes them with one
``runner.requests`` row listing every run it touched, before and after, in one call of
``runner.decide_runs_v1`` (sql/functions/decide_runs_v1.sql: it checks each run is still
awaiting approval, under its row lock). A run that stopped awaiting approval in between is
left alone (and reported).

* approve: the run becomes ``pending`` (trigger ``manual``, due now) with a full budget of
  attempts; the loop of any live runner starts it like every queued run.
* skip: the run becomes ``skipped`` with the operator's reason; it is final, and accounts for
  its slot in the gap scan.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from runner.actions import operate
from runner.actions.operate import OperatorError, default_who
from runner.sqlfiles import queries
from runner.store import ledger

Q = queries("approvals")

ACTIONS = ("approve", "skip")
MAX_RUNS = 100_000  # runs one decision may touch


@dataclass(frozen=True)
class ApprovalPlan:
    action: str  # approve | skip
    job_name: str
    selection: dict[str, Any]  # slot, range_from, range_to, partition_key (None: any)
    runs: list[dict[str, Any]]  # the held runs it would decide

    def describe(self) -> str:
        sel = self.selection
        parts = []
        if sel["slot"] is not None:
            parts.append(f"slot {sel['slot'].isoformat()}")
        if sel["range_from"] is not None:
            parts.append(f"slots in [{sel['range_from'].isoformat()}, {sel['range_to'].isoformat()})")
        if sel["partition_key"] is not None:
            parts.append(f"partition {sel['partition_key']!r}")
        return f"job {self.job_name!r}" + (f", {', '.join(parts)}" if parts else "")


def plan(conn: psycopg.Connection[Any], action: str, job_name: str, slot: datetime | None = None,
         range_from: datetime | None = None, range_to: datetime | None = None,
         partition_key: str | None = None) -> ApprovalPlan:
    """The held runs an approve or skip would decide."""
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {ACTIONS}")
    if slot is not None and (range_from is not None or range_to is not None):
        raise OperatorError("give --slot or --from/--to, not both")
    if (range_from is None) != (range_to is None):
        raise OperatorError("--from and --to go together")
    if range_from is not None and range_to is not None and range_from >= range_to:
        raise OperatorError("--from must be before --to")
    selection = {"slot": slot, "range_from": range_from, "range_to": range_to,
                 "partition_key": partition_key}
    runs = ledger.dict_rows(conn, Q["awaiting_runs"], {
        "job_name": job_name, **selection, "limit": MAX_RUNS + 1})
    result = ApprovalPlan(action=action, job_name=job_name, selection=selection, runs=runs)
    if not runs:
        raise OperatorError(f"no run awaiting approval for {result.describe()}; nothing to {action}")
    if len(runs) > MAX_RUNS:
        raise OperatorError(f"more than {MAX_RUNS} runs awaiting approval for {result.describe()}: "
                            "narrow the selection with --from/--to")
    return result


def decide(conn: psycopg.Connection[Any], planned: ApprovalPlan, reason: str, who: str | None = None,
           now: datetime | None = None) -> dict[str, Any]:
    """Approve or skip the planned runs, with one request row, in one transaction. Returns
    {"request": ..., "runs": [changed runs with their state before], "left_alone": [ids]}."""
    reason = operate.checked_text(reason, "--reason")
    who = operate.checked_text(who or default_who(), "--by")
    ids = [r["id"] for r in planned.runs]
    selection = {k: (v.isoformat() if isinstance(v, datetime) else v)
                 for k, v in planned.selection.items()}
    with conn.transaction():
        changed = operate.call_action(conn, Q["decide_runs"], {
            "action": planned.action, "job_name": planned.job_name, "run_ids": ids,
            "selection": operate.as_json(selection), "who": who, "reason": reason, "now": now})
        request = operate.get_request(conn, changed[0].pop("request_id"))
        for row in changed[1:]:
            row.pop("request_id")
    done = {r["id"] for r in changed}
    return {"request": request, "runs": changed, "left_alone": [i for i in ids if i not in done]}
