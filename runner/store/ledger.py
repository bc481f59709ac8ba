"""Every database call of the runner's loop, on the named statements of
``sql/queries/ledger.sql``. Nothing here decides anything: it turns Python values into the
parameters of one statement and its rows back into Python values.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, NamedTuple
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from runner.errors import JobRetired
from runner.model.jobs import JobDef, Retention
from runner.sqlfiles import queries

Q = queries("ledger")
TQ = queries("takeover")


@dataclass(frozen=True)
class Owner:
    """Who runs attempts: this process, identified in every attempt row."""

    instance: UUID
    host: str
    pid: int
    namespace: int

    @classmethod
    def here(cls, instance: UUID, namespace: int) -> Owner:
        return cls(instance=instance, host=socket.gethostname(), pid=os.getpid(), namespace=namespace)

    def params(self) -> dict[str, Any]:
        return {"instance": self.instance, "host": self.host, "pid": self.pid, "namespace": self.namespace}


class SlotClaim(NamedTuple):
    """One slot x partition this process wants to turn into a run.

    SlotClaim, ClaimedRun and Outcome are made for every run (tens of thousands at one slot
    instant): immutable named tuples, built in a fifth of a frozen dataclass's time (whose
    ``__init__`` sets each field through ``object.__setattr__``)."""

    job_name: str
    slot: datetime
    partition_key: str
    business_date: date
    window_start: datetime
    window_end: datetime
    idempotency_key: str
    overlap: str = "allow"
    lane: str = "realtime"  # the job's lane (revision 0011_lanes): recorded on the run


class ClaimedRun(NamedTuple):
    """A run this process now owns (or failed to lock, when ``locked`` is false)."""

    id: int
    job_name: str
    slot: datetime
    partition_key: str
    business_date: date
    window_start: datetime
    window_end: datetime
    trigger: str
    attempt: int
    fence: int
    idempotency_key: str
    uncounted_attempts: int
    locked: bool
    lane: str = "realtime"  # the lane the run belongs to (runner/worker/lanes.py)

    @property
    def counted_attempts(self) -> int:
        """Attempts that count against the job's max_attempts (not the ones released at
        shutdown or preceding a manual rerun)."""
        return self.attempt - self.uncounted_attempts


class Outcome(NamedTuple):
    """The end of one attempt, as the one writer of outcomes records it."""

    run_id: int
    fence: int
    status: str  # succeeded | failed | dead | released
    attempt_status: str | None = None  # when it differs from status: timed_out, released
    error_class: str | None = None
    error_message: str | None = None
    retry_delay: float | None = None  # seconds, for status 'failed' (and 'released': due then)
    processed: int | None = None
    failed: int | None = None
    # a failed attempt's redacted, bounded traceback and the handler's last ctx.heartbeat()
    # (runner/worker/attempt.py: failure); kept on the attempt row only (revision 0008_watch)
    traceback: str | None = None
    last_heartbeat: dict[str, Any] | None = None


def db_now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute(Q["db_now"]).fetchone()
    assert row is not None
    value: datetime = _utc(row[0])
    return value


@dataclass(frozen=True)
class Clock:
    """The server's clock and the ledger's: on a replica that lags, the ledger is as of its
    last replayed commit (runner.ledger_now_v1), earlier than the server's now."""

    db_now: datetime
    as_of: datetime
    replica: bool

    @property
    def replay_lag(self) -> float:
        """Seconds the ledger is behind the server's clock (0 on a primary)."""
        return max(0.0, (self.db_now - self.as_of).total_seconds())


def ledger_clock(conn: psycopg.Connection[Any]) -> Clock:
    row = conn.execute(Q["ledger_clock"]).fetchone()
    assert row is not None
    return Clock(db_now=_utc(row[0]), as_of=_utc(row[1]), replica=bool(row[2]))


def ledger_copy(conn: psycopg.Connection[Any]) -> str | None:
    """Why this ledger is an unadopted copy of another (runner.ledger_copy_v1), or None."""
    row = conn.execute(Q["ledger_copy"]).fetchone()
    return str(row[1]) if row is not None and row[0] else None


