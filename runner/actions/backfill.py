"""Backfills: throttled re-execution of a range of a job's slots, audited, verified by results.

A *plan* (a ``runner.backfills`` row) covers the slots of one job in ``[range_from, range_to)``
by the job's current schedule, times its partitions (``--partition``, else the job's static
partitions, else what its partitions callable returns for each slot). Creating it writes, in
one transaction with its ``runner.requests`` row (one call of ``runner.create_backfill_v3``,
sql/functions/create_backfill_v3.sql, as every operator action on a plan is a function),
one queued run per slot x partition, tagged with the plan's ``replay_group_id`` and lane,
and trigger ``backfill``:

* no run yet: a new run, ``pending``;
* a run that failed, is dead, skipped, coalesced, awaiting approval or cancelled (or
  succeeded, with ``force``): the *same* run, ``pending`` again for a new attempt (attempt + 1
  and fence + 1 when it starts); its earlier attempts stop counting against ``max_attempts``;
* a run that is running or already pending, a succeeded run without ``force``, or a run of
  another plan that is not finished: left alone (shown in the impact).

So a backfill never makes a second run for a slot x partition: it reuses the run's business
key (slot, partition, window, idempotency key). The dry run shows the same impact and writes
nothing.

**Checkpoints** (issue 33, runner/worker/checkpoints.py). A run queued again starts from scratch:
its checkpoint state is cleared when the plan is written, so its next attempt's
``ctx.resume`` is None; with ``Spec.resume`` (``runner backfill --resume``) the state is kept
and the next attempt continues from it (retries within the plan resume either way, as every
retry does). The plan remembers which (``runner.backfills.resume``, schema step
0011_resume), the request row names each checkpoint kept or cleared, and the impact lists
the runs queued again, those with a checkpoint first, each with where it starts
(``BackfillPlan.starts``).

**The lane.** A plan's runs belong to its lane (``Spec.lane``, ``bulk`` by default;
runner/worker/lanes.py: the old tags ``backfill`` and ``catch_up`` read as bulk and correction). Runs of
a plan that is not finished are never claimed by the loop's ``claim_due_runs``; ``run_once``
(called by every ``runner start`` loop that serves the plan's lane, once per poll, after the
slots, takeovers and retries of that tick, within the lane's free handler slots on that
process and none while live claims wait) claims them, oldest slot first, under the plan's
limits and its lane's fleet budget (``runner.lane_budget_v1``: the lane's concurrency and rate,
taken under the lane row's lock):

* ``concurrency``: at most this many runs of the plan running at once, across all
  processes (counted in the ledger);
* ``rate``: at most this many starts per second, a token bucket on the plan row that holds
  at most ``max(1, rate)`` tokens (so a process polling once a second still reaches the
  rate, and after an idle spell at most one second's worth starts at once).

Processes take turns on a plan with a transaction-level advisory lock in the two-int form,
``(lock namespace, plan id)`` (``pg_try_advisory_xact_lock``): PostgreSQL keeps two-int keys
apart from the one-bigint keys of runs (``runner.lock_key_v1``), so they cannot collide; a
process that does not get the lock leaves the plan to the holder for that pass. In the same
pass, under that lock, the plan

* pauses when its failed + dead runs exceed ``max_failures``;
* when none of its runs is pending, running or failed: completes only when every run of its
  range is done (``runner.plan_range_v1``: it waits for an overlapping live plan's runs of its
  range, adopts those an earlier plan left cancelled or dead, else pauses saying which runs
  are not done; issue 26, defect 7).

Only slots that are due: ``plan`` clamps a range reaching past the database's now to it
(saying so in one line, ``BackfillPlan.clamped``), ``runner.create_backfill_v3`` refuses a slot
after its clock, and neither ``claim_plan_runs`` nor ``runner.start_attempts_v1`` starts a run
whose slot is after now (issue 26, defect 1). Cancelling a plan restores the runs it displaced
and never started (a forced success, a skipped or coalesced run) as they were (defect 6).

A plan also pauses when the operator's ``pause_when`` condition returns true or fails,
evaluated at most once every ``pause_every`` seconds (``--pause-every``, given only with a
condition). That condition is untrusted SQL: it never runs on the lock session nor in the lane's pass, but
on a connection and thread of its own, as the condition role (runner/worker/conditions.py), which
pauses the plan; the lane only sees the plan paused. It is also evaluated, the same way and
on a connection of its own, when the plan is created (an error refuses the plan).

**Verification.** When a plan completes, the process that completed it (it has the job's
definition) runs the job's ``verify`` check in a background thread, per partition, over the
plan's whole window (the window start of its first slot to the window end of its last), and
records the outcome on the plan: ``verify_status`` passed (every check passed), failed,
error (a check raised, or returned something else than an outcome), or not_configured (the
job has no check). ``verify`` is a callable ``(conn, window_start, window_end, partition)``
returning ``True``/``False``, a string (a failure, saying why) or ``(passed, detail)``; or a
SQL string with the named parameters ``%(window_start)s``, ``%(window_end)s`` and
``%(partition)s`` returning one row: the outcome (boolean) and, optionally, a detail. Each
check runs in a transaction that is rolled back afterwards, with a statement timeout of
``VERIFY_TIMEOUT`` (a callable also with that wall-clock limit: past it, the check is an
error saying timeout; runner/verification.py, "A wall-clock limit"); SQL runs as the
condition role, read-only, on a connection of its own (runner/verification.py says why and
how). Or ``verify`` is a list of verification kinds (count, checksum, sample_keys, residual:
runner/verification.py), of which ``min_passing`` must pass; each kind's outcome is recorded
on the plan. If that process dies before recording the outcome, the plan stays unverified
(``verify_status`` NULL); ``runner backfill verify ID`` (``reverify``) runs the check again,
audited, as it does after the data was fixed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from runner import verification
from runner.actions import operate
from runner.actions.operate import OperatorError, default_who
from runner.model.jobs import JobDef
from runner.model.schedule import idempotency_key
from runner.sqlfiles import queries
from runner.store import ledger
from runner.store.ledger import ClaimedRun, Owner
from runner.worker import conditions, lanes

log = logging.getLogger("runner.backfill")
Q = queries("backfill")

VERIFY_TIMEOUT = "10min"  # a job's single check (callable or SQL)
VERIFY_TIMEOUT_SECONDS = 600.0
MAX_EXPECTED_RUNS = 1_000_000  # slot x partitions in one plan
SHOWN_STARTS = 20  # runs queued again listed in the impact with where they start
ACTIVE = ("planned", "running", "paused")  # plans whose runs are the lane's
REQUEUED = ("failed", "dead", "skipped", "coalesced", "awaiting_approval", "cancelled")
_EPSILON = timedelta(microseconds=1)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _one(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> dict[str, Any] | None:
    found = ledger.dict_rows(conn, Q[name], params)
    return found[0] if found else None


# -- the plan: what it would touch ---------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """What the operator asked for."""

    job_name: str
    range_from: datetime
    range_to: datetime
    partitions: tuple[str, ...] = ()  # empty: the job's own
    lane: str = "bulk"  # runner/worker/lanes.py
    concurrency: int = 1
    rate: float | None = None  # runs started per second; None: unlimited
    max_failures: int | None = 10
    pause_when: str | None = None
    pause_every: int | None = None  # seconds between two evaluations of pause_when; None: conditions.EVERY
    force: bool = False
    resume: bool = False  # the runs queued again continue from their last checkpoints (issue 33)

    @property
    def pause_every_or_default(self) -> int | None:
        """The seconds between two evaluations of the plan's condition; None without one."""
        if self.pause_when is None:
            return None
        return conditions.EVERY if self.pause_every is None else self.pause_every


