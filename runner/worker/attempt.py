"""One attempt's life: the handler call and its outcome (the context it sees is
runner/context.py).

The attempt's run is already claimed, fenced and locked when ``execute`` is called. A
handler that never touches ``ctx.db`` returns its outcome to the caller, which records it
in a batch with others (one statement for many runs). A handler that used ``ctx.db`` has
its outcome recorded inside that same transaction, fence-checked: the handler's writes and
the run's success commit together, or not at all. If the fence check refuses the outcome
(another attempt owns the run now), the transaction rolls back and the attempt is closed as
``stale``.

An ``async def`` handler (``job.is_async``) is awaited by ``execute_async`` on the runner's
event loop (runner/aio.py), with the same outcome rules: its ``ctx.db`` is an AsyncConnection
whose transaction records the success, fence-checked, and commits or rolls back the same way.

A handler that raises ``HandedOff`` (runner/worker/checkpoints.py: its runner is shutting down and
its work up to its last checkpoint is committed) ends with the run released, uncounted and
due at once, the attempt recorded ``handed_off``.

A handler's return value is ignored, except one that stands for work not done yet: a
coroutine returned by a plain ``def`` (a sync wrapper around an ``async def``: register the
``async def`` itself to have it awaited), another awaitable, a generator or an async
generator. That attempt fails with ``HandlerReturnedAwaitable``, a ``Permanent`` error (the
run goes to ``dead``: retrying the same handler cannot help), and ``ctx.db`` rolls back.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import random
import traceback
from typing import Any

from psycopg_pool import ConnectionPool

from runner.context import AsyncJobContext, JobContext, RunContext
from runner.errors import AttemptTimedOut, HandlerReturnedAwaitable, LostOwnership, error_text
from runner.model.jobs import JobDef
from runner.settings import redact
from runner.store import ledger
from runner.store.ledger import ClaimedRun, Outcome
from runner.worker.checkpoints import HandedOff

log = logging.getLogger("runner.attempt")

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


# a failed attempt's traceback is kept up to this many characters (its innermost frames,
# where the error is, and the exception line at its end); the rest is cut from the middle
TRACEBACK_LIMIT = 8000


def traceback_text(exc: BaseException, limit: int = TRACEBACK_LIMIT) -> str | None:
    """``exc``'s traceback as text for the attempt row (None when it carries no frames: an
    error the runner made, such as a timeout), redacted with the same rule as every database
    URL the runner prints (runner.settings.redact: passwords in URLs and password=...
    arguments), without NUL characters (PostgreSQL text refuses them), and at most ``limit``
    characters: the head line and the tail, the middle cut with a note of how much."""
    if exc.__traceback__ is None:
        return None
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception:  # an exception whose formatting fails: the one line is still stored
        return None
    # valid UTF-8 (a lone surrogate from a handler's bytes would make the completer's write
    # fail, and with it the completer: tests/test_worker.py::test_hostile_errors_are_stored_safely)
    text = redact(text.replace("\x00", "\\x00").encode("utf-8", errors="replace").decode("utf-8"))
    if len(text) <= limit:
        return text
    head = text.split("\n", 1)[0][:200] + "\n"
    note = "  ... {} characters cut ...\n"
    tail = text[-(limit - len(head) - len(note.format(len(text)))):]
    return head + note.format(len(text) - len(head) - len(tail)) + tail


def failure(run: ClaimedRun, job: JobDef, exc: BaseException, ctx: RunContext | None) -> Outcome:
    """The outcome of an attempt that raised: dead when permanent or out of attempts, else
    failed with the next attempt's delay from the job's backoff. The attempt row also gets
    the redacted, bounded traceback and the handler's last heartbeat (revision 0008_watch);
    the run's last_error and the log keep one line."""
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
        traceback=traceback_text(exc),
        last_heartbeat=ctx.last_heartbeat if ctx else None,
    )


def handed_off(run: ClaimedRun, exc: HandedOff) -> Outcome:
    """The outcome of an attempt that stopped at a committed checkpoint because its runner is
    shutting down (runner/worker/checkpoints.py): the run is released, due at once and uncounted,
    and the attempt is recorded ``handed_off``."""
    error_class, message = error_text(exc)
    return Outcome(run.id, run.fence, "released", attempt_status="handed_off",
                   error_class=error_class, error_message=message, retry_delay=0.0)


def unfinished_work(result: object) -> HandlerReturnedAwaitable | None:
    """The failure for a handler's return value that stands for work not done yet (a
    coroutine, another awaitable, a generator, an async generator), or None for any other
    value. A coroutine or generator is closed first: it can never run half-way later, and
    Python does not warn that a coroutine was never awaited."""
    never_ran = "the work did not run: "
    if inspect.iscoroutine(result):
        kind = "a coroutine"
        why = never_ran + ("it was never awaited (a plain def returned it: register the async def "
                           "itself and the runner awaits it)")
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


