"""The operator's actions, each defined once: the registry both faces dispatch through.

An action is a name, a title, its parameters, and three functions:

* ``plan(ctx, params)`` reads what the action would touch (reads only; may raise
  ``OperatorError`` when there is nothing to act on, e.g. no such run);
* ``shown(plan, params)`` is its *impact*: what the operator is shown before confirming, a
  JSON-able dict with ``refusal`` (a line) when the action may not proceed;
* ``act(ctx, plan, params, who, reason)`` does it: one call of the action's audited database
  function (runner/actions/operate.py, approvals.py, backfill.py, lanes.py: they write the change
  and its ``runner.requests`` row with ``who`` and ``reason`` in one transaction), and
  returns what changed (with ``request``).

``prune`` is the one action that is not audited: it applies the retention policy stored in
the ledger (runner.prune_v1, runner/actions/retention.py), takes no reason on the CLI and writes no
``runner.requests`` row; its impact is its dry run.

The CLI (runner/cli.py) keeps its hand-written Typer declarations (help texts, options) and
prints what the registry's plan and act return; the console (runner/web/actions.py) serves
``/actions/NAME`` and ``/api/actions/NAME`` for every action here. Parameters reach the
registry as strings (CLI options, forms) or JSON values (the API) and are parsed by one
parser, ``parse``; times by one time parser, ``parse_time``, which the CLI's listings and the
console's pages use too. Bad input is a ``ParamError``: one line, before anything is read or
written (the CLI exits 2 on it, the console answers 400).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from runner.actions import approvals, backfill, bulk, copies, operate, retention
from runner.actions.operate import OperatorError
from runner.model.app import LANE_NAME, JobDef, Runner
from runner.worker import conditions, lanes

log = logging.getLogger("runner.actions")

MAX_TEXT = 10_000  # characters of one text parameter or reason


class ParamError(OperatorError, ValueError):
    """A parameter that cannot be parsed. The message is one line, naming the parameter as the
    face calls it (``--slot`` on the CLI, ``slot`` in a form or JSON body)."""


# -- the one time parser -------------------------------------------------------------------


def parse_time(value: Any, name: str) -> datetime | None:
    """An ISO 8601 time with a UTC offset (``Z`` too); None stays None. ParamError otherwise."""
    if value is None:
        return None
    if isinstance(value, datetime):
        parsed = value
    else:
        if not isinstance(value, str):
            raise ParamError(f"{name} must be an ISO 8601 time like 2026-01-31T02:00:00+09:00, got {value!r}")
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ParamError(f"{name} must be an ISO 8601 time like 2026-01-31T02:00:00+09:00, "
                             f"got {value!r}") from None
    if parsed.tzinfo is None:
        raise ParamError(f"{name} needs a UTC offset (e.g. +00:00 or Z), got {value!r}")
    return parsed


def checked_reason(value: Any, name: str = "reason") -> str:
    """The reason of an audited action: text, not empty, at most MAX_TEXT characters."""
    if value is not None and not isinstance(value, str):
        raise ParamError(f"{name} must be a string")
    text = (value or "").strip()
    if not text:
        raise ParamError(f"{name} must not be empty")
    if len(text) > MAX_TEXT:
        raise ParamError(f"{name} is longer than {MAX_TEXT} characters")
    return text


# -- parameters ------------------------------------------------------------------------------

KINDS = ("text", "time", "int", "float", "flag", "list", "limit_int", "limit_float")


@dataclass(frozen=True)
class Param:
    name: str  # in forms and JSON bodies
    kind: str  # one of KINDS; a limit is a number, or "none" to remove it
    required: bool = False
    help: str = ""
    option: str | None = None  # the CLI's option ("--slot"); None: the CLI's argument, or web only
    web: bool = True  # offered by the console (the CLI only: pause conditions, archives)
    default: Any = None
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Limit:
    """A limit parameter: ``given`` False keeps the current limit; else ``value`` (None: none)."""

    value: Any = None
    given: bool = False


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _number(p: Param, label: str, value: Any, kind: type[int] | type[float]) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ParamError(f"{label} must be a number, got {value!r}")
    try:
        number = kind(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise ParamError(f"{label} must be a number, got {value!r}") from None
    if kind is int and isinstance(value, float) and value != number:
        raise ParamError(f"{label} must be a whole number, got {value!r}")
    if (p.low is not None and number < p.low) or (p.high is not None and number > p.high):
        low = "" if p.low is None else f"{p.low:g}"
        high = "" if p.high is None else f"{p.high:g}"
        raise ParamError(f"{label} must be between {low} and {high}, got {value!r}" if low and high
                         else f"{label} must be at least {low}, got {value!r}" if low
                         else f"{label} must be at most {high}, got {value!r}")
    return number


def _one(p: Param, label: str, value: Any) -> Any:
    if p.kind == "text":
        if not isinstance(value, str):
            raise ParamError(f"{label} must be a string")
        if len(value) > MAX_TEXT:
            raise ParamError(f"{label} is longer than {MAX_TEXT} characters")
        return value
    if p.kind == "time":
        if isinstance(value, str) and len(value) > MAX_TEXT:
            raise ParamError(f"{label} is longer than {MAX_TEXT} characters")
        return parse_time(value, label)
    if p.kind in ("int", "float"):
        return _number(p, label, value, int if p.kind == "int" else float)
    if p.kind == "flag":
        if isinstance(value, bool):
            return value
        return isinstance(value, str) and value.strip().lower() in ("1", "true", "on", "yes")
    if p.kind == "list":
        if isinstance(value, (list, tuple)):
            items = [v if isinstance(v, str) else str(v) for v in value]
        elif isinstance(value, str):
            items = value.replace(",", "\n").splitlines()
        else:
            raise ParamError(f"{label} must be a list or a comma-separated string")
        if sum(len(i) for i in items) > MAX_TEXT:
            raise ParamError(f"{label} is longer than {MAX_TEXT} characters")
        return tuple(i.strip() for i in items if i.strip())
    # a limit: "none" removes it
    if isinstance(value, str) and value.strip().lower() == "none":
        return Limit(None, True)
    try:
        return Limit(_number(p, label, value, int if p.kind == "limit_int" else float), True)
    except ParamError:
        raise ParamError(f"{label} must be a number or none, got {value!r}") from None


def parse(name: str, raw: Mapping[str, Any], cli: bool = False) -> dict[str, Any]:
    """The action's parameters from ``raw`` (strings from a form or the CLI, JSON values from
    the API; typed values pass as they are): every parameter of the action, parsed, its
    default when absent or blank. ``cli``: errors name the CLI's options, and the CLI-only
    parameters are read. Unknown keys are ignored. ParamError (one line) on bad input."""
    action = get(name)
    out: dict[str, Any] = {}
    for p in action.params:
        label = (p.option or p.name.upper()) if cli else p.name
        value = raw.get(p.name) if (cli or p.web) else None
        if _blank(value) or (p.kind == "list" and isinstance(value, (list, tuple)) and not value):
            if p.required:
                raise ParamError(f"{label} is required")
            out[p.name] = Limit() if p.kind.startswith("limit") else p.default
            continue
        out[p.name] = _one(p, label, value)
    return out


# -- the registry ------------------------------------------------------------------------------


@dataclass
class Context:
    """What an action runs against: the connection, the app's definitions (a backfill needs
    its job's), the lock namespace (prune), the Prometheus a backfill's condition asks."""

    conn: psycopg.Connection[Any]
    app: Runner | None = None
    namespace: int | None = None
    prometheus_url: str | None = None


Plan = Callable[[Context, dict[str, Any]], Any]
Shown = Callable[[Any, dict[str, Any]], dict[str, Any]]
Act = Callable[[Context, Any, dict[str, Any], str | None, str], dict[str, Any]]


@dataclass(frozen=True)
class Action:
    name: str
    title: str
    command: str  # the CLI command: "rerun", "backfill create", "lane set"
    params: tuple[Param, ...]
    plan: Plan
    shown: Shown
    act: Act
    audited: bool = True  # writes a runner.requests row with who and reason (prune does not)

    @property
    def web_params(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if p.web)


REGISTRY: dict[str, Action] = {}


def register(action: Action) -> Action:
    assert action.name not in REGISTRY, action.name
    assert all(p.kind in KINDS for p in action.params), action.name
    REGISTRY[action.name] = action
    return action


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def get(name: str) -> Action:
    action = REGISTRY.get(name) if isinstance(name, str) else None
    if action is None:
        raise OperatorError(f"no action {name!r}; one of {', '.join(REGISTRY)}")
    return action


def plan(conn: psycopg.Connection[Any], name: str, params: dict[str, Any], *, app: Runner | None = None,
         namespace: int | None = None, prometheus_url: str | None = None) -> Any:
    """The action's plan from parsed ``params`` (reads only)."""
    return get(name).plan(Context(conn, app, namespace, prometheus_url), params)