@dataclass(frozen=True)
class Expected:
    """The slot x partitions of a plan, as columns (the statements take arrays)."""

    slots: list[datetime] = field(default_factory=list)
    partition_keys: list[str] = field(default_factory=list)
    business_dates: list[Any] = field(default_factory=list)
    window_starts: list[datetime] = field(default_factory=list)
    window_ends: list[datetime] = field(default_factory=list)
    idempotency_keys: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.slots)

    def keys(self) -> dict[str, Any]:
        return {"slots": self.slots, "partition_keys": self.partition_keys}

    def columns(self) -> dict[str, Any]:
        return {**self.keys(), "business_dates": self.business_dates,
                "window_starts": self.window_starts, "window_ends": self.window_ends,
                "idempotency_keys": self.idempotency_keys}


@dataclass(frozen=True)
class BackfillPlan:
    """A plan not yet written: what it covers and what it would do (the dry run's report)."""

    spec: Spec
    expected: Expected
    slot_count: int
    partitions: list[str] | None  # the partitions stored on the plan (None: unpartitioned or dynamic)
    states: dict[str, int]  # slot x partitions by the state of their run ('missing', status, 'in_backfill')
    effects: dict[str, int] | None  # effects recorded for those runs, by status (None: no effect log)
    running: list[dict[str, Any]]  # runs in flight (left alone), the first few
    pause_when_now: bool | None  # the pause condition's value when planned
    clamped: str | None = None  # one line, when --to reached past now and was clamped to it
    # the runs queued again (forced ones too), those with a checkpoint first, at most
    # SHOWN_STARTS: each with where its next attempt starts (issue 33); and how many have one
    starts: list[dict[str, Any]] = field(default_factory=list)
    with_checkpoint: int = 0

    @property
    def will_insert(self) -> int:
        return self.states.get("missing", 0)

    @property
    def will_requeue(self) -> int:
        return sum(self.states.get(s, 0) for s in REQUEUED)

    @property
    def will_force(self) -> int:
        return self.states.get("succeeded", 0) if self.spec.force else 0

    @property
    def left_alone(self) -> dict[str, int]:
        alone = {s: self.states.get(s, 0) for s in ("running", "pending", "in_backfill")}
        if not self.spec.force:
            alone["succeeded"] = self.states.get("succeeded", 0)
        return {k: v for k, v in alone.items() if v}

    def summary(self) -> dict[str, Any]:
        return {
            "job_name": self.spec.job_name,
            "range_from": self.spec.range_from,
            "range_to": self.spec.range_to,
            "slots": self.slot_count,
            "partitions": self.partitions,
            "expected_runs": len(self.expected),
            "already_succeeded": self.states.get("succeeded", 0),
            "runs_by_state": self.states,
            "will_insert": self.will_insert,
            "will_requeue": self.will_requeue,
            "will_force": self.will_force,
            "left_alone": self.left_alone,
            "running": self.running,
            "effects_recorded": self.effects,
            "pause_when_now": self.pause_when_now,
            "lane": self.spec.lane,
            "concurrency": self.spec.concurrency,
            "rate": self.spec.rate,
            "max_failures": self.spec.max_failures,
            "pause_when": self.spec.pause_when,
            "pause_every": self.spec.pause_every_or_default,
            "force": self.spec.force,
            "resume": self.spec.resume,
            "with_checkpoint": self.with_checkpoint,
            "starts": self.starts,
            "clamped": self.clamped,
        }


