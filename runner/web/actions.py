"""The operator's actions from the console: each shows its impact first, then acts, on the
CLI's own code. ``impact`` calls the same plan function the CLI shows before it asks
(``operate.plan_rerun``, ``operate.plan_pause``, ``approvals.plan``, ``backfill.plan``,
``backfill.show``); ``perform`` calls the same action function the CLI calls after the
operator confirmed (``operate.rerun``, ``operate.set_paused``, ``approvals.decide``,
``backfill.create``/``pause``/``resume``/``cancel``), so the same database function writes
the change and the same ``runner.requests`` row, with ``who`` the authenticated user
(``web:<name>``) and the reason the form or the JSON body gave.

Parameters come as a flat mapping of strings (a form) or JSON values (the API); both are
checked here, and bad input is an ``OperatorError`` with one line, before anything is written.
The pause condition of a backfill (``--pause-when``, SQL) is not offered here: the CLI only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import psycopg

from runner import approvals, backfill, operate
from runner.app import Runner
from runner.operate import OperatorError
from runner.web.auth import User

ACTIONS = ("rerun", "pause", "resume", "approve", "skip", "backfill", "backfill_pause",
           "backfill_resume", "backfill_cancel")
TITLES = {
    "rerun": "Rerun a run", "pause": "Pause a job", "resume": "Resume a job",
    "approve": "Approve runs awaiting approval", "skip": "Skip runs awaiting approval",
    "backfill": "Backfill a range of slots", "backfill_pause": "Pause a backfill",
    "backfill_resume": "Resume a backfill", "backfill_cancel": "Cancel a backfill",
}
# the parameters each action takes (the forms carry them as hidden fields)
PARAMS = {
    "rerun": ("job", "slot", "partition", "force", "seen_status", "seen_fence"),
    "pause": ("job",), "resume": ("job",),
    "approve": ("job", "slot", "from", "to", "partition"),
    "skip": ("job", "slot", "from", "to", "partition"),
    "backfill": ("job", "from", "to", "partitions", "concurrency", "rate", "max_failures", "force"),
    "backfill_pause": ("plan_id",), "backfill_resume": ("plan_id", "max_failures"),
    "backfill_cancel": ("plan_id",),
}
MAX_TEXT = 10_000


def _text(params: Mapping[str, Any], name: str, required: bool = True) -> str | None:
    value = params.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise OperatorError(f"{name} is required")
        return None
    if not isinstance(value, str):
        raise OperatorError(f"{name} must be a string")
    if len(value) > MAX_TEXT:
        raise OperatorError(f"{name} is longer than {MAX_TEXT} characters")
    return value


def _time(params: Mapping[str, Any], name: str, required: bool = True) -> datetime | None:
    value = _text(params, name, required)
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise OperatorError(f"{name} must be an ISO 8601 time with an offset, got {value!r}") from None
    if parsed.tzinfo is None:
        raise OperatorError(f"{name} must carry an offset (e.g. 2026-01-01T00:00:00+00:00), got {value!r}")
    return parsed


def _flag(params: Mapping[str, Any], name: str) -> bool:
    value = params.get(name)
    if isinstance(value, bool):
        return value
    return isinstance(value, str) and value.strip().lower() in ("1", "true", "on", "yes")


def _number(params: Mapping[str, Any], name: str, kind: type[int] | type[float]) -> Any:
    value = params.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise OperatorError(f"{name} must be a number")
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise OperatorError(f"{name} must be a number, got {value!r}") from None


def _partitions(params: Mapping[str, Any]) -> tuple[str, ...]:
    value = params.get("partitions")
    if value is None:
        return ()
    if isinstance(value, list):
        items = [str(v) for v in value]
    elif isinstance(value, str):
        items = value.replace(",", "\n").splitlines()
    else:
        raise OperatorError("partitions must be a list or a comma-separated string")
    return tuple(p.strip() for p in items if p.strip())


def _plan_id(params: Mapping[str, Any]) -> int:
    value = _number(params, "plan_id", int)
    if value is None:
        raise OperatorError("plan_id is required")
    return int(value)


def _job_def(app: Runner | None, job_name: str) -> Any:
    if app is None:
        raise OperatorError("a backfill needs the job's definition: start `runner web` with --app")
    job = app.jobs.get(job_name)
    if job is None:
        raise OperatorError(f"the app defines no job {job_name!r}")
    return job


def _rerun_plan(conn: psycopg.Connection[Any], params: Mapping[str, Any]) -> operate.RerunPlan:
    job, slot = _text(params, "job"), _time(params, "slot")
    assert job is not None and slot is not None
    partition = _text(params, "partition", False) or ""
    return operate.plan_rerun(conn, job, slot, partition, _flag(params, "force"))


def _approval_plan(conn: psycopg.Connection[Any], action: str,
                   params: Mapping[str, Any]) -> approvals.ApprovalPlan:
    job = _text(params, "job")
    assert job is not None
    return approvals.plan(conn, action, job, _time(params, "slot", False), _time(params, "from", False),
                          _time(params, "to", False), _text(params, "partition", False))


def _backfill_plan(conn: psycopg.Connection[Any], app: Runner | None,
                   params: Mapping[str, Any]) -> backfill.BackfillPlan:
    job = _text(params, "job")
    assert job is not None
    start, end = _time(params, "from"), _time(params, "to")
    assert start is not None and end is not None
    concurrency = _number(params, "concurrency", int)
    max_failures = _number(params, "max_failures", int)
    spec = backfill.Spec(job_name=job, range_from=start, range_to=end, partitions=_partitions(params),
                         concurrency=1 if concurrency is None else concurrency,
                         rate=_number(params, "rate", float),
                         max_failures=10 if max_failures is None else max_failures,
                         force=_flag(params, "force"))
    return backfill.plan(conn, _job_def(app, job), spec)


def check(action: str) -> str:
    if action not in ACTIONS:
        raise OperatorError(f"no action {action!r}; one of {', '.join(ACTIONS)}")
    return action


def impact(conn: psycopg.Connection[Any], action: str, params: Mapping[str, Any],
           app: Runner | None = None) -> dict[str, Any]:
    """What the action would touch (reads only), as the CLI shows it before it asks. Has
    ``refusal`` when the action may not proceed."""
    check(action)
    if action == "rerun":
        plan = _rerun_plan(conn, params)
        return {"run": plan.run, "attempts": plan.attempts, "effects": plan.effects,
                "refusal": plan.refusal, "label": plan.run_label,
                "effects_sent": sum(1 for e in plan.effects or () if (e.get("send_count") or 0) >= 1)}
    if action in ("pause", "resume"):
        job = _text(params, "job")
        assert job is not None
        paused = operate.plan_pause(conn, job, action == "pause")
        return {"job": paused.job, "changes": paused.changes,
                "refusal": None if paused.changes else
                f"job {job!r} is already {'paused' if action == 'pause' else 'not paused'}; nothing to do"}
    if action in ("approve", "skip"):
        planned = _approval_plan(conn, action, params)
        return {"runs": planned.runs, "selection": planned.selection, "label": planned.describe(),
                "refusal": None}
    if action == "backfill":
        return {**_backfill_plan(conn, app, params).summary(), "refusal": None}
    progress = backfill.show(conn, _plan_id(params))
    status = progress.plan["status"]
    allowed = {"backfill_pause": ("running", "planned"), "backfill_resume": ("paused",),
               "backfill_cancel": ("planned", "running", "paused")}[action]
    refusal = None if status in allowed else (
        f"backfill {progress.plan['id']} is {status}: it cannot be {action.removeprefix('backfill_')}d")
    return {**progress.as_dict(), "refusal": refusal}


def perform(conn: psycopg.Connection[Any], action: str, params: Mapping[str, Any], user: User,
            reason: str | None, app: Runner | None = None) -> dict[str, Any]:
    """Do the action as ``user`` with ``reason``: the CLI's action function, so the same
    database function and the same runner.requests row. Returns its result (with
    ``request``, or ``request`` None when there was nothing to change)."""
    check(action)
    if not user.can_act:
        raise PermissionError(f"{user.name} is a viewer: actions need an operator")
    why = operate.checked_text(reason, "reason")
    who = user.who
    if action == "rerun":
        plan = _rerun_plan(conn, params)
        seen_status, seen_fence = _text(params, "seen_status", False), _number(params, "seen_fence", int)
        if seen_status is not None or seen_fence is not None:
            # the run as the operator was shown it: the database function refuses if it changed since
            plan = dataclasses.replace(plan, run={
                **plan.run, "status": seen_status or plan.run["status"],
                "fence": plan.run["fence"] if seen_fence is None else seen_fence})
        return operate.rerun(conn, plan, why, who, _flag(params, "force"))
    if action in ("pause", "resume"):
        job = _text(params, "job")
        assert job is not None
        done = operate.set_paused(conn, operate.plan_pause(conn, job, action == "pause"), why, who)
        return done if done is not None else {"request": None, "job": {"job_name": job}}
    if action in ("approve", "skip"):
        return approvals.decide(conn, _approval_plan(conn, action, params), why, who)
    if action == "backfill":
        return backfill.create(conn, _backfill_plan(conn, app, params), why, who)
    plan_id = _plan_id(params)
    if action == "backfill_pause":
        return backfill.pause(conn, plan_id, why, who)
    if action == "backfill_resume":
        max_failures = _number(params, "max_failures", int)
        return backfill.resume(conn, plan_id, why, who, max_failures=max_failures,
                               set_max_failures=max_failures is not None)
    return backfill.cancel(conn, plan_id, why, who)
