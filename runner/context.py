"""The context a handler sees: the run it is doing (``ctx.slot``, ``ctx.partition``, ...),
``ctx.db`` (a transaction that commits with the run's success), ``ctx.heartbeat()``,
``ctx.effect()``, and for long jobs ``ctx.checkpoint(state)``, ``ctx.resume`` and
``ctx.stopping`` (runner/worker/checkpoints.py has their design). Made by the loop for each attempt
(runner/worker/attempt.py runs the handler).

A plain ``def`` handler gets a ``JobContext``; an ``async def`` handler gets an
``AsyncJobContext``, with the same run facts and the same rules, in async form:

* ``ctx.db`` is the attempt's psycopg ``AsyncConnection``, taken from the pool only when the
  handler first uses it: ``await ctx.db.execute(...)`` (a shortcut), or ``conn = await ctx.db``
  for the connection itself (cursors, ``copy``, pipelines). It commits with the run's success,
  fence-checked, or rolls back, exactly as the sync one does;
* ``await ctx.heartbeat(processed=...)``, ``await ctx.checkpoint(state)`` and
  ``await ctx.effect(key, send, check=...)``
  (``send`` and ``check`` may be plain functions or ``async def``). There is no sync variant
  for async handlers: a database round trip must not block the event loop that runs every
  other async handler of the process.

A timeout or a shutdown past its grace cancels an async handler's task (``CancelledError``
at its current ``await``; a statement running on ``ctx.db`` is cancelled with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Generator
from datetime import UTC, date, datetime
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from runner.errors import AttemptTimedOut, LostOwnership
from runner.model.jobs import JobDef
from runner.store import ledger
from runner.store.ledger import ClaimedRun
from runner.worker import checkpoints
from runner.worker.checkpoints import HandedOff
from runner.worker.effects import run_effect

log = logging.getLogger("runner.attempt")


class RunContext:
    """The facts of the run an attempt is doing, the same for sync and async handlers."""

    def __init__(self, run: ClaimedRun, job: JobDef) -> None:
        self._run = run
        self._job = job
        self._cancelled: str | None = None
        # set by the runner (runner/worker/loop.py Worker._finishing): called once the handler
        # returned, before its success is recorded; False when the runner gave up on the
        # attempt (timeout, shutdown) first, True when it will not give up on it any more
        self._may_finish: Callable[[], bool] | None = None
        self.processed: int | None = None
        self.failed: int | None = None
        self._stopping = False  # the runner is shutting down (hand_off)
        self._checkpoints = 0  # checkpoints this attempt committed
        # the state this attempt resumes from: known without a query on a run's first attempt
        self._resume: Any = None
        self._resume_known = run.attempt <= 1
        self._on_checkpoint: Callable[[], None] | None = None  # metrics (runner/worker/executor.py)
        # the handler's last ctx.heartbeat(): kept on a failed attempt's row (runner/worker/attempt.py)
        self.last_heartbeat: dict[str, Any] | None = None

    def _beat(self, processed: int | None, failed: int | None) -> None:
        """Note one heartbeat of the handler: its counts and when (this host's clock in UTC:
        shown to a human beside the failure, never compared with the ledger's times)."""
        if processed is not None:
            self.processed = processed
        if failed is not None:
            self.failed = failed
        beats = (self.last_heartbeat or {}).get("beats", 0) + 1
        self.last_heartbeat = {"at": datetime.now(UTC).isoformat(timespec="seconds"),
                               "processed": self.processed, "failed": self.failed, "beats": beats}

    @property
    def job_name(self) -> str:
        """The job's name."""
        return self._run.job_name

    @property
    def run_id(self) -> int:
        """The run's id (``runner.job_runs.id``): the same for every attempt of the run."""
        return self._run.id

    @property
    def slot(self) -> datetime:
        """The slot: the instant the schedule fired for this run (aware, UTC), not when the
        run started."""
        return self._run.slot

    @property
    def window_start(self) -> datetime:
        """The start of the run's business window (inclusive): by default the previous slot;
        earlier when a coalesced run covers several late slots."""
        return self._run.window_start

    @property
    def window_end(self) -> datetime:
        """The end of the run's business window (exclusive): by default the slot itself."""
        return self._run.window_end

    @property
    def business_date(self) -> date:
        """The business date: the local date, in the job's time zone, of ``window_start`` (the
        02:00 run of a daily job settles the day before)."""
        return self._run.business_date

    @property
    def partition(self) -> str:
        """The run's partition key ('' when the job is not partitioned)."""
        return self._run.partition_key

    @property
    def idempotency_key(self) -> str:
        """A key naming the unit of work (job, business window, partition, version): the same
        for every attempt and every rerun of it; give it to systems that deduplicate."""
        return self._run.idempotency_key

    @property
    def fence(self) -> int:
        """The attempt's fence: it grows with every new attempt of the run; a write checked
        against it is refused once a newer attempt exists."""
        return self._run.fence

    @property
    def attempt(self) -> int:
        """The attempt's number, 1 for the first (a retry or a takeover is the next)."""
        return self._run.attempt

    @property
    def trigger(self) -> str:
        """Why the run exists: schedule, catch_up, retry, recovery, manual or backfill."""
        return self._run.trigger

    @property
    def stopping(self) -> bool:
        """True once the runner is shutting down: a handler that checkpoints should stop at its
        next checkpoint (which then raises ``HandedOff``) and another runner resumes the run."""
        return self._stopping

    def hand_off(self) -> None:
        """The runner is shutting down (called from its loop thread): ``stopping`` becomes
        true, the next checkpoint raises HandedOff after its commit, and so does the next
        heartbeat once the attempt has committed a checkpoint."""
        self._stopping = True

    def cancel(self, reason: str) -> None:  # pragma: no cover - both subclasses override it
        self._cancelled = reason

    def _checked(self, state: Any, summary: str | None) -> tuple[str, str]:
        if self._cancelled:
            raise AttemptTimedOut(self._cancelled)
        return checkpoints.encode(state, summary)

    def _committed(self, count: int | None) -> None:
        if count is None:
            log.warning("run %s: stale fence %s, its checkpoint was refused and the handler's "
                        "transaction rolled back", self._run.id, self._run.fence)
            raise self._lost()
        self._checkpoints += 1
        if self._on_checkpoint is not None:
            self._on_checkpoint()
        if self._stopping:
            raise HandedOff(f"run {self._run.id}: the runner is shutting down; work up to "
                            f"checkpoint {count} of the run is committed and another runner "
                            "resumes from it")

    def _beat_stop(self) -> None:
        """A heartbeat's own checks: given up (timeout), or handing off (runner/worker/checkpoints.py)."""
        if self._cancelled:
            raise AttemptTimedOut(self._cancelled)
        if self._stopping and self._checkpoints:
            raise HandedOff(f"run {self._run.id}: the runner is shutting down; work up to this "
                            "attempt's last checkpoint is committed and another runner resumes from it")

    def _lost(self) -> LostOwnership:
        return LostOwnership(
            f"run {self._run.id} is no longer owned by attempt {self._run.attempt} "
            f"(fence {self._run.fence})"
        )


class JobContext(RunContext):
    """What a handler knows about the unit of work it is doing (see SPEC: Public interface)."""

    def __init__(self, run: ClaimedRun, job: JobDef, pool: ConnectionPool[Any],
                 control: ConnectionPool[Any] | None = None) -> None:
        super().__init__(run, job)
        self._pool = pool  # ctx.db transactions
        # short autocommit writes (heartbeats, effects) while ctx.db may hold a connection
        self._control = control or pool
        self._conn: psycopg.Connection[Any] | None = None

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
        """A side effect recorded under ``key`` in runner.effects (see runner/worker/effects.py)."""
        return run_effect(self, key, *args, **kwargs)

    @property
    def resume(self) -> Any:
        """The run's last committed checkpoint state when this attempt started it (None on a
        first attempt, or when no checkpoint was taken): where to continue from."""
        if not self._resume_known:
            with self._control.connection() as conn:
                self._resume = checkpoints.read_resume(conn, self._run.id)
            self._resume_known = True
        return self._resume

    def checkpoint(self, state: Any, summary: str | None = None) -> None:
        """Commit what the handler wrote through ``ctx.db`` so far together with ``state``
        (JSON, at most 64 KiB) on the run, if this attempt still holds its fence
        (runner/worker/checkpoints.py). Raises CheckpointError (nothing written) for a state that
        cannot be stored, LostOwnership (rolled back) for a stale attempt, and HandedOff
        after the commit when the runner is shutting down."""
        text, summary = self._checked(state, summary)
        self._committed(checkpoints.commit_checkpoint(self.db, self._run.id, self._run.fence,
                                                      text, summary))

    def heartbeat(self, processed: int | None = None, failed: int | None = None) -> None:
        """Report progress. Raises LostOwnership if this attempt no longer owns its run, and
        AttemptTimedOut once the runner gave up on it (its job's timeout passed), and
        HandedOff when the runner is shutting down and this attempt has committed a checkpoint."""
        self._beat_stop()
        self._beat(processed, failed)
        with self._control.connection() as conn:
            alive = ledger.heartbeat_attempt(conn, self._run.id, self._run.fence, processed, failed)
        if not alive:
            raise self._lost()

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


class AsyncDb:
    """``ctx.db`` of an async handler. ``conn = await ctx.db`` is the attempt's psycopg
    ``AsyncConnection`` (in a transaction that commits with the run's success);
    ``await ctx.db.execute(...)`` is a shortcut for ``await (await ctx.db).execute(...)``.
    The connection is taken from the pool at the first of either, never before."""

    def __init__(self, ctx: AsyncJobContext) -> None:
        self._ctx = ctx

    def __await__(self) -> Generator[Any, None, psycopg.AsyncConnection[Any]]:
        return self._ctx._connection().__await__()

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> psycopg.AsyncCursor[Any]:
        conn = await self._ctx._connection()
        return await conn.execute(query, params, **kwargs)


class AsyncJobContext(RunContext):
    """The context of an ``async def`` handler (module docstring): the same run facts as
    ``JobContext``; ``ctx.db``, ``heartbeat`` and ``effect`` in async form."""

    def __init__(self, run: ClaimedRun, job: JobDef, pool: AsyncConnectionPool[Any],
                 control: AsyncConnectionPool[Any], effects: ConnectionPool[Any],
                 loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(run, job)
        self._pool = pool  # ctx.db transactions
        self._acontrol = control  # heartbeats
        self._control = effects  # the effect log's short writes (runner/worker/effects.py, in a thread)
        self._loop = loop
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._getting = asyncio.Lock()
        self._task: asyncio.Task[Any] | None = None  # set by runner/aio.py

    @property
    def db(self) -> AsyncDb:
        """The attempt's transaction (``await ctx.db``, or ``await ctx.db.execute(...)``),
        committed with the run's success, or rolled back if the handler raises or the
        attempt lost its run."""
        return AsyncDb(self)

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        async with self._getting:  # two first uses at once (gather) take one connection
            if self._conn is None:
                conn = await self._pool.getconn()
                try:
                    await conn.set_autocommit(False)
                except BaseException:
                    await self._pool.putconn(conn)
                    raise
                self._conn = conn
            return self._conn

    async def heartbeat(self, processed: int | None = None, failed: int | None = None) -> None:
        """Report progress (``await ctx.heartbeat(processed=...)``). Raises LostOwnership if
        this attempt no longer owns its run, AttemptTimedOut once the runner gave up on it, and
        HandedOff when the runner is shutting down and this attempt has committed a checkpoint."""
        self._beat_stop()
        self._beat(processed, failed)
        async with self._acontrol.connection() as conn:
            alive = await ledger.heartbeat_attempt_async(conn, self._run.id, self._run.fence,
                                                         processed, failed)
        if not alive:
            raise self._lost()

    @property
    def resume(self) -> Any:
        """The run's last committed checkpoint state when this attempt started it (None on a
        first attempt, or when no checkpoint was taken; read before the handler is called)."""
        return self._resume

    async def _load_resume(self) -> None:
        if not self._resume_known:
            async with self._acontrol.connection() as conn:
                self._resume = await checkpoints.read_resume_async(conn, self._run.id)
            self._resume_known = True

    async def checkpoint(self, state: Any, summary: str | None = None) -> None:
        """``await ctx.checkpoint(state)``: the sync ``JobContext.checkpoint`` on the
        attempt's AsyncConnection, with the same rules and exceptions."""
        text, summary = self._checked(state, summary)
        conn = await self._connection()
        self._committed(await checkpoints.commit_checkpoint_async(conn, self._run.id, self._run.fence,
                                                                  text, summary))

    async def effect(self, key: str, send: Callable[[], Any] | None = None, *,
                     check: Callable[[str], Any] | None = None, stage: str | None = None,
                     unknown_on: Any = (TimeoutError,)) -> Any:
        """A side effect recorded under ``key`` in runner.effects, exactly as the sync
        ``ctx.effect`` (runner/worker/effects.py). The effect log's bookkeeping runs in a thread of
        the event loop's executor; ``send`` and ``check`` may be coroutine functions (awaited
        on the event loop) or plain functions (called in that thread)."""
        loop = asyncio.get_running_loop()
        return await asyncio.to_thread(run_effect, self, key, _awaited_on(loop, send),
                                       check=_awaited_on(loop, check), stage=stage,
                                       unknown_on=unknown_on)

    def cancel(self, reason: str) -> None:
        """Ask the handler to stop (called by the runner from another thread): its task is
        cancelled, and the next ``heartbeat()`` or ``effect()`` raises."""
        self._cancelled = reason
        task = self._task
        if task is not None:
            # RuntimeError: the event loop is closed, nothing runs there any more
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(task.cancel)

    async def _release(self, commit: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if commit:
                await conn.commit()
            else:
                await conn.rollback()
        finally:
            try:
                await conn.set_autocommit(True)
            except Exception as exc:  # a broken connection: the pool discards it on return
                log.debug("resetting a ctx.db connection failed: %s", exc)
            await self._pool.putconn(conn)


def _awaited_on(loop: asyncio.AbstractEventLoop,
                fn: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """``fn`` callable from a thread: a result that is awaitable is awaited on ``loop``."""
    if fn is None:
        return None

    def call(*args: Any) -> Any:
        result = fn(*args)
        if not inspect.isawaitable(result):
            return result
        future = asyncio.run_coroutine_threadsafe(_await(result), loop)
        while True:
            try:
                return future.result(timeout=1.0)
            except TimeoutError:
                if future.done():  # the send's own TimeoutError
                    raise
                if not loop.is_running():  # the runner stopped: never wait on a dead loop
                    future.cancel()
                    raise RuntimeError("the runner's event loop stopped while a send was awaited") from None

    return call


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