def expected_runs(job: JobDef, spec: Spec,
                  owed: Owed | None = None) -> tuple[Expected, int, list[str] | None]:
    """The slot x partitions of ``spec``; the slot count; the partitions to store on the plan.
    With ``owed`` (the ledger's view of the job: :func:`owed_slots`), the slots the job owes
    by its schedule history where the ledger tracks it, and by its current definition before
    that; without, by its current definition alone."""
    if spec.range_from >= spec.range_to:
        raise OperatorError(f"--from ({spec.range_from.isoformat()}) must be before --to "
                            f"({spec.range_to.isoformat()})")
    static = list(job.partitions) if isinstance(job.partitions, tuple) else None
    wanted = list(dict.fromkeys(spec.partitions))
    if wanted:
        if job.partitions is None:
            raise OperatorError(f"job {job.name!r} is not partitioned: --partition does not apply")
        if static is not None:
            unknown = [p for p in wanted if p not in static]
            if unknown:
                raise OperatorError(f"job {job.name!r} has no partition {unknown[0]!r} "
                                    f"(its partitions: {', '.join(map(repr, static))})")
        stored: list[str] | None = wanted
    else:
        stored = static
    sched = job.schedule
    slots = sched.slots_between(spec.range_from - _EPSILON, spec.range_to - _EPSILON)
    if owed is not None:
        slots = [t for t in slots if t < owed.tracked_from] + [
            t for t in owed.slots if spec.range_from <= t < spec.range_to]
    if not slots:
        raise OperatorError(f"job {job.name!r} has no slot in [{spec.range_from.isoformat()}, "
                            f"{spec.range_to.isoformat()}); nothing to backfill")
    out = Expected()
    history = owed.partitions if owed is not None and not wanted else {}
    used: dict[str, None] = {}
    for slot in slots:
        if slot in history and history[slot] is not None:
            # the partitions the schedule history expects at this slot (issue 26: the current
            # definition's ran slot x partitions nobody expected before a partition change)
            keys = history[slot] or [""]
        elif stored is not None:
            keys = stored
        else:
            try:
                keys = job.partitions_for(slot)
            except Exception as exc:
                raise OperatorError(f"job {job.name!r}: partitions for slot {slot.isoformat()} raised "
                                    f"{type(exc).__name__}: {_first_line(exc)}") from None
        start, end = job.window_for(slot)
        business_date = sched.business_date(start)
        for key in keys:
            used[key] = None
            out.slots.append(slot)
            out.partition_keys.append(key)
            out.business_dates.append(business_date)
            out.window_starts.append(start)
            out.window_ends.append(end)
            out.idempotency_keys.append(idempotency_key(job.name, start, end, key, job.version))
        if len(out) > MAX_EXPECTED_RUNS:
            raise OperatorError(f"the range holds more than {MAX_EXPECTED_RUNS} slot x partitions: "
                                "split it into several backfills")
    if not out.slots:
        raise OperatorError(f"job {job.name!r} has no partition at any slot in "
                            f"[{spec.range_from.isoformat()}, {spec.range_to.isoformat()}) (its partitions "
                            "returned none); nothing to backfill")
    if history and stored is not None:
        stored = list(used)  # the plan adopts and forces the runs of every partition it planned
    return out, len(slots), stored


@dataclass
class Owed:
    """What the ledger says a job owes in a range (:func:`owed_slots`)."""

    tracked_from: datetime  # before it, the ledger expects nothing: the current definition's slots
    slots: list[datetime]  # from it: runner.expected_slots_v1's, paused ones included
    # each of those slots' static partitions by its history row ([] unpartitioned), None
    # where the row's partitions are dynamic (the job's partitions callable answers)
    partitions: dict[datetime, list[str] | None] = field(default_factory=dict)