def act(conn: psycopg.Connection[Any], name: str, planned: Any, params: dict[str, Any], who: str | None,
        reason: str, *, app: Runner | None = None, namespace: int | None = None) -> dict[str, Any]:
    """Do the planned action as ``who`` (None: the OS user at this host) for ``reason``."""
    return get(name).act(Context(conn, app, namespace), planned, params, who, reason)


def impact(conn: psycopg.Connection[Any], name: str, raw: Mapping[str, Any], *, app: Runner | None = None,
           namespace: int | None = None) -> dict[str, Any]:
    """What the action would touch, as the operator is shown it before confirming (reads
    only); ``refusal`` when it may not proceed."""
    action = get(name)
    params = parse(name, raw)
    return action.shown(action.plan(Context(conn, app, namespace), params), params)


def perform(conn: psycopg.Connection[Any], name: str, raw: Mapping[str, Any], who: str, reason: Any, *,
            app: Runner | None = None, namespace: int | None = None) -> dict[str, Any]:
    """Plan and do the action from unparsed parameters (the console's path): the same plan and
    database function as the CLI. A refused plan raises OperatorError from the database
    function (or before it), nothing written. Returns what changed, with ``request`` (None
    when there was nothing to change, or the action is not audited)."""
    action = get(name)
    why = checked_reason(reason)
    params = parse(name, raw)
    ctx = Context(conn, app, namespace)
    done = action.act(ctx, action.plan(ctx, params), params, who, why)
    if not action.audited:
        log.info("%s by %s (not audited in runner.requests): %s", name, who, why)
        done = {"request": None, **done}
    return done


