"""The operator's side: ``runner status``, ``rerun``, ``pause``, ``resume``, ``retire`` and
``unretire`` without the parsing and printing (that is runner/cli.py), on the named SQL of
``sql/queries/operate.sql``. The actions among them are registered, with their parameters
and impact, in runner/actions/registry.py, which the CLI and the console dispatch through.

Every change an operator makes follows one shape: a *plan* reads what the action would touch
(shown to the operator, who confirms), then one call of the action's database function
(``runner.rerun_v1``, ``runner.set_job_paused_v1``, ...: sql/functions/) locks the rows,
checks the transition and that they are still as shown, writes the change and its
``runner.requests`` row (who, why, what it touched, before and after) in one transaction.
A run or job that changed in between is left alone. The functions run as the schema owner
(SECURITY DEFINER), so the operator role needs no INSERT or UPDATE on the ledger: they are
the only way an operator changes it. A refusal comes back as ``OperatorError``.

Rerun. The run goes back to ``pending`` with trigger ``manual`` and ``next_attempt_at = now``;
the loop of any live runner then claims it like every queued run (attempt + 1, fence + 1,
trigger ``manual``). The run's earlier attempts stop counting against the job's
``max_attempts`` (``job_runs.uncounted_attempts = attempt``), so a rerun gets a full budget of
attempts of its own: a dead run is tried at least once more, and retried as a fresh run would
be. A running or pending run is refused; a succeeded (or coalesced) one needs ``force``.

Retire and unretire (``runner retire`` / ``unretire``) set ``runner.jobs.retired_at`` and
the retirement history: see ``set_retired``.

Pause and resume flip ``runner.jobs.paused``. The claim statements skip paused jobs, so no
new slot, retry or rerun of the job starts anywhere; attempts already running finish. Slots
that fall due while a job is paused get no run: the gap scan lists them (a backfill can run
them later).
"""

from __future__ import annotations

import getpass
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from runner.model.jobs import JobDef, JobSource
from runner.model.schedule import Schedule
from runner.sqlfiles import queries
from runner.store import ledger

Q = queries("operate")

# a rerun needs force for these: the work was done (or covered by another run)
DONE_STATUSES = frozenset({"succeeded", "coalesced"})


class OperatorError(Exception):
    """An operator action that cannot proceed. The message is one line, shown as is."""