def owed_slots(conn: psycopg.Connection[Any], job_name: str, spec: Spec, now: datetime) -> Owed | None:
    """The slots a backfill of ``spec`` covers where the ledger tracks the job: the ones its
    schedule history expects (runner.expected_slots_v1, the one definition of *expected*:
    history rows, tracked, not retired, due; a slot that fell due while the job was paused is
    owed too, and a backfill is how an operator catches it up). A backfill after a schedule
    change then runs the old schedule's slots, and their partitions, where the old schedule
    was in force (issue 26: with the current definition it ran slots nobody expected there
    and left the old ones listed by the gap scan after it completed; a partition change, runs
    of partitions the slot never had). None for a job the ledger does not know."""
    row = conn.execute(Q["track_from"], {"job_name": job_name}).fetchone()
    if row is None or row[0] is None:
        return None
    params = {"job_name": job_name, "range_from": spec.range_from, "range_to": spec.range_to, "now": now}
    found = conn.execute(Q["owed_slots"], params).fetchall()
    slots = [r[0].astimezone(UTC) for r in found]
    partitions = {slot: (None if dynamic else list(keys or []))
                  for slot, (_, keys, dynamic) in zip(slots, found, strict=True)}
    return Owed(tracked_from=row[0].astimezone(UTC), slots=slots, partitions=partitions)


def clamp_to_now(spec: Spec, now: datetime) -> tuple[Spec, bool]:
    """Only slots that are due: a range reaching past ``now`` (the database's clock) ends at
    it, [from, now) (a slot exactly at now is the live claim's); True when it was clamped. A
    range that starts at or after now has nothing due: refused."""
    if spec.range_from >= spec.range_to or spec.range_to <= now:
        return spec, False
    if spec.range_from >= now:
        raise OperatorError(f"--from ({spec.range_from.isoformat()}) is not before now ({now.isoformat()}): "
                            "no slot of the range is due yet; a backfill runs only slots that are due")
    return dataclasses.replace(spec, range_to=now), True


def plan(conn: psycopg.Connection[Any], job: JobDef, spec: Spec,
         prometheus_url: str | None = None, now: datetime | None = None) -> BackfillPlan:
    """What a backfill would touch (reads only: this is the dry run). ``prometheus_url``: where
    a Prometheus pause condition is asked (runner/worker/conditions.py). A range reaching past now
    (the database's clock, or ``now``) is clamped to it: the plan's ``clamped`` says so in one
    line, and its spec ends at now (issue 26, defect 1: a slot is never run before its
    instant; the later ones run at their time)."""
    if spec.concurrency < 1:
        raise OperatorError("--concurrency must be at least 1")
    if spec.rate is not None and not spec.rate > 0:
        raise OperatorError("--rate must be above 0 (runs per second)")
    if spec.max_failures is not None and spec.max_failures < 0:
        raise OperatorError("--max-failures must be 0 or more")
    if not spec.lane.strip():
        raise OperatorError("--lane must not be empty")
    known = ledger.all_lanes(conn)
    if lanes.plan_lane(spec.lane) not in known:
        raise OperatorError(f"unknown lane {spec.lane!r} (lanes: {', '.join(known)}; add one with "
                            "runner lane set)")
    pause_now = None
    if spec.pause_every is not None:
        if spec.pause_when is None:
            raise OperatorError("--pause-every needs a condition (--pause-when or "
                                "--pause-when-prometheus); nothing written")
        if not conditions.MIN_EVERY <= spec.pause_every <= conditions.MAX_EVERY:
            raise OperatorError(f"--pause-every must be between {conditions.MIN_EVERY} and "
                                f"{conditions.MAX_EVERY} seconds, got {spec.pause_every}")
    if spec.pause_when is not None:
        if not spec.pause_when.strip():
            raise OperatorError("--pause-when must not be empty")
        evaluated = conditions.evaluate_apart(conn, spec.pause_when, prometheus_url)
        if evaluated.error is not None:
            raise OperatorError(f"--pause-when: {evaluated.error}; nothing written")
        pause_now = evaluated.value
    asked_to = spec.range_to
    at = now or ledger.db_now(conn)
    spec, was_clamped = clamp_to_now(spec, at)
    expected, slot_count, stored = expected_runs(job, spec, owed_slots(conn, job.name, spec, at))
    clamped = None
    if was_clamped:
        clamped = (f"--to {asked_to.isoformat()} is after now: the range is clamped to "
                   f"[{spec.range_from.isoformat()}, {spec.range_to.isoformat()}), its last due slot "
                   f"{expected.slots[-1].isoformat()}; the later slots run at their time")
    params = {"job_name": job.name, **expected.keys()}
    states = {r["state"]: r["runs"] for r in ledger.dict_rows(conn, Q["impact"], params)}
    running = ledger.dict_rows(conn, Q["impact_running"], {**params, "limit": 20})
    starts = ledger.dict_rows(conn, Q["impact_starts"],
                              {**params, "force": spec.force, "limit": SHOWN_STARTS})
    with_checkpoint = starts[0]["with_checkpoint"] if starts else 0
    starts = [{**{k: v for k, v in r.items() if k != "with_checkpoint"},
               "starts": operate.starts(r, spec.resume)} for r in starts]
    effects = None
    if operate.column_exists(conn, "runner.effects", "run_id"):
        effects = {r["status"]: r["effects"] for r in ledger.dict_rows(conn, Q["impact_effects"], params)}
    return BackfillPlan(spec=spec, expected=expected, slot_count=slot_count, partitions=stored,
                        states=states, effects=effects, running=running, pause_when_now=pause_now,
                        clamped=clamped, starts=starts, with_checkpoint=with_checkpoint)