# -- rerun -------------------------------------------------------------------------------------

JOB = Param("job", "text", required=True, help="the job's name")
SLOT = Param("slot", "time", help="one slot (ISO 8601 with offset)", option="--slot")
FROM = Param("from", "time", help="slots at or after (ISO 8601 with offset)", option="--from")
TO = Param("to", "time", help="slots before (ISO 8601 with offset)", option="--to")
PARTITION = Param("partition", "text", help="only this partition key", option="--partition")
PLAN_ID = Param("plan_id", "int", required=True, help="the backfill plan's id")


def _rerun_plan(ctx: Context, p: dict[str, Any]) -> operate.RerunPlan:
    return operate.plan_rerun(ctx.conn, p["job"], p["slot"], p["partition"] or "", p["force"])


def _rerun_shown(plan: operate.RerunPlan, p: dict[str, Any]) -> dict[str, Any]:
    return {"run": plan.run, "attempts": plan.attempts, "effects": plan.effects, "refusal": plan.refusal,
            "label": plan.run_label, "starts": plan.starts(bool(p.get("resume"))),
            "effects_sent": sum(1 for e in plan.effects or () if (e.get("send_count") or 0) >= 1)}


def _rerun_act(ctx: Context, plan: operate.RerunPlan, p: dict[str, Any], who: str | None,
               reason: str) -> dict[str, Any]:
    if p.get("seen_status") is not None or p.get("seen_fence") is not None:
        # the run as the operator was shown it: the database function refuses if it changed since
        plan = dataclasses.replace(plan, run={
            **plan.run, "status": p["seen_status"] or plan.run["status"],
            "fence": plan.run["fence"] if p["seen_fence"] is None else p["seen_fence"]})
    return operate.rerun(ctx.conn, plan, reason, who, p["force"], resume=bool(p.get("resume")))


