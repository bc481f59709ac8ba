"""The executor of one process: started runs to their handlers, per lane.

Each served lane has its own handler threads (``HandlerPool``, the lane's slots) and its own
``ctx.db`` pool of as many connections; heartbeats and effect-log writes use one small control
pool (``max(2, workers // 4)``), so a handler holding ``ctx.db`` can always record its progress
and effects. ``async def`` handlers run on an asyncio event loop thread per lane (runner/aio.py
says why one per lane), started on the lane's first async run: at most ``async_slots(lane)``
at once, their ``ctx.db`` from the lane's async pool of at most ``min(that, workers)``
connections taken on first use, their heartbeats on two more.

``start`` counts a run in flight (runner/worker/budget.py), checks that its attempt holds its
key (``_key_held``), and hands it to a handler; a handler's end goes to the completer. The
``timeouts`` duty gives up handlers past their job's timeout: the attempt is recorded as
``timed_out`` (the run fails and retries, or goes dead), ``ctx.heartbeat()`` raises
``AttemptTimedOut`` and a statement running on ``ctx.db`` is cancelled. Python cannot kill a
thread: a handler that ignores both keeps its thread until it returns, but the pool starts a
replacement thread, and whatever the late handler tries to record is refused.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from runner.aio import AsyncHandlers
from runner.context import AsyncJobContext, JobContext, RunContext
from runner.errors import AttemptTimedOut, LockUnavailable, error_text
from runner.events import event
from runner.model.jobs import JobDef
from runner.store import ledger
from runner.store.ledger import ClaimedRun, Outcome, Owner
from runner.worker.attempt import crash_point, execute, failure
from runner.worker.attempts import Attempts
from runner.worker.budget import Capacity
from runner.worker.config import LoopConfig, first_line
from runner.worker.metrics import Metrics
from runner.worker.session import LockSession

log = logging.getLogger("runner.loop")

# the error class of an attempt released because a runner session still held its run's key
LOCK_BUSY = "runner.LockBusy"
# seconds before such a released run is due again (runner.finish_attempts_v1, revision
# 0024_sessions: the run keeps its trigger), doubled at each release in a row: a fast poll
# would otherwise claim it again while a loaded holder has still not unlocked; and how many
# releases in a row a run gets before the next such attempt counts (1 + 2 + 4 + 8 s)
LOCK_BUSY_DELAY = 1.0
LOCK_BUSY_RELEASES = 4

Finished = Callable[[ClaimedRun, Outcome | None], None]  # an outcome to the completer


class HandlerPool:
    """A fixed number of handler threads; ``compensate()`` adds a thread for one stuck in a
    handler the runner gave up on, and the next thread to finish a task retires."""

    def __init__(self, size: int) -> None:
        self._queue: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]] | None] = (
            queue.SimpleQueue())
        self._lock = threading.Lock()
        self._surplus = 0
        self._threads = 0
        for _ in range(size):
            self._spawn()

    def _spawn(self) -> None:
        self._threads += 1
        threading.Thread(target=self._work, name="runner-handler", daemon=True).start()

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        self._queue.put((fn, args))

    def compensate(self) -> None:
        with self._lock:
            self._surplus += 1
            self._spawn()

    def shutdown(self) -> None:
        with self._lock:
            for _ in range(self._threads):
                self._queue.put(None)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, args = item
            fn(*args)
            with self._lock:
                if self._surplus > 0:
                    self._surplus -= 1
                    self._threads -= 1
                    return


class Executor:
    """Per-lane handler threads, ``ctx.db`` pools and event loops of one process (module
    docstring)."""

    def __init__(self, url: str, config: LoopConfig, jobs: dict[str, JobDef], owner: Owner,
                 session: LockSession, capacity: Capacity, attempts: Attempts, finished: Finished,
                 metrics: Metrics, stats: dict[str, int], wake: threading.Event) -> None:
        self.url = url
        self.config = config
        self.jobs = jobs
        self.owner = owner
        self.session = session
        self.capacity = capacity
        self.attempts = attempts
        self._finished = finished
        self.metrics = metrics
        self.stats = stats
        self._wake = wake
        self.control: ConnectionPool[Any] | None = None
        self._lock = threading.Lock()  # the loop thread and handler threads make lanes' resources
        self._handlers: dict[str, HandlerPool] = {}
        self._pools: dict[str, ConnectionPool[Any]] = {}
        self._async: dict[str, AsyncHandlers] = {}

    def open(self, lanes_: tuple[str, ...]) -> None:
        """The control pool, and each served lane's handler threads and ctx.db pool."""
        self.control = ConnectionPool(
            self.url, min_size=0, max_size=max(2, self.config.workers // 4), open=True,
            kwargs={"autocommit": True, "application_name": "runner-control"},
        )
        for lane in lanes_:
            self._lane(lane)

    # -- starting runs ----------------------------------------------------------------------

    def start(self, runs: list[ClaimedRun]) -> None:
        """Runs this process just started (claimed, taken over, retried, a backfill pass's):
        counted in flight, then each to its handler, or, when its attempt could not take its
        key, straight to the completer."""
        if not runs:
            return
        self.metrics.inflight.set(self.capacity.inflight.started(run.lane for run in runs))
        locked = []
        for run in runs:
            if not run.locked:
                outcome = self._key_held(run)
                if outcome is not None:
                    self._finished(run, outcome)
                    continue
            locked.append(run)
        self._launch(locked)

    def _key_held(self, run: ClaimedRun) -> Outcome | None:
        """The outcome of an attempt that started while another session held its run's key
        (None: the key is free now, and this session took it: the attempt runs).

        For a moment that is ordinary: a runner records an attempt's outcome, then unlocks
        the run a round trip later, and a retry due at once may be claimed in between (by
        another runner; this one's own claims share its session, whose lock is re-entrant).
        When a registered runner session holds the key (runner.runner_sessions_v1), or a
        runner's condition session inside an evaluation does (runner.condition_sessions_v1: a
        pause condition that took run keys, which fails for it, issue 28 point 3), the
        attempt is released, uncounted, with its trigger kept, and the run is due again
        LOCK_BUSY_DELAY later, twice that after a second release in a row, and so on
        (revision 0024_sessions; before, due at once, and a second release in a row counted:
        under load a holder had not always unlocked by the next poll). At most
        LOCK_BUSY_RELEASES in a row (a runner session that keeps the key would make a run
        loop for ever): after those, and whenever the holder is any other session (an
        application sharing RUNNER_LOCK_NAMESPACE, or a squatter), the attempt fails with
        LockUnavailable and counts against max_attempts like any other, so the run ends
        dead, never retried forever; the takeover duty ends a squatter where it may
        (runner/worker/orphans.py). Never waiting with the run running and its key free: the
        takeover duty leaves such a run alone only for a few seconds (take_over_orphans: a
        fresh attempt of a live runner session)."""
        try:
            got, by_runner, streak = ledger.key_holder(self.session.conn(), self.owner.namespace,
                                                       run.id, run.fence)
        except psycopg.Error as exc:  # the lock session is gone: count it (the fence decides)
            log.debug("run %s: reading its key's holder failed: %s", run.id, first_line(exc))
            got, by_runner, streak = False, False, 0
        if got:  # the holder let go meanwhile
            return self._still_current(run)
        if by_runner and streak < LOCK_BUSY_RELEASES:
            delay = LOCK_BUSY_DELAY * 2 ** streak
            event(log, "attempt_released", logging.INFO, job=run.job_name, slot=run.slot,
                  partition=run.partition_key, run_id=run.id, attempt=run.attempt, fence=run.fence,
                  reason="its key is still held by a runner session (an outcome being recorded)",
                  due_in=f"{delay:g}s")
            return Outcome(run.id, run.fence, "released", error_class=LOCK_BUSY,
                           error_message="the run's key was held by a runner session; released "
                                         "uncounted, to be claimed again",
                           retry_delay=delay)
        if by_runner:
            log.error("run %s: attempt %s failed: its advisory lock key is still held by a runner "
                      "session, as at the %d attempts before it", run.id, run.attempt, streak)
        else:
            log.error("run %s: attempt %s failed: its advisory lock key is held by a session "
                      "that is not this runner's (a squatter, or an application sharing "
                      "RUNNER_LOCK_NAMESPACE; runner.alerts names it: lock_squatter)",
                      run.id, run.attempt)
        return failure(run, self.jobs[run.job_name], LockUnavailable(
            "advisory lock key held by another session"), None)

    def _still_current(self, run: ClaimedRun) -> Outcome | None:
        """Having just taken the key of an attempt that started without it: None when the
        run is still running at the attempt's fence (the attempt runs, holding the key); else
        the key goes back and the attempt is closed without running its handler. Between
        its start and now the process may have hung for longer than the takeover's few
        seconds of patience (take_over_orphans): the run was then taken over, maybe even
        finished, and running the handler would do its work again (the outcome refused
        after the fact). The fence decides: the outcome returned is refused (the attempt
        is marked stale)."""
        try:
            current = ledger.run_is_current(self.session.conn(), run.id, run.fence)
        except psycopg.Error as exc:  # the lock session is gone, the key with it
            log.debug("run %s: reading its fence failed: %s", run.id, first_line(exc))
            current = False
        if current:
            return None
        with contextlib.suppress(psycopg.Error):
            ledger.unlock_runs(self.session.conn(), self.owner.namespace, [run.id])
        event(log, "attempt_lost", logging.WARNING, job=run.job_name, slot=run.slot,
              partition=run.partition_key, run_id=run.id, attempt=run.attempt, fence=run.fence,
              reason="taken over before this attempt took its key; its handler is not run")
        return Outcome(run.id, run.fence, "failed", error_class="runner.OwnerLost",
                       error_message="taken over before the attempt took its key")

    def _launch(self, runs: list[ClaimedRun]) -> None:
        """Hand started, locked attempts to their handlers (threads, or their lane's event
        loop). One claim starts up to a thousand runs, so what does not differ from run to run
        is done once for the batch: each lane's resources and each job's metric children
        looked up once, the registry's lock taken once, the started counter bumped once per
        job and trigger."""
        if not runs:
            return
        m = self.metrics
        lanes: dict[str, tuple[HandlerPool, ConnectionPool[Any]]] = {}
        on_checkpoint: dict[str, Callable[[], None]] = {}
        started: dict[tuple[str, str], int] = {}
        entries: list[tuple[ClaimedRun, RunContext]] = []
        finishing = self.attempts.finishing
        for run in runs:
            job = self.jobs[run.job_name]
            lane = lanes.get(run.lane)
            if lane is None:
                lane = lanes[run.lane] = self._lane(run.lane)
            ctx: RunContext
            if job.is_async:
                ctx = self._async_for(run.lane).context(run, job)
            else:
                ctx = JobContext(run, job, lane[1], self.control)
            ctx._may_finish = functools.partial(finishing, run)
            inc = on_checkpoint.get(run.job_name)
            if inc is None:
                inc = on_checkpoint[run.job_name] = m.of(m.checkpoints, run.job_name).inc
            ctx._on_checkpoint = inc
            entries.append((run, ctx))
            key = (run.job_name, run.trigger)
            started[key] = started.get(key, 0) + 1
        self.attempts.add_held(entries)
        for (job_name, trigger), n in started.items():
            m.of(m.started, job_name, trigger).inc(n)
        claimed = log.isEnabledFor(logging.INFO)
        for run, ctx in entries:
            if claimed:
                event(log, "job_claimed", job=run.job_name, slot=run.slot, partition=run.partition_key,
                      run_id=run.id, attempt=run.attempt, fence=run.fence, trigger=run.trigger)
            crash_point("after_claim")
            if isinstance(ctx, AsyncJobContext):
                self._async_for(run.lane).submit(run, self.jobs[run.job_name], ctx)
            else:
                lanes[run.lane][0].submit(self._execute, run, ctx)

    # -- handlers ---------------------------------------------------------------------------

    def _execute(self, run: ClaimedRun, ctx: JobContext) -> None:
        began = self._begin(run)
        try:
            outcome = execute(run, self.jobs[run.job_name], self._lane(run.lane)[1], ctx)
        except BaseException as exc:  # never lose a run to a bug in the runner itself
            cls, msg = error_text(exc)
            outcome = Outcome(run.id, run.fence, "failed", error_class=cls, error_message=msg,
                              retry_delay=1.0)
        self._done(run, outcome, began)

    def _begin(self, run: ClaimedRun) -> float:
        """A handler (sync or async) begins: its timeout counts from now (monotonic)."""
        event(log, "attempt_started", logging.DEBUG, job=run.job_name, slot=run.slot,
              partition=run.partition_key, run_id=run.id, attempt=run.attempt, fence=run.fence)
        began = time.monotonic()
        job = self.jobs[run.job_name]
        if job.timeout:
            # the timeout counts from here: a run claimed ahead (max_inflight > workers) and
            # waiting for a handler thread is not running yet
            self.attempts.begin(run, began + job.timeout.total_seconds())
            self._wake.set()  # the loop sleeps until the nearest deadline
        return began

    def _done(self, run: ClaimedRun, outcome: Outcome | None, began: float) -> None:
        """A handler (sync or async) ended: its outcome to the completer, unless the runner
        gave up on the attempt meanwhile (timeout, shutdown: recorded already)."""
        self.metrics.of(self.metrics.duration, run.job_name).observe(time.monotonic() - began)
        if self.attempts.end(run):
            self._finished(run, outcome)
        else:
            log.warning("run %s: the handler ended after the runner gave up on it "
                        "(timeout or shutdown); its outcome is discarded", run.id)

    def enforce_timeouts(self) -> None:
        """The ``timeouts`` duty: handlers past their job's timeout are given up (module
        docstring)."""
        for a in self.attempts.overdue(time.monotonic()):
            job = self.jobs[a.run.job_name]
            reason = f"timed out after {job.timeout}"
            a.ctx.cancel(reason)
            if not job.is_async:  # an async one's task is cancelled: no thread is stuck
                self._lane(a.run.lane)[0].compensate()
            self.stats["timed_out"] += 1
            event(log, "attempt_timed_out", logging.WARNING, job=a.run.job_name, slot=a.run.slot,
                  partition=a.run.partition_key, run_id=a.run.id, attempt=a.run.attempt,
                  fence=a.run.fence, reason=reason)
            outcome = failure(a.run, job, AttemptTimedOut(reason), a.ctx)
            self._finished(a.run, Outcome(
                outcome.run_id, outcome.fence, outcome.status, attempt_status="timed_out",
                error_class="runner.Timeout", error_message=reason,
                retry_delay=outcome.retry_delay, processed=outcome.processed, failed=outcome.failed))

    def hand_off_all(self) -> None:
        """At shutdown, before the grace: every running attempt's ``ctx.stopping`` becomes
        true; a handler that checkpoints stops at its next checkpoint and its run goes to
        another runner at once (runner/worker/checkpoints.py)."""
        for active in self.attempts.running():
            active.ctx.hand_off()

    def release_all(self) -> None:
        """At shutdown, after the grace: what still runs is asked to stop, and its run goes
        back to pending, uncounted, for another process to start at once."""
        for active in self.attempts.take_all():
            active.ctx.cancel("the runner is shutting down")
            self.stats["released"] += 1
            event(log, "run_released", logging.WARNING, job=active.run.job_name, slot=active.run.slot,
                  partition=active.run.partition_key, run_id=active.run.id, attempt=active.run.attempt,
                  fence=active.run.fence, reason=f"still running after the {self.config.grace}s grace")
            self._finished(active.run, Outcome(active.run.id, active.run.fence, "released",
                                               attempt_status="released"))

    # -- each lane's resources ----------------------------------------------------------------

    def _async_for(self, lane: str) -> AsyncHandlers:
        """A lane's event loop for async handlers, started on the lane's first async run
        (runner/aio.py: one loop per lane, so bulk async work never takes a realtime async
        run's place or turn)."""
        with self._lock:
            loop = self._async.get(lane)
            if loop is None:
                assert self.control is not None
                size = self.capacity.async_slots(lane)
                loop = AsyncHandlers(self.url, size, min(size, self.config.workers), self.control,
                                     self._begin, self._done, lane=lane)
                loop.start()
                self._async[lane] = loop
            return loop

    def _lane(self, lane: str) -> tuple[HandlerPool, ConnectionPool[Any]]:
        """A lane's handler threads and ctx.db pool, made on first use (a run of a lane added
        after the start, or taken over)."""
        with self._lock:  # the loop thread and handler threads
            handlers = self._handlers.get(lane)
            pool = self._pools.get(lane)
            if handlers is None or pool is None:
                n = self.capacity.slots(lane)
                handlers = self._handlers[lane] = HandlerPool(n)
                pool = self._pools[lane] = ConnectionPool(
                    self.url, min_size=0, max_size=n, open=True,
                    kwargs={"autocommit": True, "application_name": f"runner-{lane}"[:63]})
            return handlers, pool

    def stop_handlers(self) -> None:
        """Every lane's handler threads and event loops end (their work was released)."""
        with self._lock:
            all_handlers, all_async = list(self._handlers.values()), list(self._async.values())
        for handlers in all_handlers:
            handlers.shutdown()
        for loop in all_async:
            loop.shutdown()

    def close_pools(self) -> None:
        with self._lock:
            pools = [*self._pools.values(), self.control]
        for pool in pools:
            if pool is not None:
                pool.close(timeout=1.0)