def _handler_failed(run: ClaimedRun, exc: Exception) -> None:
    if isinstance(exc, LostOwnership):
        log.warning("run %s: attempt %s lost its run: %s", run.id, run.attempt, exc)
    else:
        log.debug("run %s: handler raised: %s", run.id,
                  " ".join("".join(traceback.format_exception_only(exc)).split())[:500])


def _given_up(ctx: RunContext) -> AttemptTimedOut | None:
    """Whether the runner gave up on this attempt (timeout, shutdown) before its handler
    returned: then its success is not recorded and ctx.db rolls back, even if the handler
    ignored the timeout (caught the cancellation, blocked past its deadline) and returned
    before the runner recorded ``timed_out``. Otherwise the runner will not give up on it any
    more (Worker._finishing), so exactly one of the two outcomes is ever recorded."""
    if ctx._may_finish is None:  # not run by a Worker (runner.testing): nothing gives up on it
        return None
    if ctx._may_finish():
        return None
    return AttemptTimedOut(ctx._cancelled or "the runner gave up on the attempt")


def execute(run: ClaimedRun, job: JobDef, pool: ConnectionPool[Any],
            ctx: JobContext | None = None) -> Outcome | None:
    """Run the handler for one claimed run. Returns the outcome for the caller to record in
    a batch, or None when it was already recorded in the handler's own transaction."""
    ctx = ctx or JobContext(run, job, pool)
    try:
        result = job.handler(ctx)
    except HandedOff as exc:
        ctx._release(commit=False)
        return handed_off(run, exc)
    except Exception as exc:
        ctx._release(commit=False)
        _handler_failed(run, exc)
        return failure(run, job, exc, ctx)
    crash_point("after_handler")
    if result is not None:
        unfinished = unfinished_work(result)
        if unfinished is not None:
            ctx._release(commit=False)
            log.warning("run %s: %s", run.id, unfinished)
            return failure(run, job, unfinished, ctx)
        log.debug("run %s: handler returned %r (ignored)", run.id, type(result).__name__)
    given_up = _given_up(ctx)
    if given_up is not None:
        ctx._release(commit=False)
        return failure(run, job, given_up, ctx)
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


async def execute_async(run: ClaimedRun, job: JobDef, ctx: AsyncJobContext) -> Outcome | None:
    """``execute`` for an ``async def`` handler, awaited on the runner's event loop. A
    cancellation (timeout, shutdown) propagates as ``CancelledError`` with ``ctx.db`` rolled
    back; the runner has recorded that attempt's outcome already."""
    try:
        try:
            await ctx._load_resume()
            result = job.handler(ctx)
            if inspect.isawaitable(result):
                result = await result
        except HandedOff as exc:
            await ctx._release(commit=False)
            return handed_off(run, exc)
        except Exception as exc:
            await ctx._release(commit=False)
            _handler_failed(run, exc)
            return failure(run, job, exc, ctx)
        crash_point("after_handler")
        if result is not None:
            unfinished = unfinished_work(result)
            if unfinished is not None:
                await ctx._release(commit=False)
                log.warning("run %s: %s", run.id, unfinished)
                return failure(run, job, unfinished, ctx)
            log.debug("run %s: handler returned %r (ignored)", run.id, type(result).__name__)
        given_up = _given_up(ctx)
        if given_up is not None:
            await ctx._release(commit=False)
            return failure(run, job, given_up, ctx)
        success = Outcome(
            run_id=run.id, fence=run.fence, status="succeeded", processed=ctx.processed, failed=ctx.failed
        )
        conn = ctx._conn
        if conn is None:
            return success
        try:
            landed = (await ledger.finish_attempts_async(conn, [success])).get((run.id, run.fence), False)
        except Exception as exc:
            await ctx._release(commit=False)
            return failure(run, job, exc, ctx)
        if not landed:
            await ctx._release(commit=False)
            log.warning("run %s: stale fence %s, the handler's transaction was rolled back",
                        run.id, run.fence)
            return success  # recorded again outside the transaction: the attempt closes as stale
        try:
            await ctx._release(commit=True)
        except Exception as exc:
            # the commit's fate is unknown: if it landed, the fence check refuses this failure
            return failure(run, job, exc, ctx)
        return None
    except BaseException:  # cancelled (timeout, shutdown): whatever ctx.db holds rolls back
        await asyncio.shield(ctx._release(commit=False))
        raise
