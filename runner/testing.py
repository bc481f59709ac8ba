"""Testing one's own jobs: run one job for one slot now, and a throwaway migrated database.

``run_once(app, job, slot, database_url, partition=...)`` runs the job's handler for that slot
and partition through the runner's real path, without a scheduler and without waiting for a
clock: the slot's fan-out (runner/worker/fanout.py), the claim statement (the run row, its first
attempt, its advisory lock), the attempt (runner/worker/attempt.py: ``execute``, or
``execute_async`` for an ``async def`` handler, with ``ctx.db`` committed with the success),
the fence-checked outcome (``finish_attempts``). It returns the run as recorded
(``RunRecord``: status, attempt, last error, and every attempt). With ``attempts=N`` a
failed run's retries follow at once, up to N attempts in all (backoff not waited for;
``max_attempts`` applies, so the run may end ``dead``). Called again for the same slot and
partition, it starts the next attempt of a pending or failed run.

What it leaves out: the job's ``timeout`` (the loop enforces it: test one with
``app.running``), misfire decisions (any slot up to now is run, late or not) and overlap.
The slot must be one of the job's schedule and not in the future (database clock).

``fresh_database(server_url)`` is a context manager that creates a database on that server,
migrates it to head, yields its URL and drops it afterwards. A pytest fixture built on it,
``runner_database``, is in runner/pytest_plugin.py: add ``pytest_plugins =
["runner.pytest_plugin"]`` to a conftest.py.

Every DROP DATABASE waits for a checkpoint of the server (seconds on a busy one); drops
waiting at the same time share one. ``DropBehind`` drops databases in a thread of its own, all
those handed to it meanwhile at once (``drop_databases``), and ``close()`` waits until every
one is gone: ``fresh_database(..., drops=...)`` hands its database to one instead of waiting,
as the ``runner_database`` fixture does, so that no test waits for a checkpoint.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit
from uuid import uuid4

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from runner import __version__
from runner.context import AsyncJobContext, JobContext
from runner.errors import LockUnavailable
from runner.model.app import JobDef, Runner
from runner.model.schedule import idempotency_keys
from runner.settings import ConfigError, lock_namespace
from runner.sqlfiles import queries
from runner.store import ledger, migrate
from runner.store.ledger import ClaimedRun, Outcome, Owner, SlotClaim
from runner.worker.attempt import execute, execute_async, failure
from runner.worker.fanout import plan_slot

Q = queries("testing")


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt of a run, as recorded in runner.attempts."""

    attempt: int
    fence: int
    trigger: str
    status: str
    error_class: str | None
    error_message: str | None
    started_at: datetime
    finished_at: datetime | None
    traceback: str | None = None  # a failed attempt's, redacted and bounded (revision 0008_watch)


@dataclass(frozen=True)
class RunRecord:
    """One run as recorded in runner.job_runs, with its attempts."""

    id: int
    job_name: str
    slot: datetime
    partition: str
    status: str
    trigger: str
    attempt: int
    fence: int
    idempotency_key: str
    last_error: str | None
    status_reason: str | None
    processed: int
    failed: int
    next_attempt_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    attempts: tuple[AttemptRecord, ...]

    @property
    def error(self) -> str | None:
        """The last attempt's error (``Class: message``), or None."""
        return self.last_error


def run_once(app: Runner, job: str, slot: datetime, database_url: str, *,
             partition: str | None = None, attempts: int = 1) -> RunRecord:
    """Run ``job`` for ``slot`` (and ``partition``) now, through the real claim, attempt and
    outcome path, against ``database_url`` (migrated); return the run as recorded. See the
    module docstring. ``partition`` may be left out when the slot has one partition."""
    definition = app.jobs.get(job)
    if definition is None:
        known = ", ".join(sorted(app.jobs)) or "none"
        raise ValueError(f"unknown job {job!r}; the app registers: {known}")
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ValueError(f"attempts must be an integer >= 1, got {attempts!r}")
    slot = _slot_of(definition, slot)
    conn = psycopg.connect(database_url, autocommit=True, application_name="runner-testing")
    try:
        conn.execute("SET TIME ZONE 'UTC'")
        migrate.check_schema(conn, database_url)
        owner = Owner.here(uuid4(), lock_namespace())
        ledger.sync_jobs(conn, [definition])
        ledger.register_instance(conn, owner, __version__, [job])
        try:
            run_id = _attempts(conn, owner, definition, slot, partition, attempts, database_url)
        finally:
            ledger.stop_instance(conn, owner)
        return _record(conn, run_id)
    finally:
        conn.close()