@dataclass(frozen=True)
class Definition:
    """What ``runner.sync_schedule_v1`` answered for one job's schedule (runner/worker/history.py):
    this definition's fingerprint and label, the fingerprint the history holds now, whether
    this call appended it (and from when), and the live runners holding another definition
    when it was not written."""

    job_name: str
    fingerprint: str
    label: str
    current: str
    appended: bool
    valid_from: datetime | None
    held_by: str | None

    @property
    def in_force(self) -> bool:
        return self.fingerprint == self.current

    def recorded(self) -> dict[str, str]:
        """As runner.instances.definitions keeps it."""
        return {"fingerprint": self.fingerprint, "schedule": self.label}


def schedule_params(job: JobDef) -> dict[str, Any]:
    """The columns of a job's schedule definition (runner.jobs, runner.job_schedules)."""
    sched = job.schedule
    return {
        "job_name": job.name,
        "schedule_kind": sched.kind,
        "cron": sched.cron,
        "every_interval": sched.every,
        "timezone": sched.timezone,
        "partitions": list(job.partitions) if isinstance(job.partitions, tuple) else None,
        "dynamic_partitions": job.dynamic_partitions,
    }


def sync_schedule(conn: psycopg.Connection[Any], job: JobDef, instance: UUID | None = None,
                  reassert: bool = False, fresh_for: float = 15.0,
                  now: datetime | None = None) -> Definition | None:
    """One call of ``runner.sync_schedule_v1`` (runner/worker/history.py); None when the job is gone
    or retired."""
    row = conn.execute(Q["sync_schedule"], {**schedule_params(job), "instance": instance,
                                            "reassert": reassert, "fresh_for": fresh_for,
                                            "now": now}).fetchone()
    if row is None:
        return None
    return Definition(job.name, row[0], row[1], row[2], bool(row[3]), _utc(row[4]), row[5])


def definitions_behind(conn: psycopg.Connection[Any], instance: UUID) -> list[str]:
    """The jobs whose definition this runner runs is not the one its history holds now."""
    return [r[0] for r in conn.execute(Q["definitions_behind"], {"instance": instance}).fetchall()]


def sync_jobs(conn: psycopg.Connection[Any], jobs: Sequence[JobDef],
              now: datetime | None = None,
              retention_default: Retention | None = None,
              instance: UUID | None = None,
              definitions: dict[str, Definition] | None = None,
              fresh_for: float = 15.0) -> dict[str, datetime]:
    """Write the definitions into runner.jobs (and their schedule history), one transaction.
    Returns each job's tracked-range start (``track_from``). A job of ``jobs`` that an
    operator retired (runner retire) raises ``JobRetired`` and nothing is written. A job
    without ``retention=`` gets ``retention_default`` (None: never pruned).

    The schedule history is written by ``runner.sync_schedule_v1`` (runner/worker/history.py: a
    definition is appended only when no live runner runs the one the history holds);
    ``definitions``, when given, receives its answer for each job (``instance``: the runner
    starting, which is not yet registered)."""
    tracked: dict[str, datetime] = {}
    with conn.transaction():
        _refuse_retired(conn, jobs)  # before anything is written (the transaction writes nothing)
        for job in sorted(jobs, key=lambda j: j.name):  # a fixed order: no deadlock between syncers
            options = {
                "owner": job.owner,
                "paused_in_code": job.paused,
                "backoff": {
                    "base": job.backoff.base.total_seconds(),
                    "factor": job.backoff.factor,
                    "cap": job.backoff.cap.total_seconds(),
                    "jitter": job.backoff.jitter,
                },
                "permanent": [f"{t.__module__}.{t.__qualname__}" for t in job.permanent],
                "lease_seconds": job.lease.total_seconds(),
                "misfire": job.misfire,
                "grace_seconds": job.grace.total_seconds(),
                "max_catch_up": job.max_catch_up,
                "max_catch_up_age_seconds": (job.max_catch_up_age.total_seconds()
                                             if job.max_catch_up_age else None),
                "timeout_seconds": job.timeout.total_seconds() if job.timeout else None,
                "stale_after_seconds": job.stale_after.total_seconds() if job.stale_after else None,
                # shown on the console's job page (its definition as the ledger holds it)
                "overlap": job.overlap,
                "lane": job.lane,
            }
            keep = job.retention or retention_default
            if keep is not None:  # applied by runner.prune_v1 (sql/functions/prune_v1.sql)
                options["retention"] = keep.as_options()
            if job.misfire_tiers is not None:  # applied by runner/worker/misfire.py, runner.tier_backfill_v1
                options["misfire_tiers"] = job.misfire_tiers.as_options()
            params = {
                **schedule_params(job),
                "max_attempts": job.max_attempts,
                "version": job.version,
                "options": Jsonb(options, dumps=lambda o: json.dumps(o, sort_keys=True)),
                "paused": job.paused,
                "track_from": job.track_from,
                "now": now,
            }
            row = conn.execute(Q["sync_job"], params).fetchone()
            if row is None:  # retired while this sync waited for its row: refused, rolled back
                _refuse_retired(conn, [job])
            assert row is not None
            tracked[job.name] = _utc(row[2])
            answer = sync_schedule(conn, job, instance, fresh_for=fresh_for, now=now)
            if answer is not None and definitions is not None:
                definitions[job.name] = answer
    return tracked


