"""Bulk recovery (issue 30, point 6): rerun every failed or dead run of a job in a range of
slots (one partition, or all), or of one backfill plan, in ONE audited request.

``plan`` reads the runs (at most MAX_RUNS: beyond, the operator narrows the range); the
operator is shown them (the CLI's listing, the console's impact page) and ``rerun`` passes
each run's id, status and fence as shown to ``runner.rerun_runs_v1``, which refuses the whole
request if any of them changed in between (a run that succeeded, started or was rerun by
someone else is never queued again on the strength of an older look), and otherwise queues
them all (trigger manual, lane correction, due now, a full budget of attempts each) and
writes one ``runner.requests`` row (action ``rerun_many``) listing every run before and
after, in one transaction. The selection (job, range, partition, statuses, plan) is kept in
that row too.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from runner.actions.operate import OperatorError, as_json, call_action, checked_text, default_who, get_request
from runner.sqlfiles import queries
from runner.store import ledger

Q = queries("bulk")

MAX_RUNS = 5000  # runs of one request (runner.rerun_runs_v1 refuses more)
STATUSES = ("failed", "dead")


@dataclass(frozen=True)
class BulkPlan:
    job_name: str
    selection: dict[str, Any]  # what was asked: range, partition, statuses, plan
    runs: list[dict[str, Any]]  # oldest slot first
    refusal: str | None

    def by_status(self) -> dict[str, int]:
        return dict(Counter(r["status"] for r in self.runs))

    def starts(self) -> str:
        """Where the runs' next attempts start (issue 33), as the impact shown first says it:
        a bulk rerun takes only runs that never succeeded, and each continues from its last
        checkpoint, as its own retry would (``runner rerun RUN`` without ``--resume`` starts
        one from scratch)."""
        with_checkpoint = sum(1 for r in self.runs if r.get("checkpoint_at") is not None)
        if not with_checkpoint:
            return "none of them has a checkpoint: each starts from scratch"
        return (f"{with_checkpoint} of them have a checkpoint: each continues from its last one, as "
                "its own retry would (`runner rerun RUN` without --resume starts one from scratch)")

    def describe(self) -> str:
        s = self.selection
        parts = [f"job {self.job_name!r}"]
        if s.get("plan_id") is not None:
            parts.append(f"backfill {s['plan_id']}")
        if s.get("from") or s.get("to"):
            parts.append(f"slots [{s.get('from') or '…'}, {s.get('to') or '…'})")
        if s.get("partition") is not None:
            parts.append(f"partition {s['partition']!r}")
        parts.append(" or ".join(s["statuses"]))
        return ", ".join(parts)


def plan(conn: psycopg.Connection[Any], job_name: str | None, range_from: datetime | None,
         range_to: datetime | None, partition: str | None, statuses: tuple[str, ...],
         plan_id: int | None) -> BulkPlan:
    """The runs a bulk rerun would queue. OperatorError (one line) for a bad selection."""
    statuses = tuple(dict.fromkeys(statuses or ("dead",)))
    bad = [s for s in statuses if s not in STATUSES]
    if bad:
        raise OperatorError(f"statuses must be failed and/or dead, got {bad[0]!r}")
    if range_from is not None and range_to is not None and not range_from < range_to:
        raise OperatorError("from must be before to")
    group = None
    if plan_id is not None:
        found = ledger.dict_rows(conn, Q["plan_of"], {"plan_id": plan_id})
        if not found:
            raise OperatorError(f"no backfill {plan_id} (see `runner backfill list`)")
        if job_name is not None and job_name != found[0]["job_name"]:
            raise OperatorError(f"backfill {plan_id} is of job {found[0]['job_name']!r}, not {job_name!r}")
        job_name, group = found[0]["job_name"], found[0]["replay_group_id"]
    if job_name is None:
        raise OperatorError("job (or a backfill's plan_id) is required")
    if not ledger.dict_rows(conn, Q["job_exists"], {"job_name": job_name}):
        raise OperatorError(f"no job {job_name!r} in the ledger")
    if plan_id is None and range_from is None and range_to is None:
        raise OperatorError("give a range of slots (from and/or to), or a backfill's plan_id")
    runs = ledger.dict_rows(conn, Q["candidates"], {
        "job_name": job_name, "statuses": list(statuses), "from": range_from, "to": range_to,
        "partition": partition, "replay_group_id": group, "limit": MAX_RUNS + 1})
    selection = {"job": job_name, "from": range_from.isoformat() if range_from else None,
                 "to": range_to.isoformat() if range_to else None, "partition": partition,
                 "statuses": list(statuses), "plan_id": plan_id}
    refusal = None
    if not runs:
        refusal = "no " + " or ".join(statuses) + " run in that selection; nothing to do"
    elif len(runs) > MAX_RUNS:
        refusal = f"more than {MAX_RUNS} runs in that selection: narrow the range"
        runs = runs[:MAX_RUNS]
    return BulkPlan(job_name=job_name, selection=selection, runs=runs, refusal=refusal)


def rerun(conn: psycopg.Connection[Any], planned: BulkPlan, reason: str, who: str | None = None,
          now: datetime | None = None) -> dict[str, Any]:
    """Queue the planned runs, as they were shown, for a new attempt each: one request row,
    one transaction. Returns {"request": ..., "runs": [...]}."""
    if planned.refusal:
        raise OperatorError(planned.refusal)
    reason = checked_text(reason, "--reason")
    who = checked_text(who or default_who(), "--by")
    with conn.transaction():
        rows = call_action(conn, Q["rerun_runs"], {
            "job_name": planned.job_name, "run_ids": [r["id"] for r in planned.runs],
            "seen_statuses": [r["status"] for r in planned.runs],
            "seen_fences": [r["fence"] for r in planned.runs],
            "selection": as_json(planned.selection), "who": who, "reason": reason, "now": now})
        request = get_request(conn, rows[0]["request_id"])
    for row in rows:
        row.pop("request_id", None)
    return {"request": request, "runs": rows}