register(Action(
    "rerun", "Rerun a run", "rerun",
    (JOB, Param("slot", "time", required=True, help="the run's slot, ISO 8601 with offset", option="--slot"),
     Param("partition", "text", help="the run's partition key", option="--partition", default=""),
     Param("force", "flag", help="rerun a run that already succeeded", option="--force", default=False),
     Param("resume", "flag", help="continue from the run's last checkpoint (default: from scratch)",
           option="--resume", default=False),
     Param("seen_status", "text", help="the run's status as shown (refused if it changed)"),
     Param("seen_fence", "int", help="the run's fence as shown (refused if it changed)")),
    _rerun_plan, _rerun_shown, _rerun_act))


# -- rerun many: every failed or dead run of a job in a range, or of a backfill -------------------


def _many_plan(ctx: Context, p: dict[str, Any]) -> bulk.BulkPlan:
    return bulk.plan(ctx.conn, p["job"], p["from"], p["to"], p["partition"], p["statuses"], p["plan_id"])


def _many_shown(plan: bulk.BulkPlan, _: dict[str, Any]) -> dict[str, Any]:
    return {"job": plan.job_name, "selection": plan.selection, "label": plan.describe(), "runs": plan.runs,
            "count": len(plan.runs), "by_status": plan.by_status(), "starts": plan.starts(),
            "refusal": plan.refusal}


def _many_act(ctx: Context, plan: bulk.BulkPlan, p: dict[str, Any], who: str | None,
              reason: str) -> dict[str, Any]:
    seen = p.get("seen_runs")
    if seen:  # the runs as the operator was shown them: refused if the selection changed since
        try:
            shown = sorted(int(i) for i in seen)
        except ValueError:
            raise ParamError("seen_runs must be run ids") from None
        now = sorted(r["id"] for r in plan.runs)
        if shown != now:
            raise OperatorError(f"the selection changed since it was shown ({len(now)} run(s) now, "
                                f"{len(shown)} shown); nothing written: look again")
    return bulk.rerun(ctx.conn, plan, reason, who)


register(Action(
    "rerun_many", "Rerun failed or dead runs in bulk", "rerun-many",
    (Param("job", "text", help="the job's name (or give plan_id)"),
     FROM, TO, PARTITION,
     Param("statuses", "list", help="failed and/or dead (default: dead)", option="--status",
           default=("dead",)),
     Param("plan_id", "int", help="only the runs of this backfill plan", option="--backfill", low=1),
     Param("seen_runs", "list", help="the run ids as shown (refused if the selection changed)")),
    _many_plan, _many_shown, _many_act))


# -- pause, resume, retire, unretire -------------------------------------------------------------