def create(conn: psycopg.Connection[Any], planned: BackfillPlan, reason: str, who: str | None = None,
           now: datetime | None = None) -> dict[str, Any]:
    """Write the plan, queue its runs and write its request row, in one transaction.
    Returns {"backfill": plan row, "request": ..., "inserted": n, "requeued": [...],
    "left_alone": n}."""
    reason = operate.checked_text(reason, "--reason")
    who = operate.checked_text(who or default_who(), "--by")
    spec = planned.spec
    with conn.transaction():
        [made] = operate.call_action(conn, Q["create_backfill"], {
            "job_name": spec.job_name, "range_from": spec.range_from, "range_to": spec.range_to,
            "partitions": planned.partitions, "lane": spec.lane, "concurrency": spec.concurrency,
            "rate": spec.rate, "max_failures": spec.max_failures, "pause_when": spec.pause_when,
            "pause_every": spec.pause_every, "force": spec.force, **planned.expected.columns(),
            "who": who, "reason": reason,
            "now": now, "resume": spec.resume,
        })
        row = _one(conn, "get_plan", {"plan_id": made["backfill_id"]})
        assert row is not None
        request = operate.get_request(conn, made["request_id"])
    requeued = [{**r, "schedule_slot": datetime.fromisoformat(r["schedule_slot"])} for r in made["requeued"]]
    left_alone = row["expected_runs"] - len(requeued) - made["inserted"]
    return {"backfill": row, "request": request, "inserted": made["inserted"], "requeued": requeued,
            "left_alone": left_alone}


# -- the lane -------------------------------------------------------------------------------


def run_once(conn: psycopg.Connection[Any], owner: Owner, jobs: Mapping[str, JobDef],
             limit: int | Mapping[str, int], now: datetime | None = None) -> list[ClaimedRun]:
    """One pass of the backfill lane over the running plans of ``jobs``: pause, complete,
    and claim runs: ``limit`` maps each lane this process serves to how many of its runs it
    may start now (its free handler slots; an int: that many, whatever the plan's lane). A
    plan in a lane not in the mapping is left to the processes that serve it. ``conn`` must
    be this process's lock session (autocommit): the runs claimed are locked on it. Returns
    the runs to start."""
    claimed: list[ClaimedRun] = []
    room = dict(limit) if not isinstance(limit, int) else None
    plans = ledger.dict_rows(conn, Q["lane_plans"], {})
    for p in plans:
        job = jobs.get(p["job_name"])
        if job is None:
            continue  # a job this process does not define: another runner's
        lane = lanes.plan_lane(p["lane"])
        if room is not None and lane not in room:
            continue  # a lane this process does not serve
        if room is None:
            assert isinstance(limit, int)
            free = limit - len(claimed)
        else:
            free = room[lane]
        try:
            before = len(claimed)
            completed = _plan_pass(conn, owner, job, p, free, now, claimed, lane)
            if room is not None:
                room[lane] -= len(claimed) - before
        except Exception as exc:
            if isinstance(exc, psycopg.OperationalError) or conn.closed or conn.broken:
                raise
            # one plan's trouble must not lose the runs already claimed for the others
            log.error("backfill %s: lane pass failed (%s: %s); trying again next pass", p["id"],
                      type(exc).__name__, _first_line(exc))
            continue
        if completed and job.verify is not None:
            _verify_in_background(conn, p["id"], job)
    return claimed