def _refuse_retired(conn: psycopg.Connection[Any], jobs: Sequence[JobDef]) -> None:
    """Raise JobRetired when an operator retired one of ``jobs`` (runner retire)."""
    retired = conn.execute(Q["retired_jobs"], {"job_names": [j.name for j in jobs]}).fetchall()
    if retired:
        name, when = retired[0]
        raise JobRetired(
            f"job {name!r} was retired at {_utc(when).isoformat()} (runner retire) and is back in "
            f"the code: remove it, or run `runner unretire {name} --reason ...` first"
            + (f" (and {len(retired) - 1} more retired job(s))" if len(retired) > 1 else ""))


def schedules_since(conn: psycopg.Connection[Any], job_names: Sequence[str]) -> dict[str, datetime]:
    """Since when each job's current schedule is in force (runner.job_schedules)."""
    rows = conn.execute(Q["schedules_since"], {"job_names": list(job_names)}).fetchall()
    return {r[0]: _utc(r[1]) for r in rows}


def owed_since(conn: psycopg.Connection[Any], job_names: Sequence[str]) -> dict[str, datetime]:
    """Where each job's newest span of owed time starts (runner.expected_spans_v1): after its
    last unretirement, its last resume, or its track_from."""
    rows = conn.execute(Q["owed_since"], {"job_names": list(job_names)}).fetchall()
    return {r[0]: _utc(r[1]) for r in rows if r[1] is not None}


def paused_jobs(conn: psycopg.Connection[Any], job_names: Sequence[str]) -> set[str]:
    rows = conn.execute(Q["paused_jobs"], {"job_names": list(job_names)}).fetchall()
    return {r[0] for r in rows}


def _utc(value: Any) -> Any:
    """Timestamps as aware UTC datetimes, whatever the session's TimeZone setting."""
    return value.astimezone(UTC) if isinstance(value, datetime) else value


def claimed_rows(rows: list[tuple[Any, ...]]) -> tuple[datetime, list[ClaimedRun]]:
    """The runs whose new attempt runner.start_attempts_v1 started (rows: db_now, the run's
    columns, locked, outcome); runs it sent dead instead are left out (see ``dead_rows``)."""
    now: datetime = _utc(rows[0][0])
    runs = [ClaimedRun(*map(_utc, row[1:14]), **({"lane": row[15]} if len(row) > 15 and row[15] else {}))
            for row in rows if row[1] is not None and row[14] == "started"]
    return now, runs


def dead_rows(rows: list[tuple[Any, ...]]) -> list[int]:
    """The runs runner.start_attempts_v1 sent dead (out of attempts) instead of starting."""
    return [row[1] for row in rows if row[1] is not None and row[14] == "dead"]


def claim_slots(
    conn: psycopg.Connection[Any], owner: Owner, claims: Sequence[SlotClaim], now: datetime | None = None
) -> tuple[datetime, list[ClaimedRun]]:
    """Claim many slot x partitions in one statement; returns the database clock and the
    runs this process won."""
    db_now, runs, _ = claim_slots_waiting(conn, owner, claims, now)
    return db_now, runs