def _toggle(kind: str, on: bool) -> tuple[Plan, Shown, Act]:
    """Pause/resume (``kind`` "pause") or retire/unretire ("retire") one job."""
    states = {"pause": ("paused", "not paused"), "retire": ("retired", "not retired")}[kind]
    plan_fn = operate.plan_pause if kind == "pause" else operate.plan_retire
    apply_fn: Callable[..., dict[str, Any] | None] = (
        operate.set_paused if kind == "pause" else operate.set_retired)

    def planned(ctx: Context, p: dict[str, Any]) -> Any:
        return plan_fn(ctx.conn, p["job"], on)

    def shown(plan: Any, p: dict[str, Any]) -> dict[str, Any]:
        return {"job": plan.job, "changes": plan.changes,
                "refusal": None if plan.changes else
                f"job {p['job']!r} is already {states[0] if on else states[1]}; nothing to do"}

    def acted(ctx: Context, plan: Any, p: dict[str, Any], who: str | None, reason: str) -> dict[str, Any]:
        done = apply_fn(ctx.conn, plan, reason, who) if plan.changes else None
        return done if done is not None else {"request": None, "job": {"job_name": p["job"]}}

    return planned, shown, acted


register(Action("pause", "Pause a job", "pause", (JOB,), *_toggle("pause", True)))
register(Action("resume", "Resume a job", "resume", (JOB,), *_toggle("pause", False)))


# -- approve, skip -------------------------------------------------------------------------------


def _decision(action: str) -> tuple[Plan, Shown, Act]:
    def planned(ctx: Context, p: dict[str, Any]) -> approvals.ApprovalPlan:
        return approvals.plan(ctx.conn, action, p["job"], p["slot"], p["from"], p["to"], p["partition"])

    def shown(plan: approvals.ApprovalPlan, _: dict[str, Any]) -> dict[str, Any]:
        return {"runs": plan.runs, "selection": plan.selection, "label": plan.describe(), "refusal": None}

    def acted(ctx: Context, plan: approvals.ApprovalPlan, _: dict[str, Any], who: str | None,
              reason: str) -> dict[str, Any]:
        return approvals.decide(ctx.conn, plan, reason, who)

    return planned, shown, acted


register(Action("approve", "Approve runs awaiting approval", "approve", (JOB, SLOT, FROM, TO, PARTITION),
                *_decision("approve")))
register(Action("skip", "Skip runs awaiting approval", "skip", (JOB, SLOT, FROM, TO, PARTITION),
                *_decision("skip")))


# -- backfill and its plans ------------------------------------------------------------------------


def job_definition(app: Runner | None, job_name: str) -> JobDef:
    """A backfill's job as the app defines it (the slots and partitions it would run)."""
    if app is None:
        raise OperatorError("a backfill needs the job's definition: start `runner web` with --app")
    job = app.jobs.get(job_name)
    if job is None:
        raise OperatorError(f"the app defines no job {job_name!r}")
    return job


def _backfill_plan(ctx: Context, p: dict[str, Any]) -> backfill.BackfillPlan:
    spec = backfill.Spec(job_name=p["job"], range_from=p["from"], range_to=p["to"],
                         partitions=p["partitions"], lane=p["lane"], concurrency=p["concurrency"],
                         rate=p["rate"], max_failures=p["max_failures"], pause_when=p["pause_when"],
                         pause_every=p["pause_every"],
                         force=p["force"], resume=bool(p.get("resume")))
    return backfill.plan(ctx.conn, job_definition(ctx.app, p["job"]), spec, ctx.prometheus_url)


register(Action(
    "backfill", "Backfill a range of slots", "backfill create",
    (JOB, Param("from", "time", required=True, help="first slots at or after (ISO 8601 with offset)",
                option="--from"),
     Param("to", "time", required=True, help="slots before (ISO 8601 with offset)", option="--to"),
     Param("partitions", "list", help="only these partitions (default: the job's)", option="--partition",
           default=()),
     Param("lane", "text", help="the lane its runs belong to", option="--lane", default="bulk"),
     Param("concurrency", "int", help="runs of the plan running at once, at most", option="--concurrency",
           default=1, low=1),
     Param("rate", "float", help="runs started per second, at most (default: unlimited)", option="--rate"),
     Param("max_failures", "int", help="pause when more runs than this are failed or dead",
           option="--max-failures", default=10, low=0),
     Param("pause_when", "text", help="pause when this SQL returns true", option="--pause-when", web=False),
     # the condition's pace: CLI-only as the condition is (given without one, it is refused)
     Param("pause_every", "int", help="seconds between two evaluations of the pause condition (default 5)",
           option="--pause-every", web=False, low=conditions.MIN_EVERY, high=conditions.MAX_EVERY),
     Param("force", "flag", help="run again slots that already succeeded", option="--force", default=False),
     Param("resume", "flag", option="--resume", default=False,
           help="the runs queued again continue from their last checkpoints (default: from scratch)")),
    _backfill_plan,
    lambda plan, _: {**plan.summary(), "refusal": None},
    lambda ctx, plan, _, who, reason: backfill.create(ctx.conn, plan, reason, who)))


