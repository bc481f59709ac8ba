"""The event loops of ``async def`` handlers: one asyncio loop thread per lane of a process.

A process whose app registers any ``async def`` handler owns one ``AsyncHandlers`` per
lane whose async runs it started (made on the lane's first one): a thread running an asyncio
event loop, on which every async attempt of that lane on the process is a task. The loop
thread claims runs, beats and enforces timeouts for sync and async runs alike
(runner/worker/loop.py, runner/worker/executor.py); this module only runs the async handlers.

**One loop per lane, not per-lane semaphores on one loop.** Lanes share a process so that
bulk work fills spare capacity without delaying live work (runner/worker/lanes.py). On one shared
event loop, a semaphore per lane would bound how many bulk handlers *run*, but not what they
do to the loop: every ready task waits its turn in one FIFO of callbacks, so a thousand
bulk tasks between awaits delay a realtime task's next step, and one bulk handler that blocks
its loop (a sync HTTP call or ``time.sleep`` inside ``async def``, the classic mistake)
stops every realtime async run of the process. With a loop per lane, a bulk async run can
neither take a realtime async run's place under its bound nor its turn on the loop; the cost
is one thread (and its async pools, opened only when used) per lane that runs async work.
The GIL is still shared, as it is with the lanes' handler threads.

* at most ``size`` of the lane's async handlers run at once (an ``asyncio.Semaphore``: for
  ``realtime`` ``--async-workers``, by default ``--workers``; for another lane its
  ``--lane-slots`` value when given, else ``--async-workers``); runs claimed beyond it wait
  for a place with their attempt started, as sync runs wait for a handler thread. The lane's
  in-flight cap on the process (runner/worker/budget.py ``Capacity.cap``) bounds its sync
  and async runs together;
* ``ctx.db`` comes from the lane's ``AsyncConnectionPool`` of at most ``db_size``
  connections (``min(size, --workers)``), taken
  when a handler first uses it: a thousand handlers sleeping in ``await asyncio.sleep`` hold
  no connection at all. Heartbeats use a second small async pool; the effect log's writes run
  in the event loop's executor threads on the executor's sync control pool;
* a timeout or the end of the shutdown grace cancels the task (``CancelledError`` at the
  handler's current ``await``, a running statement cancelled with it, ``ctx.db`` rolled
  back); the executor has already recorded the attempt as given up. A handler that catches the
  cancellation and carries on keeps its place under the bound until it ends (there is no
  thread to replace, unlike a stuck sync handler), and whatever it records is refused;
* a finished attempt's outcome goes to the process's completer (runner/worker/completer.py)
  through ``done``, so sync and async outcomes are recorded in the same batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from psycopg_pool import AsyncConnectionPool, ConnectionPool

from runner.context import AsyncJobContext
from runner.errors import AttemptTimedOut, error_text
from runner.model.jobs import JobDef
from runner.store.ledger import ClaimedRun, Outcome
from runner.worker.attempt import execute_async, failure

log = logging.getLogger("runner.aio")

CLOSE_TIMEOUT = 5.0  # seconds cancelled tasks get to roll back before the loop closes


class AsyncHandlers:
    """One event loop thread running the async handlers of one lane of a Worker (module
    docstring).

    ``begin(run)`` is called when a handler starts (it returns the start time, monotonic) and
    ``done(run, outcome, began)`` when it ends, both from the event loop thread."""

    def __init__(self, url: str, size: int, db_size: int, effects: ConnectionPool[Any],
                 begin: Callable[[ClaimedRun], float],
                 done: Callable[[ClaimedRun, Outcome | None, float], None], lane: str = "") -> None:
        self.lane = lane
        self.size = size
        self._url = url
        self._size = size
        self._db_size = db_size
        self._effects = effects
        self._begin = begin
        self._done = done
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name=f"runner-async-{lane}".rstrip("-"),
                                        daemon=True)
        self._tasks: set[asyncio.Task[None]] = set()
        # attempts handed over by the Worker's loop thread, started by one wake-up of the event
        # loop per batch (a wake-up per run would cost a self-pipe write and a GIL hand-over each)
        self._submitted: list[tuple[ClaimedRun, JobDef, AsyncJobContext]] = []
        self._submit_lock = threading.Lock()
        self._slots: asyncio.Semaphore | None = None
        self._pool: AsyncConnectionPool[Any] | None = None
        self._control: AsyncConnectionPool[Any] | None = None

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._open(), self._loop).result()

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    async def _open(self) -> None:
        self._slots = asyncio.Semaphore(self._size)
        kwargs = {"autocommit": True, "application_name": "runner-worker"}
        suffix = f"-{self.lane}" if self.lane else ""
        self._pool = AsyncConnectionPool(self._url, min_size=0, max_size=self._db_size, open=False,
                                         kwargs=kwargs, name=f"runner-async-db{suffix}")
        self._control = AsyncConnectionPool(
            self._url, min_size=0, max_size=2, open=False, name=f"runner-async-control{suffix}",
            kwargs={"autocommit": True, "application_name": "runner-control"})
        await self._pool.open()
        await self._control.open()

    def context(self, run: ClaimedRun, job: JobDef) -> AsyncJobContext:
        assert self._pool is not None and self._control is not None
        return AsyncJobContext(run, job, self._pool, self._control, self._effects, self._loop)

    def submit(self, run: ClaimedRun, job: JobDef, ctx: AsyncJobContext) -> None:
        """Start the attempt's task (thread-safe: called from the Worker's loop thread)."""
        with self._submit_lock:
            self._submitted.append((run, job, ctx))
            first = len(self._submitted) == 1
        if first:
            self._loop.call_soon_threadsafe(self._spawn)

    def _spawn(self) -> None:
        with self._submit_lock:
            batch, self._submitted = self._submitted, []
        for run, job, ctx in batch:
            task = self._loop.create_task(self._execute(run, job, ctx))
            ctx._task = task
            if ctx._cancelled:  # given up before its task existed (shutdown)
                task.cancel()
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _execute(self, run: ClaimedRun, job: JobDef, ctx: AsyncJobContext) -> None:
        assert self._slots is not None
        began: float | None = None
        outcome: Outcome | None
        try:
            async with self._slots:
                began = self._begin(run)
                outcome = await execute_async(run, job, ctx)
        except asyncio.CancelledError as exc:
            # the runner gave up on it (timeout, shutdown, lost lock session) or the handler
            # let a cancellation of its own escape: a failure, which the Worker records only
            # if the attempt is still its own
            reason = ctx._cancelled
            outcome = failure(run, job, AttemptTimedOut(reason) if reason else exc, ctx)
        except BaseException as exc:  # never lose a run to a bug in the runner itself
            cls, msg = error_text(exc)
            outcome = Outcome(run.id, run.fence, "failed", error_class=cls, error_message=msg,
                              retry_delay=1.0)
        self._done(run, outcome, began if began is not None else self._loop.time())

    def shutdown(self) -> None:
        """Cancel what still runs (the Worker released those runs already), let the tasks
        roll back for up to CLOSE_TIMEOUT seconds, close the pools, stop the loop."""
        if not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(CLOSE_TIMEOUT + 5.0)
        except Exception as exc:  # a pool that would not close: the process is exiting anyway
            log.warning("closing the async handlers' event loop: %s", exc)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)
        if not self._thread.is_alive():
            self._loop.close()

    async def _close(self) -> None:
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT)
            if pending:
                log.warning("%d async handler(s) ignored their cancellation; abandoned", len(pending))
        for pool in (self._pool, self._control):
            if pool is not None:
                with contextlib.suppress(Exception):
                    await pool.close(timeout=1.0)