def claim_slots_waiting(
    conn: psycopg.Connection[Any], owner: Owner, claims: Sequence[SlotClaim], now: datetime | None = None
) -> tuple[datetime, list[ClaimedRun], set[tuple[str, datetime, str]]]:
    """``claim_slots``, also returning the (job, slot, partition) rows left waiting for an
    earlier slot of the same job and partition (overlap='wait').

    The rows travel as two JSON documents (per job x slot, then per partition), and only the
    won rows' positions and run ids come back: this statement runs for every scheduled run,
    and one parameter per column would cost more to build than the insert costs to run."""
    groups: list[list[Any]] = []
    index: dict[tuple[Any, ...], int] = {}
    rows: list[list[Any]] = []
    last: SlotClaim | None = None
    gi = -1
    for c in claims:
        if last is None or not (c.slot is last.slot and c.job_name is last.job_name
                                and c.window_start is last.window_start and c.window_end is last.window_end
                                and c.business_date is last.business_date and c.overlap is last.overlap
                                and c.lane is last.lane):
            key = (c.job_name, c.slot, c.business_date, c.window_start, c.window_end, c.overlap, c.lane)
            gi = index.get(key, -1)
            if gi < 0:
                gi = index[key] = len(groups)
                groups.append([c.job_name, c.slot.isoformat(), c.business_date.isoformat(),
                               c.window_start.isoformat(), c.window_end.isoformat(), c.overlap, c.lane])
            last = c
        rows.append([gi, c.partition_key, c.idempotency_key])
    params = {**owner.params(), "now": now, "groups": json.dumps(groups), "rows": json.dumps(rows)}
    result = conn.execute(Q["claim_slots"], params).fetchall()
    db_now: datetime = _utc(result[0][0])
    runs = []
    for _, n, run_id, locked, _ in result:
        if run_id is not None:
            c = claims[n - 1]
            runs.append(ClaimedRun(run_id, c.job_name, c.slot, c.partition_key, c.business_date,
                                   c.window_start, c.window_end, "schedule", 1, 1, c.idempotency_key,
                                   0, locked, c.lane))
    waiting_at = result[0][4] or ()
    waiting = {(claims[n - 1].job_name, claims[n - 1].slot, claims[n - 1].partition_key) for n in waiting_at}
    return db_now, runs, waiting


def id_array(ids: Sequence[int]) -> str:
    """Integers as one PostgreSQL array literal (a single text parameter, cast in SQL)."""
    return "{" + ",".join(str(int(i)) for i in ids) + "}"


def claim_due_runs(
    conn: psycopg.Connection[Any], owner: Owner, job_names: Sequence[str], limit: int | Mapping[str, int],
    now: datetime | None = None,
) -> tuple[datetime, list[ClaimedRun]]:
    """Start the next attempt of runs that wait for one (retries, queued runs), lane by lane:
    ``limit`` maps each lane to claim from to its free handler slots here (an int: that many
    in every known lane), within each lane's fleet budget (sql/queries/ledger.sql)."""
    if isinstance(limit, int):
        limits = {lane: limit for lane in all_lanes(conn)}
    else:
        limits = {lane: n for lane, n in limit.items() if n > 0}
    params = {**owner.params(), "now": now, "job_names": list(job_names),
              "lanes": list(limits), "limits": list(limits.values())}
    return claimed_rows(conn.execute(Q["claim_due_runs"], params).fetchall())


def all_lanes(conn: psycopg.Connection[Any]) -> list[str]:
    """Every lane in runner.lanes, by priority (rank)."""
    return [row[0] for row in conn.execute(Q["all_lanes"]).fetchall()]


def finish_attempts(
    conn: psycopg.Connection[Any], outcomes: Sequence[Outcome], now: datetime | None = None
) -> dict[tuple[int, int], bool]:
    """Record outcomes (fence-checked); returns (run id, fence) -> whether the outcome
    landed. Keyed by fence too: a stale outcome and the current one of the same run may
    share a batch, and only the current one lands."""
    if not outcomes:
        return {}
    params = _finish_params(outcomes, now)
    return {(row[0], row[1]): row[2] for row in conn.execute(Q["finish_attempts"], params).fetchall()}


async def finish_attempts_async(
    conn: psycopg.AsyncConnection[Any], outcomes: Sequence[Outcome], now: datetime | None = None
) -> dict[tuple[int, int], bool]:
    """``finish_attempts`` on an AsyncConnection (an async handler's ``ctx.db``)."""
    if not outcomes:
        return {}
    cur = await conn.execute(Q["finish_attempts"], _finish_params(outcomes, now))
    return {(row[0], row[1]): row[2] for row in await cur.fetchall()}


def _finish_params(outcomes: Sequence[Outcome], now: datetime | None) -> dict[str, Any]:
    return {"now": now, "outcomes": json.dumps([
        [o.run_id, o.fence, o.status, o.attempt_status, o.error_class, o.error_message, o.retry_delay,
         o.processed, o.failed, o.traceback, o.last_heartbeat] for o in outcomes], default=str)}