def _plan_state(verb: str, allowed: tuple[str, ...]) -> tuple[Plan, Shown, Act]:
    def planned(ctx: Context, p: dict[str, Any]) -> backfill.Progress:
        return backfill.show(ctx.conn, p["plan_id"])

    def shown(progress: backfill.Progress, _: dict[str, Any]) -> dict[str, Any]:
        status = progress.plan["status"]
        refusal = None if status in allowed else (
            f"backfill {progress.plan['id']} is {status}: it cannot be {verb}d")
        return {**progress.as_dict(), "refusal": refusal}

    def acted(ctx: Context, _: backfill.Progress, p: dict[str, Any], who: str | None,
              reason: str) -> dict[str, Any]:
        if verb == "pause":
            return backfill.pause(ctx.conn, p["plan_id"], reason, who)
        if verb == "resume":
            return backfill.resume(ctx.conn, p["plan_id"], reason, who, max_failures=p["max_failures"],
                                   set_max_failures=p["max_failures"] is not None)
        return backfill.cancel(ctx.conn, p["plan_id"], reason, who)

    return planned, shown, acted


register(Action("backfill_pause", "Pause a backfill", "backfill pause", (PLAN_ID,),
                *_plan_state("pause", ("running", "planned"))))
register(Action("backfill_resume", "Resume a backfill", "backfill resume",
                (PLAN_ID, Param("max_failures", "int", option="--max-failures", low=0,
                                help="a new failure threshold (the old one would pause it again)")),
                *_plan_state("resume", ("paused",))))
register(Action("backfill_cancel", "Cancel a backfill", "backfill cancel", (PLAN_ID,),
                *_plan_state("cancel", ("planned", "running", "paused"))))


# -- retire, unretire -------------------------------------------------------------------------------

register(Action("retire", "Retire a job", "retire", (JOB,), *_toggle("retire", True)))
register(Action("unretire", "Unretire a job", "unretire", (JOB,), *_toggle("retire", False)))


# -- lanes ----------------------------------------------------------------------------------------------


def _lane_plan(ctx: Context, p: dict[str, Any]) -> dict[str, Any]:
    name = p["lane"]
    current = next((r for r in lanes.list_lanes(ctx.conn) if r["lane"] == name), None)
    changes: dict[str, Any] = {}
    for key in ("rank", "description"):
        if p[key] is not None and (current is None or current[key] != p[key]):
            changes[key] = p[key]
    for key in ("concurrency", "rate"):
        limit: Limit = p[key]
        if limit.given and (current is None or current[key] != limit.value):
            changes[key] = limit.value
    refusal = None
    if not LANE_NAME.fullmatch(name):
        refusal = (f"lane name {name!r} is not valid: 1 to 40 of a-z, 0-9 and _, "
                   "starting with a letter")
    return {"lane": name, "current": current, "new": current is None, "changes": changes, "refusal": refusal}