def _plan_pass(conn: psycopg.Connection[Any], owner: Owner, job: JobDef, p: dict[str, Any], limit: int,
               now: datetime | None, claimed: list[ClaimedRun], lane: str) -> bool:
    """One plan's turn, in one transaction under its advisory lock: pause it, complete it
    (returns True), or claim its next runs into ``claimed`` (within ``limit``, the plan's
    concurrency and rate, and its lane's fleet budget)."""
    with conn.transaction():
        got = _one(conn, "try_lock_plan", {"namespace": owner.namespace, "plan_id": p["id"]})
        if not (got and got["locked"]):
            return False  # another process is on it this pass
        state = _one(conn, "plan_state", {"plan_id": p["id"], "now": now})
        if state is None or state["status"] != "running":
            return False
        reason = _pause_reason(state)
        if reason is not None:
            _one(conn, "pause_plan", {"plan_id": p["id"], "reason": reason[:1000], "now": now})
            log.warning("backfill_paused plan=%s job=%s: %s", p["id"], job.name, reason)
            return False
        if state["unfinished"] == 0:
            return _finish_plan(conn, job, p["id"], now)
        if state["job_paused"]:
            return False
        room = min(limit, state["concurrency"] - state["running"])
        tokens = state["tokens"]
        if tokens is not None:
            room = min(room, math.floor(tokens + 1e-9))
        if room <= 0:
            return False
        rows = conn.execute(Q["claim_plan_runs"], {
            **owner.params(), "plan_id": p["id"], "replay_group_id": state["replay_group_id"],
            "limit": room, "tokens": tokens, "lane": lane, "now": now}).fetchall()
        claimed.extend(ledger.claimed_rows(rows)[1])
    return False


def _finish_plan(conn: psycopg.Connection[Any], job: JobDef, plan_id: int, now: datetime | None) -> bool:
    """A plan whose own runs are all finished: completed only when every run of its range is
    done (runner.plan_range_v1: it waits for an overlapping live plan's runs, adopts those an
    earlier plan left cancelled or dead, else pauses saying what is not done). True when it
    completed."""
    owed = _one(conn, "plan_range", {"plan_id": plan_id, "now": now})
    assert owed is not None
    if owed["foreign_unfinished"]:
        return False  # an overlapping plan is still running runs of this range
    if owed["adopted"]:
        log.info("backfill_adopted plan=%s job=%s: %s run(s) an earlier plan left undone", plan_id,
                 job.name, owed["adopted"])
        return False  # claimed from the next pass on
    if owed["not_done"]:
        states = ", ".join(f"{n} {s}" for s, n in sorted(owed["not_done_by_status"].items()))
        reason = (f"its runs are finished but {owed['not_done']} run(s) of its range are not done "
                  f"({states}): rerun or skip them (runner gaps lists them), then resume; or cancel")
        _one(conn, "pause_plan", {"plan_id": plan_id, "reason": reason[:1000], "now": now})
        log.warning("backfill_paused plan=%s job=%s: %s", plan_id, job.name, reason)
        return False
    _one(conn, "complete_plan", {"plan_id": plan_id, "verify": job.verify is not None, "now": now})
    log.info("backfill_completed plan=%s job=%s", plan_id, job.name)
    return True


def _pause_reason(state: dict[str, Any]) -> str | None:
    limit = state["max_failures"]
    if limit is not None and state["failures"] > limit:
        return (f"{state['failures']} failed or dead run(s), more than max_failures={limit}: "
                "look at them (runner backfill show), then resume (with a higher --max-failures) "
                "or cancel")
    return None


# -- verification ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    partition: str
    outcome: str  # passed | failed | error
    detail: str | None


def plan_window(job: JobDef, range_from: datetime, range_to: datetime) -> tuple[datetime, datetime]:
    """The window a plan covers: from the window start of its first slot to the window end
    of its last (by the job's current schedule)."""
    slots = job.schedule.slots_between(range_from - _EPSILON, range_to - _EPSILON)
    if not slots:
        return range_from, range_to
    return job.window_for(slots[0])[0], job.window_for(slots[-1])[1]


def verify(conn: psycopg.Connection[Any], plan_id: int, job: JobDef,
           now: datetime | None = None) -> dict[str, Any]:
    """Run the job's verify check over the plan's range, per partition, and record the
    outcome on the plan. Returns the recorded verify columns."""
    status, detail = run_checks(conn, plan_id, job)
    recorded = _record_verify(conn, plan_id, status, detail, now)
    log.info("backfill_verified plan=%s job=%s status=%s", plan_id, job.name, status)
    return recorded


def run_checks(conn: psycopg.Connection[Any], plan_id: int, job: JobDef) -> tuple[str, dict[str, Any]]:
    """The verify outcome of a plan (nothing recorded): its status and detail."""
    row = _one(conn, "get_plan", {"plan_id": plan_id})
    if row is None:
        raise OperatorError(f"no backfill {plan_id} (see `runner backfill list`)")
    if row["job_name"] != job.name:
        raise OperatorError(f"backfill {plan_id} is of job {row['job_name']!r}, not {job.name!r}")
    start, end = plan_window(job, row["range_from"], row["range_to"])
    detail: dict[str, Any] = {"window_start": start.isoformat(), "window_end": end.isoformat()}
    if job.verify is None:
        detail["checks"] = []
        return "not_configured", detail
    partitions = row["partitions"] or [
        r["partition_key"] for r in ledger.dict_rows(conn, Q["group_partitions"],
                                                     {"replay_group_id": row["replay_group_id"]})
    ] or [""]
    if isinstance(job.verify, tuple):  # verification kinds (runner/verification.py)
        assert job.min_passing is not None
        status, kinds_detail = verification.run(conn, plan_id, job.verify, job.min_passing, start, end,
                                                partitions)
        return status, {**detail, **kinds_detail}
    with verification.Session(conn, start, end) as session:
        checks = [_check(conn, session, job, start, end, p) for p in partitions]
    outcomes = {c.outcome for c in checks}
    status = "failed" if "failed" in outcomes else "error" if "error" in outcomes else "passed"
    detail["checks"] = [{"partition": c.partition, "outcome": c.outcome, "detail": c.detail}
                        for c in checks]
    return status, detail