def _slot_of(job: JobDef, slot: datetime) -> datetime:
    if not isinstance(slot, datetime) or slot.tzinfo is None:
        raise ValueError(f"slot must be an aware datetime, got {slot!r}")
    slot = slot.astimezone(UTC)
    if job.schedule.next_after(slot - timedelta(microseconds=1)) != slot:
        before = job.schedule.latest_at_or_before(slot)
        after = job.schedule.next_after(slot)
        raise ValueError(f"{slot.isoformat()} is not a slot of job {job.name!r}; the nearest are "
                         f"{before.isoformat()} and {after.isoformat()}")
    return slot


def _attempts(conn: psycopg.Connection[Any], owner: Owner, job: JobDef, slot: datetime,
              partition: str | None, attempts: int, url: str) -> int:
    """Claim (or continue) the run and run up to ``attempts`` attempts; returns its id."""
    if slot > ledger.db_now(conn):
        raise ValueError(f"slot {slot.isoformat()} is in the future (database clock)")
    claim = _claim_of(conn, job, slot, partition)
    _, won = ledger.claim_slots(conn, owner, [claim])
    if won:
        run = won[0]
    else:
        row = conn.execute(Q["run_of_slot"], {"job_name": job.name, "slot": slot,
                                              "partition_key": claim.partition_key}).fetchone()
        if row is None:
            raise RuntimeError(f"job {job.name!r} slot {slot.isoformat()}: the claim won nothing "
                               "and no run exists")
        run_id, fence, status = row
        if status not in ("pending", "failed"):
            return int(run_id)  # done, or running elsewhere: as recorded
        started = _start_attempt(conn, owner, run_id, fence)
        if started is None:
            return int(run_id)  # out of attempts: dead
        run = started
    for n in range(attempts):
        status = _one_attempt(conn, owner, job, run, url)
        if status != "failed" or n + 1 == attempts:
            break
        started = _start_attempt(conn, owner, run.id, run.fence)
        if started is None:
            break
        run = started
    return run.id


def _claim_of(conn: psycopg.Connection[Any], job: JobDef, slot: datetime,
              partition: str | None) -> SlotClaim:
    plan = plan_slot(conn, job, slot)
    if plan.error is not None or plan.window_start is None or plan.window_end is None \
            or plan.business_date is None:
        raise ValueError(f"job {job.name!r} slot {slot.isoformat()}: its fan-out failed: {plan.error}")
    keys = plan.partitions
    if partition is None:
        if len(keys) != 1:
            raise ValueError(f"job {job.name!r} has {len(keys)} partitions at {slot.isoformat()}; "
                             f"name one with partition= ({', '.join(map(repr, keys[:10]))})")
        partition = keys[0]
    elif partition not in keys:
        raise ValueError(f"job {job.name!r} has no partition {partition!r} at {slot.isoformat()} "
                         f"(it has {', '.join(map(repr, keys[:10]))})")
    [key] = idempotency_keys(job.name, plan.window_start, plan.window_end, [partition], job.version)
    # overlap is the loop's decision between slots, not part of one run: never applied here
    return SlotClaim(job.name, slot, partition, plan.business_date, plan.window_start,
                     plan.window_end, key, "allow", job.lane)


def _start_attempt(conn: psycopg.Connection[Any], owner: Owner, run_id: int,
                   fence: int) -> ClaimedRun | None:
    rows = conn.execute(Q["start_run_attempt"], {**owner.params(), "run_id": run_id,
                                                 "fence": fence}).fetchall()
    _, runs = ledger.claimed_rows(rows)
    return runs[0] if runs else None


def _one_attempt(conn: psycopg.Connection[Any], owner: Owner, job: JobDef, run: ClaimedRun,
                 url: str) -> str:
    """One attempt, its outcome recorded (fence-checked) and its lock released; returns the
    run's status after it."""
    try:
        if not run.locked:
            outcome: Outcome | None = failure(run, job, LockUnavailable(
                "advisory lock key held by another session"), None)
        elif job.is_async:
            outcome = _in_event_loop(run, job, url)
        else:
            outcome = _sync_attempt(run, job, url)
        if outcome is not None:
            ledger.finish_attempts(conn, [outcome])
    finally:
        if run.locked:
            ledger.unlock_runs(conn, owner.namespace, [run.id])
    row = conn.execute(Q["run_of_slot"], {"job_name": run.job_name, "slot": run.slot,
                                          "partition_key": run.partition_key}).fetchone()
    assert row is not None
    return str(row[2])


def _sync_attempt(run: ClaimedRun, job: JobDef, url: str) -> Outcome | None:
    kwargs = {"autocommit": True, "application_name": "runner-testing"}
    with ConnectionPool(url, min_size=0, max_size=1, kwargs=kwargs, open=True) as pool, \
            ConnectionPool(url, min_size=0, max_size=2, kwargs=kwargs, open=True) as control:
        return execute(run, job, pool, JobContext(run, job, pool, control))