def default_who() -> str:
    """Who asked, when ``--by`` is not given: the OS user at this host."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name in the environment or the password database
        user = f"uid-{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def checked_text(value: str | None, what: str) -> str:
    text = (value or "").strip()
    if not text:
        raise OperatorError(f"{what} must not be empty")
    return text


def _one(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> dict[str, Any] | None:
    found = ledger.dict_rows(conn, Q[name], params)
    return found[0] if found else None


def column_exists(conn: psycopg.Connection[Any], relation: str, column: str) -> bool:
    row = _one(conn, "has_column", {"relation": relation, "column": column})
    return bool(row and row["present"])


def call_action(conn: psycopg.Connection[Any], statement: str,
                params: dict[str, Any]) -> list[dict[str, Any]]:
    """Run one action function's statement; its refusals (raised as P0001 by the function,
    one line, nothing written) come back as ``OperatorError``."""
    try:
        return ledger.dict_rows(conn, statement, params)
    except psycopg.errors.RaiseException as exc:
        raise OperatorError(exc.diag.message_primary or str(exc).strip()) from None


def get_request(conn: psycopg.Connection[Any], request_id: int) -> dict[str, Any]:
    """The runner.requests row an action function wrote."""
    row = _one(conn, "get_request", {"request_id": request_id})
    assert row is not None
    return row


def as_json(value: Any) -> Jsonb:
    return Jsonb(value, dumps=lambda o: json.dumps(o, sort_keys=True, default=str))


# -- status -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StatusReport:
    jobs: list[dict[str, Any]]  # runner.job_health rows, plus missing and next_slot
    alerts: list[dict[str, Any]]  # runner.alerts rows
    now: datetime  # the ledger's clock the report was made at (runner.ledger_now_v1)
    # runner.backfill_plans rows (revision 0013_verify): plans not finished or finished in 24 h
    backfills: list[dict[str, Any]] = field(default_factory=list)
    # the server's clock and the ledger's: on a lagging replica the report is as of the
    # ledger's (its last replayed commit), so lag and alerts are not the replay lag
    clock: ledger.Clock | None = None
    # live runner processes and the newest heartbeat of any (``liveness``)
    runners: dict[str, Any] = field(default_factory=dict)


def status(conn: psycopg.Connection[Any], app: JobSource | None = None,
           job_name: str | None = None, with_alerts: bool = True,
           with_backfills: bool = True, with_runners: bool = True) -> StatusReport:
    """Per-job health and the alerts. ``missing`` is the job's count in runner.missing_slots
    (from the same statement as its health: runner.job_health_v1 runs the gap scan once);
    ``next_slot`` comes from the job's definition in ``app``, else from the schedule the
    ledger holds for it (runner.jobs: the last synced definition; None when retired). ``with_alerts=False``
    leaves the alerts out (the console's Jobs page counts them per job instead),
    ``with_backfills=False`` the backfill plans, ``with_runners=False`` the runners line
    (``liveness``: the console reads it for its banner). The schema is this runner's head (callers
    check it), so every relation read here exists."""
    clock = ledger.ledger_clock(conn)
    now = clock.as_of
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(Q["job_health"], {"job_name": job_name})
        columns = [c.name for c in cur.description or ()]
        jobs = cur.fetchall()
    defs: dict[str, JobDef] = app.jobs if app is not None else {}
    synced = {row["job_name"] for row in jobs}
    for name, job in defs.items():  # defined in the app, never synced by a runner yet
        if name not in synced and job_name in (None, name):
            jobs.append({**dict.fromkeys(columns), "job_name": name, "owner": job.owner,
                         "paused": job.paused, "missing": 0})
    for row in jobs:
        definition = defs.get(row["job_name"])
        if definition is not None:
            row["next_slot"] = definition.schedule.next_after(now)
        else:  # no --app: the definition the ledger holds (issue 30, point 8)
            row["next_slot"] = _next_from_ledger(row, now)
    jobs.sort(key=lambda r: r["job_name"])
    alerts = ledger.dict_rows(conn, Q["alerts"], {"job_name": job_name}) if with_alerts else []
    plans = (ledger.dict_rows(conn, Q["backfill_plans"], {"job_name": job_name})
             if with_backfills else [])
    return StatusReport(jobs=jobs, alerts=alerts, now=now, backfills=plans, clock=clock,
                        runners=liveness(conn) if with_runners else {})


def _next_from_ledger(row: dict[str, Any], now: datetime) -> datetime | None:
    """The next slot after ``now`` of a job's schedule as runner.jobs holds it (its
    job_health row carries it; None for a retired job, one not in the ledger, or a schedule
    this runner cannot read: an older or newer runner wrote it)."""
    if row.get("retired_at") is not None or not row.get("schedule_kind"):
        return None
    try:
        schedule = Schedule(kind=row["schedule_kind"], cron=row["cron"], every=row["every_interval"],
                            timezone=row["timezone"])
        return schedule.next_after(now)
    except (ValueError, TypeError):
        return None


def liveness(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """How many runner processes are live (not stopped, heartbeat within 15 s) and the
    newest heartbeat of any (``last_beat``, None when no runner ever registered; ``since_beat``
    its age): `runner status`'s runners line and the console's banner on every page."""
    [row] = ledger.dict_rows(conn, Q["liveness"], {})
    return row


# -- rerun ------------------------------------------------------------------------------


def starts(run: Mapping[str, Any], resume: bool) -> str:
    """Where the next attempt of a run an operator queues again starts (issue 33): from
    scratch, or with ``resume`` from its last checkpoint (``run``'s checkpoint_at,
    checkpoint_bytes and checkpoint_summary), as the impact shown first says it (a rerun's
    and a backfill's)."""
    if run.get("checkpoint_at") is None:
        return "from scratch (the run has no checkpoint)"
    at = run["checkpoint_at"].isoformat(timespec="seconds")
    about = f"{at}, {run['checkpoint_bytes']} bytes: {run['checkpoint_summary'] or ''}".rstrip(": ")
    if resume:
        return f"from its last checkpoint ({about})"
    return f"from scratch: its last checkpoint ({about}) is cleared (--resume keeps it)"



@dataclass(frozen=True)
class RerunPlan:
    run: dict[str, Any]
    attempts: list[dict[str, Any]]
    effects: list[dict[str, Any]] | None  # None: this schema has no effect log
    refusal: str | None  # why the rerun may not proceed; None when it may

    def starts(self, resume: bool) -> str:
        """Where the rerun's next attempt starts (the impact shown first, issue 33)."""
        return starts(self.run, resume)

    @property
    def run_label(self) -> str:
        run = self.run
        part = f", partition {run['partition_key']!r}" if run["partition_key"] else ""
        return (f"run {run['id']} of job {run['job_name']!r}, slot "
                f"{run['schedule_slot'].isoformat()}{part}")


def _refusal(run: dict[str, Any], force: bool) -> str | None:
    status = run["status"]
    if status == "running":
        return (f"run {run['id']} is running (attempt {run['attempt']}, fence {run['fence']}): "
                "a run in flight cannot be rerun; nothing written")
    if status == "pending":
        return (f"run {run['id']} is already pending (its next attempt is due at "
                f"{run['next_attempt_at'].isoformat() if run['next_attempt_at'] else 'once approved'}); "
                "nothing written")
    if status in DONE_STATUSES and not force:
        return (f"run {run['id']} already {status}: pass --force to run it again; nothing written")
    return None


def plan_rerun(conn: psycopg.Connection[Any], job_name: str, slot: datetime, partition_key: str = "",
               force: bool = False) -> RerunPlan:
    """What a rerun would touch: the run, its attempts, its recorded effects."""
    run = _one(conn, "find_run", {"job_name": job_name, "slot": slot, "partition_key": partition_key})
    if run is None:
        part = f", partition {partition_key!r}" if partition_key else ""
        others = [r["partition_key"] for r in ledger.dict_rows(
            conn, Q["slot_partitions"], {"job_name": job_name, "slot": slot})]
        hint = ("check the slot's UTC instant with `runner runs --job`" if not others else
                "that slot has runs for partition(s) "
                + ", ".join(repr(p) for p in others[:10]) + (", ..." if len(others) > 10 else "")
                + ": pass --partition")
        raise OperatorError(
            f"no run of job {job_name!r} at slot {slot.isoformat()}{part}: nothing to rerun ({hint})")
    attempts = ledger.dict_rows(conn, Q["run_attempts"], {"run_id": run["id"]})
    effects = None
    if column_exists(conn, "runner.effects", "run_id"):
        effects = [r["effect"] for r in ledger.dict_rows(conn, Q["run_effects"], {"run_id": run["id"]})]
    return RerunPlan(run=run, attempts=attempts, effects=effects, refusal=_refusal(run, force))


def rerun(conn: psycopg.Connection[Any], plan: RerunPlan, reason: str, who: str | None = None,
          force: bool = False, now: datetime | None = None, resume: bool = False) -> dict[str, Any]:
    """Queue the planned run for a new attempt (trigger manual), with its request row, in one
    transaction. The new attempt starts from scratch (the run's checkpoint state cleared), or
    with ``resume`` from the run's last checkpoint (runner/worker/checkpoints.py). Returns
    {"request": ..., "run": ...}."""
    if plan.refusal:
        raise OperatorError(plan.refusal)
    reason = checked_text(reason, "--reason")
    who = checked_text(who or default_who(), "--by")
    seen = plan.run
    with conn.transaction():
        [updated] = call_action(conn, Q["rerun"], {
            "run_id": seen["id"], "seen_status": seen["status"], "seen_fence": seen["fence"],
            "force": force, "who": who, "reason": reason, "now": now, "resume": resume})
        request = get_request(conn, updated.pop("request_id"))
    return {"request": request, "run": updated}


# -- pause and resume -------------------------------------------------------------------


@dataclass(frozen=True)
class PausePlan:
    job: dict[str, Any]  # job_name, paused, owner, running, queued
    paused: bool  # the state asked for

    @property
    def changes(self) -> bool:
        return bool(self.job["paused"]) != self.paused


def _known_job(conn: psycopg.Connection[Any], query: str, job_name: str) -> dict[str, Any]:
    """The job's row of ``query`` (its state for a pause or a retirement); OperatorError for a
    job the ledger does not know."""
    job = _one(conn, query, {"job_name": job_name})
    if job is None:
        raise OperatorError(
            f"no job {job_name!r} in the ledger (a job is registered there when a runner that "
            "defines it starts)")
    return job


def plan_pause(conn: psycopg.Connection[Any], job_name: str, paused: bool) -> PausePlan:
    return PausePlan(job=_known_job(conn, "job_state", job_name), paused=paused)


def set_paused(conn: psycopg.Connection[Any], plan: PausePlan, reason: str,
               who: str | None = None) -> dict[str, Any] | None:
    """Pause or resume the planned job, with its request row, in one transaction. Returns
    {"request": ..., "job": ...}, or None when the job already was in that state."""
    reason = checked_text(reason, "--reason")
    who = checked_text(who or default_who(), "--by")
    name = plan.job["job_name"]
    with conn.transaction():
        changed = call_action(conn, Q["set_paused"], {
            "job_name": name, "paused": plan.paused, "who": who, "reason": reason})
        if not changed:  # already in that state
            return None
        request = get_request(conn, changed[0]["request_id"])
    return {"request": request, "job": {"job_name": changed[0]["job"], "paused": changed[0]["now_paused"]}}


# -- retire and unretire ----------------------------------------------------------------


@dataclass(frozen=True)
class RetirePlan:
    job: dict[str, Any]  # job_name, retired_at, paused, owner, running, queued, live_runners
    retire: bool  # True: retire; False: unretire

    @property
    def changes(self) -> bool:
        return (self.job["retired_at"] is None) == self.retire


def plan_retire(conn: psycopg.Connection[Any], job_name: str, retire: bool) -> RetirePlan:
    return RetirePlan(job=_known_job(conn, "retire_state", job_name), retire=retire)


def set_retired(conn: psycopg.Connection[Any], plan: RetirePlan, reason: str,
                who: str | None = None) -> dict[str, Any] | None:
    """Retire or unretire the planned job, with its request row, in one transaction
    (runner.retire_job_v1 / unretire_job_v1). Returns {"request": ..., "job": ...}, or None
    when the job already was in that state.

    Retired: after the retirement instant the job's slots are not expected (gap scan, alerts,
    health, the ledger audit), no runner starts its slots, retries or reruns after it, and a
    runner whose code defines it refuses to start. Unretired: slots from now on are expected
    again; those between retirement and unretirement never are."""
    reason = checked_text(reason, "--reason")
    who = checked_text(who or default_who(), "--by")
    name = plan.job["job_name"]
    with conn.transaction():
        changed = call_action(conn, Q["retire" if plan.retire else "unretire"], {
            "job_name": name, "who": who, "reason": reason})
        if not changed:
            return None
        request = get_request(conn, changed[0]["request_id"])
    return {"request": request, "job": {"job_name": changed[0]["job"],
                                        "retired_at": changed[0]["retired_at"]}}