def _record_verify(conn: psycopg.Connection[Any], plan_id: int, status: str, detail: dict[str, Any],
                   now: datetime | None) -> dict[str, Any]:
    recorded = _one(conn, "record_verify", {
        "plan_id": plan_id, "verify_status": status, "verify_detail": Jsonb(detail, dumps=_dumps),
        "now": now})
    assert recorded is not None
    return recorded


def reverify(conn: psycopg.Connection[Any], plan_id: int, job: JobDef, reason: str,
             who: str | None = None, now: datetime | None = None) -> dict[str, Any]:
    """Run a completed plan's verify check again (after its data was fixed, or when the
    process that completed it died before recording the outcome), and record the outcome
    with a request row, in one transaction. Returns {"backfill": verify columns, "request"}."""
    reason = operate.checked_text(reason, "--reason")
    who = operate.checked_text(who or default_who(), "--by")
    row = _one(conn, "get_plan", {"plan_id": plan_id})
    if row is None:
        raise OperatorError(f"no backfill {plan_id} (see `runner backfill list`)")
    if row["status"] != "completed":
        raise OperatorError(f"backfill {plan_id} is {row['status']}: only a completed plan is verified; "
                            "nothing written")
    status, detail = run_checks(conn, plan_id, job)
    with conn.transaction():
        request_id = _one_action(conn, "record_backfill_verify", {
            "plan_id": plan_id, "verify_status": status, "verify_detail": Jsonb(detail, dumps=_dumps),
            "who": who, "reason": reason, "now": now})
        plan_row = _one(conn, "get_plan", {"plan_id": plan_id})
        assert plan_row is not None
        request = operate.get_request(conn, request_id)
    recorded = {k: plan_row[k] for k in ("id", "verify_status", "verify_detail", "verified_at")}
    log.info("backfill_verified plan=%s job=%s status=%s (again, request %s)", plan_id, job.name,
             status, request["id"])
    return {"backfill": recorded, "request": request}


def _check(conn: psycopg.Connection[Any], session: verification.Session, job: JobDef, start: datetime,
           end: datetime, partition: str) -> Check:
    """The job's single check in one partition. SQL runs as verification kinds' SQL does
    (runner/verification.py: as the condition role, on a connection of its own)."""
    check = job.verify
    try:
        if isinstance(check, str):
            source = verification.Source(sql=check, positional=verification.positional(
                check, ("window_start", "window_end", "partition")))
            found, more = session.rows(source, partition, 1, VERIFY_TIMEOUT_SECONDS)
            if more or len(found) != 1 or not found[0]:
                many = "more than one" if more else "no"
                return Check(partition, "error", f"the SQL check returned {many} row, not one")
            first = found[0]
            if not isinstance(first[0], bool):
                return Check(partition, "error",
                             f"the SQL check's first column is {type(first[0]).__name__}, not a boolean")
            text = None if len(first) < 2 or first[1] is None else str(first[1])
            return Check(partition, "passed" if first[0] else "failed", text)
        assert callable(check)
        fn = check
        value = session.python(lambda own: fn(own, start, end, partition), VERIFY_TIMEOUT_SECONDS,
                               f"the verify callable {getattr(fn, '__qualname__', type(fn).__name__)}")
        return _outcome(partition, value)
    except Exception as exc:
        if conn.closed or conn.broken:
            raise
        if isinstance(exc, verification.VerificationError | verification.KindFailed):
            return Check(partition, "error", str(exc)[:1000])
        return Check(partition, "error", f"{type(exc).__name__}: {_first_line(exc)}"[:1000])


def _outcome(partition: str, value: object) -> Check:
    if isinstance(value, bool):
        return Check(partition, "passed" if value else "failed", None)
    if isinstance(value, str):  # a string says what is wrong
        return Check(partition, "failed", value)
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], bool):
        return Check(partition, "passed" if value[0] else "failed",
                     None if value[1] is None else str(value[1]))
    return Check(partition, "error",
                 f"verify returned {type(value).__name__}; expected bool, str or (bool, str)")