def _in_event_loop(run: ClaimedRun, job: JobDef, url: str) -> Outcome | None:
    """An async attempt on a fresh event loop, in a thread of its own (so that run_once works
    from inside a running event loop too, e.g. an async test)."""
    result: list[Outcome | None] = []
    error: list[BaseException] = []

    def main() -> None:
        try:
            result.append(asyncio.run(_async_attempt(run, job, url)))
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=main, name="runner-testing")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


async def _async_attempt(run: ClaimedRun, job: JobDef, url: str) -> Outcome | None:
    kwargs = {"autocommit": True, "application_name": "runner-testing"}
    loop = asyncio.get_running_loop()
    with ConnectionPool(url, min_size=0, max_size=2, kwargs=kwargs, open=True) as effects:
        async with AsyncConnectionPool(url, min_size=0, max_size=1, kwargs=kwargs, open=False) as pool, \
                AsyncConnectionPool(url, min_size=0, max_size=2, kwargs=kwargs, open=False) as control:
            ctx = AsyncJobContext(run, job, pool, control, effects, loop)
            return await execute_async(run, job, ctx)


def _record(conn: psycopg.Connection[Any], run_id: int) -> RunRecord:
    row = conn.execute(Q["run_record"], {"run_id": run_id}).fetchone()
    assert row is not None
    attempts = tuple(AttemptRecord(*a) for a in conn.execute(Q["run_attempts"], {"run_id": run_id}))
    (id_, job_name, slot, partition, status, trigger, attempt, fence, key, last_error, reason,
     processed, failed, next_at, started_at, finished_at) = row
    return RunRecord(id_, job_name, slot, partition, status, trigger, attempt, fence, key, last_error,
                     reason, processed, failed, next_at, started_at, finished_at, attempts)


# -- a throwaway migrated database ---------------------------------------------------------


@contextmanager
def fresh_database(server_url: str | None = None, *, drops: DropBehind | None = None) -> Iterator[str]:
    """A new database on the server of ``server_url`` (a ``postgresql://`` URL of any of its
    databases, the role able to create databases; default ``RUNNER_TEST_DATABASE_URL``),
    migrated to head. Yields its URL; dropped on exit, whatever connections remain (with
    ``drops``, handed to it: dropped in the background, gone once it is closed)."""
    server_url = server_url or os.environ.get("RUNNER_TEST_DATABASE_URL")
    if not server_url:
        raise ConfigError("fresh_database needs a server URL (or RUNNER_TEST_DATABASE_URL)")
    parts = urlsplit(server_url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError("fresh_database needs a postgresql:// URL")
    name = f"runner_test_{os.getpid()}_{uuid4().hex[:12]}"
    url = urlunsplit(parts._replace(path="/" + quote(name)))
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        migrate.upgrade(url)
        yield url
    finally:
        if drops is not None:
            drops.drop(name)
        else:
            drop_databases(server_url, [name])


MAX_DROPS_TOGETHER = 4  # drops at once, each on a connection of its own (a shared server: few)


def drop_databases(server_url: str, names: list[str]) -> None:
    """DROP DATABASE ... WITH (FORCE) each of ``names`` on the server of ``server_url``, at the
    same time (``MAX_DROPS_TOGETHER`` at most), each on a connection of its own, so that their
    checkpoints coincide. Raises the first error once every drop has ended."""
    errors: list[BaseException] = []

    def drop(name: str) -> None:
        try:
            with psycopg.connect(server_url, autocommit=True) as admin:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        except BaseException as exc:
            errors.append(exc)

    for i in range(0, len(names), MAX_DROPS_TOGETHER):
        threads = [threading.Thread(target=drop, args=(name,), name=f"drop-{name}")
                   for name in names[i:i + MAX_DROPS_TOGETHER]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]


class DropBehind:
    """Databases of one server dropped in a background thread: ``drop(name)`` returns at once,
    the names handed over while a drop runs are dropped together next; ``settle()`` waits until
    every name handed over is gone; ``close()`` settles, stops the thread and raises the first
    drop that failed."""

    def __init__(self, server_url: str) -> None:
        self._server_url = server_url
        self._waiting: deque[str] = deque()
        self._busy = False
        self._stopping = False
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="runner-drops", daemon=True)
        self._thread.start()

    def drop(self, name: str) -> None:
        with self._cond:
            if self._stopping:
                raise RuntimeError("DropBehind is closed")
            self._waiting.append(name)
            self._cond.notify_all()

    def settle(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: not self._waiting and not self._busy)

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()  # it drops what is waiting before it ends
        if self._error is not None:
            raise RuntimeError(f"dropping a test database failed: {self._error}") from self._error

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping or bool(self._waiting))
                if not self._waiting:
                    return
                names = list(self._waiting)
                self._waiting.clear()
                self._busy = True
            try:
                drop_databases(self._server_url, names)
            except BaseException as exc:
                with self._cond:
                    self._error = self._error or exc
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