def unlock_runs(conn: psycopg.Connection[Any], namespace: int, run_ids: Sequence[int]) -> None:
    if run_ids:
        conn.execute(Q["unlock_runs"], {"namespace": namespace, "run_ids": id_array(run_ids)}).fetchall()


def key_holder(conn: psycopg.Connection[Any], namespace: int, run_id: int,
               fence: int) -> tuple[bool, bool, int]:
    """An attempt started while another session held its run's key: whether this session
    took the key now (its holder let go), else whether a registered runner session holds it,
    and how many of the run's attempts just before this one were released for that already,
    in a row (runner/worker/executor.py ``Executor._key_held``)."""
    row = conn.execute(Q["key_holder"], {"namespace": namespace, "run_id": run_id, "fence": fence}).fetchone()
    return (bool(row[0]), bool(row[1]), int(row[2])) if row else (False, False, 0)


def run_is_current(conn: psycopg.Connection[Any], run_id: int, fence: int) -> bool:
    """Whether the run is still running at ``fence`` (read after taking its key)."""
    row = conn.execute(Q["run_is_current"], {"run_id": run_id, "fence": fence}).fetchone()
    return bool(row and row[0])


def heartbeat_attempt(
    conn: psycopg.Connection[Any], run_id: int, fence: int, processed: int | None,
    failed: int | None, now: datetime | None = None,
) -> bool:
    row = conn.execute(
        Q["heartbeat_attempt"],
        {"run_id": run_id, "fence": fence, "processed": processed, "failed": failed, "now": now},
    ).fetchone()
    return row is not None


async def heartbeat_attempt_async(
    conn: psycopg.AsyncConnection[Any], run_id: int, fence: int, processed: int | None,
    failed: int | None, now: datetime | None = None,
) -> bool:
    """``heartbeat_attempt`` on an AsyncConnection (an async handler's heartbeat)."""
    cur = await conn.execute(
        Q["heartbeat_attempt"],
        {"run_id": run_id, "fence": fence, "processed": processed, "failed": failed, "now": now},
    )
    return await cur.fetchone() is not None


def heartbeat_attempts(conn: psycopg.Connection[Any], owner: Owner, run_ids: Sequence[int]) -> None:
    """One liveness beat for every attempt this process is running."""
    if run_ids:
        conn.execute(Q["heartbeat_attempts"], {"instance": owner.instance, "run_ids": id_array(run_ids),
                                               "now": None})


def relock_runs(conn: psycopg.Connection[Any], namespace: int,
                runs: Sequence[tuple[int, int]]) -> set[tuple[int, int]]:
    """Lock again, on a new lock session, the runs (id, fence) still owned at that fence;
    returns those (id, fence), each locked once."""
    if not runs:
        return set()
    rows = conn.execute(TQ["relock_runs"], {
        "namespace": namespace, "run_ids": [r[0] for r in runs], "fences": [r[1] for r in runs],
    }).fetchall()
    return {(r[0], r[1]) for r in rows}


def register_instance(conn: psycopg.Connection[Any], owner: Owner, runner_version: str,
                      jobs: Sequence[str] = (),
                      definitions: Mapping[str, Definition] | None = None,
                      lanes: Mapping[str, int] | None = None) -> None:
    recorded = {name: d.recorded() for name, d in (definitions or {}).items()}
    conn.execute(Q["register_instance"], {**owner.params(), "runner_version": runner_version,
                                          "jobs": list(jobs), "definitions": Jsonb(recorded),
                                          "lanes": Jsonb(dict(lanes)) if lanes is not None else None})


def live_instances(conn: psycopg.Connection[Any], namespace: int,
                   fresh_for: float) -> list[tuple[UUID, list[str]]]:
    """Live runner processes of this lock namespace (heartbeat within ``fresh_for`` seconds),
    ordered by instance id, with the jobs each serves."""
    rows = conn.execute(Q["live_instances"], {"namespace": namespace, "fresh_for": fresh_for}).fetchall()
    return [(r[0], list(r[1])) for r in rows]