def _verify_in_background(conn: psycopg.Connection[Any], plan_id: int, job: JobDef) -> None:
    """Run ``verify`` on its own connection and thread, so the loop is never held up by it.
    If this process dies first, the plan stays unverified: `runner backfill verify ID`."""
    info = conn.info
    dsn, password = info.dsn, info.password

    def work() -> None:
        try:
            with psycopg.connect(dsn, password=password or None, autocommit=True,
                                 application_name="runner-verify") as own:
                own.execute("SET TIME ZONE 'UTC'")
                verify(own, plan_id, job)
        except Exception as exc:  # e.g. the database went away: the plan shows unverified
            log.error("backfill %s: verification failed: %s: %s (run `runner backfill verify %s`)",
                      plan_id, type(exc).__name__, _first_line(exc), plan_id)

    threading.Thread(target=work, name=f"runner-verify-{plan_id}", daemon=True).start()


# -- the operator's view and actions ---------------------------------------------------------


def list_plans(conn: psycopg.Connection[Any], job_name: str | None = None,
               statuses: Sequence[str] | None = None, limit: int = 50) -> list[dict[str, Any]]:
    return ledger.dict_rows(conn, Q["list_plans"], {
        "job_name": job_name, "statuses": list(statuses) if statuses else None, "limit": limit})


@dataclass(frozen=True)
class Progress:
    plan: dict[str, Any]
    counts: dict[str, int]  # the group's runs by status
    failures: list[dict[str, Any]]  # the newest failed and dead runs

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def done(self) -> int:
        return self.total - sum(self.counts.get(s, 0) for s in ("pending", "running", "failed"))

    @property
    def verified(self) -> bool:
        return bool(self.plan["verify_status"] == "passed")

    def as_dict(self) -> dict[str, Any]:
        return {**self.plan, "runs_by_status": self.counts, "runs": self.total, "done": self.done,
                "verified": self.verified, "recent_failures": self.failures}


def show(conn: psycopg.Connection[Any], plan_id: int) -> Progress:
    row = _one(conn, "get_plan", {"plan_id": plan_id})
    if row is None:
        raise OperatorError(f"no backfill {plan_id} (see `runner backfill list`)")
    group = {"replay_group_id": row["replay_group_id"]}
    counts = {r["status"]: r["runs"] for r in ledger.dict_rows(conn, Q["group_counts"], group)}
    failures = ledger.dict_rows(conn, Q["group_failures"], {**group, "limit": 10})
    return Progress(plan=row, counts=counts, failures=failures)


def _one_action(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> Any:
    """Call one plan action function (sql/functions/backfill_actions_v1.sql); its value (the
    request's id)."""
    [row] = operate.call_action(conn, Q[name], params)
    return row["request_id"]


def _checked(reason: str, who: str | None) -> tuple[str, str]:
    return operate.checked_text(reason, "--reason"), operate.checked_text(who or default_who(), "--by")


def pause(conn: psycopg.Connection[Any], plan_id: int, reason: str, who: str | None = None,
          now: datetime | None = None) -> dict[str, Any]:
    """Pause a running plan: its queued runs wait; runs in flight finish."""
    reason, who = _checked(reason, who)
    with conn.transaction():
        request_id = _one_action(conn, "pause_backfill", {
            "plan_id": plan_id, "who": who, "reason": reason, "now": now})
        changed = _one(conn, "get_plan", {"plan_id": plan_id})
        request = operate.get_request(conn, request_id)
    assert changed is not None
    keep = ("id", "status", "pause_reason", "paused_at")
    return {"backfill": {k: changed[k] for k in keep}, "request": request}


def resume(conn: psycopg.Connection[Any], plan_id: int, reason: str, who: str | None = None,
           max_failures: int | None = None, set_max_failures: bool = False,
           now: datetime | None = None) -> dict[str, Any]:
    """Resume a paused plan (optionally with another failure threshold)."""
    reason, who = _checked(reason, who)
    if set_max_failures and max_failures is not None and max_failures < 0:
        raise OperatorError("--max-failures must be 0 or more")
    with conn.transaction():
        request_id = _one_action(conn, "resume_backfill", {
            "plan_id": plan_id, "who": who, "reason": reason, "max_failures": max_failures,
            "set_max_failures": set_max_failures, "now": now})
        changed = _one(conn, "get_plan", {"plan_id": plan_id})
        request = operate.get_request(conn, request_id)
    assert changed is not None
    return {"backfill": {k: changed[k] for k in ("id", "status", "max_failures")}, "request": request}


def cancel(conn: psycopg.Connection[Any], plan_id: int, reason: str, who: str | None = None,
           now: datetime | None = None) -> dict[str, Any]:
    """Cancel a plan: its runs not yet started (pending, or waiting for a retry) become
    cancelled, with the reason; runs in flight finish."""
    reason, who = _checked(reason, who)
    with conn.transaction():
        [done] = operate.call_action(conn, Q["cancel_backfill"], {
            "plan_id": plan_id, "who": who, "reason": reason, "now": now})
        changed = _one(conn, "get_plan", {"plan_id": plan_id})
        request = operate.get_request(conn, done["request_id"])
    assert changed is not None
    return {"backfill": {k: changed[k] for k in ("id", "status", "finished_at")}, "request": request,
            "runs_cancelled": done["runs_cancelled"]}
