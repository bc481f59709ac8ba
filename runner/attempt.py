"""One attempt's life: the context a handler sees, the handler call, and its outcome.

The attempt's run is already claimed, fenced and locked when ``execute`` is called. A
handler that never touches ``ctx.db`` returns its outcome to the caller, which records it
in a batch with others (one statement for many runs). A handler that used ``ctx.db`` has
its outcome recorded inside that same transaction, fence-checked: the handler's writes and
the run's success commit together, or not at all. If the fence check refuses the outcome
(another attempt owns the run now), the transaction rolls back and the attempt is closed as
``stale``.

A handler's return value is ignored, except one that stands for work not done yet: a
coroutine (a sync wrapper around an ``async def``), another awaitable, a generator or an async
generator. That attempt fails with ``HandlerReturnedAwaitable``, a ``Permanent`` error (the
run goes to ``dead``: retrying the same handler cannot help), and ``ctx.db`` rolls back.
"""

from __future__ import annotations

import inspect
import logging
import os
import random
import traceback
from datetime import date, datetime
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from runner import ledger
from runner.app import JobDef
from runner.errors import AttemptTimedOut, HandlerReturnedAwaitable, LostOwnership
from runner.ledger import ClaimedRun, Outcome

log = logging.getLogger("runner.attempt")

MAX_ERROR_CHARS = 4000


def crash_point(name: str) -> None:
    """Fault injection (scripts/fault_suite.py): exit at once, as ``kill -9`` would (no
    cleanup, no outcome recorded), when the environment variable ``RUNNER_CRASH_POINT`` is
    ``name`` and a random draw falls under ``RUNNER_CRASH_RATE`` (default 1.0). A no-op
    unless that variable is set. Points: ``after_claim`` (a run is claimed, its handler not
    yet started), ``after_handler`` (the handler returned, nothing recorded) and
    ``before_completion`` (a batch of outcomes is about to be recorded)."""
    if name == _CRASH_POINT and random.random() < _CRASH_RATE:
        os._exit(137)


# read once: crash_point is on the path of every run
_CRASH_POINT = os.environ.get("RUNNER_CRASH_POINT")
_CRASH_RATE = float(os.environ.get("RUNNER_CRASH_RATE", "1.0")) if _CRASH_POINT else 1.0


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
        from runner.effects import run_effect

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


def error_text(exc: BaseException) -> tuple[str, str]:
    """The class and message of an exception, safe to store: never raises, no NUL bytes,
    valid UTF-8, at most MAX_ERROR_CHARS characters."""
    cls = type(exc)
    name = f"{cls.__module__}.{cls.__qualname__}" if cls.__module__ != "builtins" else cls.__qualname__
    try:
        message = str(exc)
    except Exception:
        try:
            message = repr(exc)
        except Exception:
            message = f"<{cls.__qualname__} whose str() raised>"
    if not isinstance(message, str):
        message = f"<{cls.__qualname__} with a non-string message>"
    return _clean(name, 200), _clean(message, MAX_ERROR_CHARS)


def _clean(text: str, limit: int) -> str:
    text = text.replace("\x00", "\\x00")
    text = text.encode("utf-8", errors="replace").decode("utf-8", errors="replace")
    if len(text) > limit:
        text = text[: limit - 20] + f"... [{len(text) - limit + 20} more]"
    return text


def failure(run: ClaimedRun, job: JobDef, exc: BaseException, ctx: JobContext | None) -> Outcome:
    """The outcome of an attempt that raised: dead when permanent or out of attempts, else
    failed with the next attempt's delay from the job's backoff."""
    error_class, message = error_text(exc)
    dead = job.is_permanent(exc) or run.counted_attempts >= job.max_attempts
    return Outcome(
        run_id=run.id,
        fence=run.fence,
        status="dead" if dead else "failed",
        error_class=error_class,
        error_message=message,
        retry_delay=None if dead else job.backoff.delay(run.attempt).total_seconds(),
        processed=ctx.processed if ctx else None,
        failed=ctx.failed if ctx else None,
    )


def unfinished_work(result: object) -> HandlerReturnedAwaitable | None:
    """The failure for a handler's return value that stands for work not done yet (a
    coroutine, another awaitable, a generator, an async generator), or None for any other
    value. A coroutine or generator is closed first: it can never run half-way later, and
    Python does not warn that a coroutine was never awaited."""
    never_ran = "the work did not run: "
    if inspect.iscoroutine(result):
        kind = "a coroutine"
        why = never_ran + "it was never awaited (async def handlers are not supported yet)"
    elif inspect.isasyncgen(result):
        kind, why = "an async generator", never_ran + "the runner does not iterate it"
    elif inspect.isgenerator(result):
        kind, why = "a generator", never_ran + "the runner does not iterate it"
    elif inspect.isawaitable(result):
        kind = f"an awaitable ({type(result).__qualname__})"
        why = "the runner does not await it, so the work is not known to be done"
    else:
        return None
    if inspect.iscoroutine(result) or inspect.isgenerator(result):
        try:
            result.close()
        except Exception as exc:  # running elsewhere, or it refused to close: still a failure
            log.debug("closing a returned %s failed: %s", kind, exc)
    return HandlerReturnedAwaitable(
        f"the handler returned {kind}; {why}. A handler must finish its work before it returns"
    )


def execute(run: ClaimedRun, job: JobDef, pool: ConnectionPool[Any],
            ctx: JobContext | None = None) -> Outcome | None:
    """Run the handler for one claimed run. Returns the outcome for the caller to record in
    a batch, or None when it was already recorded in the handler's own transaction."""
    ctx = ctx or JobContext(run, job, pool)
    try:
        result = job.handler(ctx)
    except Exception as exc:
        ctx._release(commit=False)
        if isinstance(exc, LostOwnership):
            log.warning("run %s: attempt %s lost its run: %s", run.id, run.attempt, exc)
        else:
            log.debug("run %s: handler raised: %s", run.id,
                      " ".join("".join(traceback.format_exception_only(exc)).split())[:500])
        return failure(run, job, exc, ctx)
    crash_point("after_handler")
    if result is not None:
        unfinished = unfinished_work(result)
        if unfinished is not None:
            ctx._release(commit=False)
            log.warning("run %s: %s", run.id, unfinished)
            return failure(run, job, unfinished, ctx)
        log.debug("run %s: handler returned %r (ignored)", run.id, type(result).__name__)
    success = Outcome(
        run_id=run.id, fence=run.fence, status="succeeded", processed=ctx.processed, failed=ctx.failed
    )
    conn = ctx._conn
    if conn is None:
        return success
    try:
        landed = ledger.finish_attempts(conn, [success]).get((run.id, run.fence), False)
    except Exception as exc:
        ctx._release(commit=False)
        return failure(run, job, exc, ctx)
    if not landed:
        ctx._release(commit=False)
        log.warning("run %s: stale fence %s, the handler's transaction was rolled back", run.id, run.fence)
        return success  # recorded again outside the transaction: the attempt closes as stale
    try:
        ctx._release(commit=True)
    except Exception as exc:
        # The commit's fate is unknown (connection lost). Record a failure: if the commit did
        # land, the fence check refuses this outcome and the success stands.
        return failure(run, job, exc, ctx)
    return None