def unclaimed_rows(conn: psycopg.Connection[Any], claims: Sequence[SlotClaim]) -> set[int]:
    """Of the given claims, the indexes (0-based) of those whose slot x partition has no run
    (each job and slot sent once: a slot's rows are tens of thousands at a wide instant)."""
    if not claims:
        return set()
    index: dict[tuple[str, datetime], int] = {}
    groups: list[list[str]] = []
    rows: list[list[Any]] = []
    for c in claims:
        gi = index.get((c.job_name, c.slot))
        if gi is None:
            gi = index[c.job_name, c.slot] = len(groups)
            groups.append([c.job_name, c.slot.isoformat()])
        rows.append([gi, c.partition_key])
    result = conn.execute(Q["unclaimed_rows"], {"groups": json.dumps(groups), "rows": json.dumps(rows)})
    return {row[0] - 1 for row in result.fetchall()}


def heartbeat_instance(conn: psycopg.Connection[Any], owner: Owner) -> None:
    conn.execute(Q["heartbeat_instance"], {"instance": owner.instance})


def stop_instance(conn: psycopg.Connection[Any], owner: Owner) -> None:
    conn.execute(Q["stop_instance"], {"instance": owner.instance})


@dataclass(frozen=True)
class HungOwner:
    holder_pid: int
    run_id: int
    heartbeat_at: datetime
    terminated: bool


def end_hung_owners(conn: psycopg.Connection[Any], job_names: Sequence[str], default_lease: float,
                    now: datetime | None = None, lock_pid: int | None = None) -> list[HungOwner]:
    """End the sessions of hung owners (sql/queries/takeover.sql); ``lock_pid``, a session of
    the caller's never judged (its lock session, when ``conn`` is another)."""
    rows = conn.execute(TQ["end_hung_owners"], {
        "job_names": list(job_names), "default_lease": default_lease, "now": now,
        "lock_pid": lock_pid}).fetchall()
    return [HungOwner(r[0], r[1], _utc(r[2]), bool(r[3])) for r in rows]


@dataclass(frozen=True)
class Squatter:
    """A session holding advisory keys of the runner's namespace that is not a registered
    runner session (sql/queries/takeover.sql ``squatters``)."""

    pid: int
    run_ids: list[int]
    user: str | None
    application: str | None


def squatters(conn: psycopg.Connection[Any], namespace: int) -> list[Squatter]:
    rows = conn.execute(TQ["squatters"], {"namespace": namespace}).fetchall()
    return [Squatter(r[0], list(r[1]), r[2], r[3]) for r in rows]


def take_over_orphans(
    conn: psycopg.Connection[Any], owner: Owner, job_names: Sequence[str],
    limit: int | Mapping[str, int], now: datetime | None = None,
) -> tuple[list[ClaimedRun], list[int]]:
    """Take over running runs whose lock nobody holds: ``limit`` maps each lane to take
    from to at most how many of its runs (a run of a lane not in it is left alone); an
    int: any lane, that many in all. Returns the runs taken (locked on this session), and
    the ids of those that went dead instead because they were out of attempts (also locked
    on this session: the caller releases them)."""
    if isinstance(limit, int):
        lanes, limits, total = None, None, limit
    else:
        wanted = {lane: n for lane, n in limit.items() if n > 0}
        lanes, limits, total = list(wanted), list(wanted.values()), sum(wanted.values())
    if total <= 0:
        return [], []
    rows = conn.execute(TQ["take_over_orphans"], {
        **owner.params(), "job_names": list(job_names), "now": now, "lanes": lanes,
        "limits": limits, "limit": total}).fetchall()
    return claimed_rows(rows)[1], dead_rows(rows)


def dict_rows(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def record_fanout(conn: psycopg.Connection[Any], job_name: str, slot: datetime,
                  partitions: Sequence[str], error: str | None = None) -> tuple[list[str], str | None]:
    """Record the partitions ``job_name`` expects at ``slot`` (or the error that kept them
    from being computed); the first set recorded wins. Returns the set in force and its error."""
    params = {"job_name": job_name, "slot": slot, "partitions": list(partitions), "error": error}
    row = conn.execute(Q["record_fanout"], params).fetchone()
    if row is None:  # another runner's insert committed after this statement's snapshot
        row = conn.execute(Q["fanout_of"], params).fetchone()
    if row is None:
        return list(partitions), error
    return list(row[0]), row[1]


def fanout_of(conn: psycopg.Connection[Any], job_name: str,
              slot: datetime) -> tuple[list[str], str | None] | None:
    """The recorded partitions (and error) of a job's slot, or None when none was recorded."""
    row = conn.execute(Q["fanout_of"], {"job_name": job_name, "slot": slot}).fetchone()
    return None if row is None else (list(row[0]), row[1])