def _lane_act(ctx: Context, plan: dict[str, Any], p: dict[str, Any], who: str | None,
              reason: str) -> dict[str, Any]:
    if plan["refusal"]:
        raise OperatorError(plan["refusal"])
    conc, rate = p["concurrency"], p["rate"]
    row = lanes.set_lane(ctx.conn, p["lane"], reason, rank=p["rank"], concurrency=conc.value,
                         set_concurrency=conc.given, rate=rate.value, set_rate=rate.given,
                         description=p["description"], who=who)
    return {"request": operate.get_request(ctx.conn, row["request_id"]), "lane": row}


register(Action(
    "lane_set", "Add or change a lane", "lane set",
    (Param("lane", "text", required=True, help="the lane (a new name adds it)"),
     Param("rank", "int", option="--rank", low=0, high=1000,
           help="priority, lower first (realtime 0, correction 10, manual 20, bulk 30; a new lane: 25)"),
     Param("concurrency", "limit_int", option="--concurrency",
           help="its queued runs running at once across every process (none: no limit)"),
     Param("rate", "limit_float", option="--rate",
           help="starts of its queued runs per second across every process (none: no limit)"),
     Param("description", "text", option="--description", help="what the lane is for")),
    _lane_plan, lambda plan, _: plan, _lane_act))


# -- adopt a copied ledger -------------------------------------------------------------------------

register(Action(
    "adopt", "Adopt a copied ledger", "db adopt", (),
    lambda ctx, _: copies.plan_adopt(ctx.conn),
    lambda plan, _: plan.shown(),
    lambda ctx, plan, _, who, reason: copies.adopt(ctx.conn, plan, reason, who)))


# -- prune -------------------------------------------------------------------------------------------


def _report(report: retention.PruneReport, dry_run: bool) -> dict[str, Any]:
    return {"dry_run": dry_run, "runs": report.runs, "attempts": report.attempts, "effects": report.effects,
            "by_job": report.by_job, "passes": report.passes}


def _prune_namespace(ctx: Context) -> int:
    if ctx.namespace is None:
        from runner.settings import lock_namespace

        return lock_namespace()
    return ctx.namespace


def _prune_plan(ctx: Context, p: dict[str, Any]) -> dict[str, Any]:
    """The dry run: one look of up to ``limit`` (else ``batch``) runs, nothing deleted."""
    report = retention.prune(ctx.conn, _prune_namespace(ctx), batch=p["batch"], dry_run=True,
                             limit=p["limit"])
    looked = min(p["limit"] or p["batch"], retention.MAX_BATCH)
    return {**_report(report, True), "more": report.runs == looked, "refusal": None if report.runs else
            "nothing to prune by the retention policy as stored; nothing to do"}


def _prune_act(ctx: Context, _: Any, p: dict[str, Any], who: str | None, reason: str) -> dict[str, Any]:
    """One `runner prune` run: passes until nothing is left (or ``limit``), by the policy as
    stored; on the CLI, optionally archiving every pruned run first (a table or a file)."""
    out = None
    try:
        if p["archive_file"]:
            out = retention.open_archive(p["archive_file"])
        report = retention.prune(ctx.conn, _prune_namespace(ctx), batch=p["batch"], limit=p["limit"],
                                 archive_table=p["archive_table"], archive_file=out)
    except (ValueError, retention.ArchiveError) as exc:
        raise OperatorError(str(exc)) from None
    finally:
        if out is not None:
            with suppress(OSError):  # every pass's lines were flushed and synced before its commit
                out.close()
    return _report(report, False)


register(Action(
    "prune", "Prune by the retention policy", "prune",
    (Param("batch", "int", option="--batch", default=1000, low=1, high=retention.MAX_BATCH,
           help="runs per transaction"),
     Param("limit", "int", option="--limit", low=1, help="stop after this many runs"),
     Param("archive_table", "text", option="--archive-table", web=False,
           help="copy every pruned run (with attempts and effects, as JSON) into this table first"),
     Param("archive_file", "text", option="--archive-file", web=False,
           help="append every pruned run (with attempts and effects) to this file as JSON lines, first")),
    _prune_plan, lambda plan, _: plan, _prune_act, audited=False))
