"""The context a handler sees: the run it is doing (``ctx.slot``, ``ctx.partition``, ...),
``ctx.db`` (a transaction that commits with the run's success), ``ctx.heartbeat()`` and
``ctx.effect()``. Made by the loop for each attempt (runner/attempt.py runs the handler)."""

from __future__ import annotations

import logging
from datetime import date, datetime
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from runner import ledger
from runner.app import JobDef
from runner.effects import run_effect
from runner.errors import AttemptTimedOut, LostOwnership
from runner.ledger import ClaimedRun

log = logging.getLogger("runner.attempt")


class JobContext:
    """What a handler knows about the unit of work it is doing (see SPEC: Public interface)."""

    def __init__(self, run: ClaimedRun, job: JobDef, pool: ConnectionPool[Any],
                 control: ConnectionPool[Any] | None = None) -> None:
        self._run = run
        self._job = job
        self._pool = pool  # ctx.db transactions
        # short autocommit writes (heartbeats, effects) while ctx.db may hold a connection
        self._control = control or pool
        self._conn: psycopg.Connection[Any] | None = None
        self._cancelled: str | None = None
        self.processed: int | None = None
        self.failed: int | None = None

    job_name = property(lambda self: self._run.job_name)
    run_id = property(lambda self: self._run.id)

    @property
    def slot(self) -> datetime:
        return self._run.slot

    @property
    def window_start(self) -> datetime:
        return self._run.window_start

    @property
    def window_end(self) -> datetime:
        return self._run.window_end

    @property
    def business_date(self) -> date:
        return self._run.business_date

    @property
    def partition(self) -> str:
        return self._run.partition_key

    @property
    def idempotency_key(self) -> str:
        return self._run.idempotency_key

    @property
    def fence(self) -> int:
        return self._run.fence

    @property
    def attempt(self) -> int:
        return self._run.attempt

    @property
    def trigger(self) -> str:
        return self._run.trigger

    @property
    def db(self) -> psycopg.Connection[Any]:
        """A connection in a transaction that commits with the run's success, or rolls back
        if the handler raises or the attempt lost its run."""
        if self._conn is None:
            conn = self._pool.getconn()
            conn.autocommit = False
            self._conn = conn
        return self._conn

    def effect(self, key: str, *args: Any, **kwargs: Any) -> Any:
        """A side effect recorded under ``key`` in runner.effects (see runner/effects.py)."""
        return run_effect(self, key, *args, **kwargs)

    def heartbeat(self, processed: int | None = None, failed: int | None = None) -> None:
        """Report progress. Raises LostOwnership if this attempt no longer owns its run, and
        AttemptTimedOut once the runner gave up on it (its job's timeout passed)."""
        if self._cancelled:
            raise AttemptTimedOut(self._cancelled)
        if processed is not None:
            self.processed = processed
        if failed is not None:
            self.failed = failed
        with self._control.connection() as conn:
            alive = ledger.heartbeat_attempt(conn, self._run.id, self._run.fence, processed, failed)
        if not alive:
            raise LostOwnership(
                f"run {self._run.id} is no longer owned by attempt {self._run.attempt} "
                f"(fence {self._run.fence})"
            )

    def cancel(self, reason: str) -> None:
        """Ask the handler to stop (called by the runner from another thread): the next
        ``heartbeat()`` raises, and a statement running on ``ctx.db`` is cancelled."""
        self._cancelled = reason
        conn = self._conn
        if conn is not None:
            try:
                conn.cancel_safe(timeout=2.0)
            except Exception as exc:  # the connection may be closing meanwhile
                log.debug("run %s: cancelling ctx.db failed: %s", self._run.id, exc)

    def _release(self, commit: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if commit:
                conn.commit()
            else:
                conn.rollback()
        finally:
            try:
                conn.autocommit = True
            except Exception as exc:  # a broken connection: the pool discards it on return
                log.debug("resetting a ctx.db connection failed: %s", exc)
            self._pool.putconn(conn)
