"""The tick: due slots -> one claim statement -> a bounded handler pool -> batched outcomes.

One ``Worker`` per ``runner start`` process. Its threads and connections:

* the loop thread owns the *lock connection*: a long-lived session (autocommit) that issues
  the claims, so every run this process wins is locked by ``pg_try_advisory_lock`` in the
  claim statement itself, on the session that holds it for the run's whole attempt. The
  loop also beats for all running attempts (one statement), takes over runs whose owner is
  gone (runner/takeover.py), and starts due retries and queued runs;
* ``workers`` handler threads; a handler that touches ``ctx.db`` borrows a connection from a
  pool of at most ``workers`` connections for its transaction; heartbeats and effect-log
  writes use a separate small control pool (``max(2, workers // 4)``), so a handler holding
  ``ctx.db`` can always record its progress and effects;
* one completer thread with its own connection, which records finished attempts in batches
  (one ``finish_attempts`` statement for many runs) and then releases their locks. The
  session lock is re-entrant and the release follows the commit, so a retry due at once can
  be claimed in between: ``_locks`` holds one entry per hold, (run id, fence), and each
  attempt's end releases its own; an attempt that finds the key held by another session
  is released uncounted when a runner session holds it (``_key_held``).

A background thread advances the gap scan's watermarks every minute on one more connection
(runner/gapscan.py), another evaluates backfill pause conditions on one more
(runner/conditions.py: untrusted SQL, never on the lock connection), and another prunes old
runs by the retention policy on one more (runner/retention.py). Lanes (runner/lanes.py): the
handler threads and the ``ctx.db`` pool are per served lane, each of its lane's slots
(``workers`` for realtime, or for a process serving one lane). So a process holds at most
``S + max(2, workers // 4) + 5`` connections, S the sum of its lanes' slots, however many
runs it executes. A job an
operator retired starts nothing after its retirement instant: the claim statements skip its
later slots, retries and reruns (read at every claim, so a live runner stops within a poll
interval).

``async def`` handlers run on an asyncio event loop thread per lane (runner/aio.py says why
one per lane), started on the lane's first async run: at most ``_async_slots(lane)`` at once
(realtime: ``async_workers``, default ``workers``; another lane: its ``--lane-slots`` value,
else ``async_workers``), their ``ctx.db`` from the lane's async pool of at most
``min(that, workers)`` connections taken on first use, their heartbeats on two more. The loop
thread claims, beats and times them out like sync runs, and their outcomes join the same
completer batches.

Shares: when several runners serve a job, each slot's rows are shared out among them (the
live runners serving the job, from runner.instances, ordered by instance id; a row's share
is its idempotency key's first 32 bits modulo their number). A runner claims its own share
at once and sets the others' shares aside; ``steal_after`` seconds later (0.5 s) it looks
whether every partition of that slot has a run, and if not, claims the rest itself, from the
end of the others' shares toward where they are working. So runners serving the same jobs
do not queue behind each other's inserts at the instant a slot falls due (an insert that
meets another session's uncommitted row waits for that session's commit). A runner killed
outright drops out of the shares at the others' next poll (its lock session is gone from
pg_stat_activity); one that hangs or is overloaded delays its share by ``steal_after`` at
most, until its heartbeat ages out (``3 x instance_heartbeat`` = 15 s). A share is an
order of claims, never an exclusion: every row is still claimed by one INSERT ... ON CONFLICT
DO NOTHING, and whoever inserts first owns the run.

Each tick runs the loop's *duties* (runner/duties.py) in a fixed order written down in
``Worker._make_duties``: timeouts, fan-out, steal, claims, misfire, then every poll interval
requeue_waiting, shares, takeover and retries, then backfill plans, beats and the clock. The
order is also the lanes' priority (realtime > correction > manual > bulk): live slots first,
then queued runs lane by lane, each within its own handler slots here and its fleet budget,
then plans; only the jobs of served lanes are fanned out (``Worker.live``).
Each duty has its own cadence and error boundary: one that raises is logged, counted
(``runner_duty_failures_total{duty}``) and retried with backoff while the others go on; only
a lost lock session goes up to the loop, which reconnects.

The loop sleeps until the next slot of any job or the poll interval, whichever is sooner,
and wakes at once when a handler finishes while work is waiting. Slot instants are compared
with the database clock (an offset measured at start and refreshed every minute), and the
claim statement itself refuses slots the database does not yet consider due, so runners on
machines with skewed clocks agree.

Timeouts: a handler running longer than its job's ``timeout`` is given up: its attempt is
recorded as ``timed_out`` (the run fails and retries, or goes dead), ``ctx.heartbeat()``
raises ``AttemptTimedOut`` and a statement running on ``ctx.db`` is cancelled. Python cannot
kill a thread: a handler that ignores both keeps its thread until it returns, but the pool
starts a replacement thread, and whatever the late handler tries to record is refused.

Shutdown (SIGTERM/SIGINT): stop claiming, wait up to ``grace`` seconds for running handlers,
then *release* the runs still running: each goes back to ``pending`` (trigger ``recovery``,
the attempt not counted against ``max_attempts``) and its lock is dropped, so another process
starts it at once.

Late slots (not started within the job's grace: every runner was down, or this one was
stopped or overloaded) are never claimed as if on time: the loop hands the job to the misfire
duty (runner/misfire.py), which applies the job's policy in bounded batches.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import psycopg
from psycopg_pool import ConnectionPool

from runner import __version__, backfill, conditions, gapscan, lanes, ledger, misfire, retention, takeover
from runner.aio import AsyncHandlers
from runner.app import JobDef, Retention, Runner
from runner.attempt import crash_point, execute, failure
from runner.context import JobContext, RunContext
from runner.duties import Duties, Duty, on_own_connection
from runner.errors import AttemptTimedOut, LockUnavailable, error_text
from runner.events import event
from runner.fanout import MAX_PARTITIONS, plan_slot
from runner.ledger import ClaimedRun, Outcome, Owner, SlotClaim
from runner.metrics import Metrics
from runner.schedule import idempotency_keys

log = logging.getLogger("runner.loop")

PREPARE_AHEAD = timedelta(seconds=1)  # claims of a slot are built this long before it is due
LANE_YIELD = 0.05  # seconds before a slot during which the backfill lane does not start a pass
# the error class of an attempt released because a runner session still held its run's key
LOCK_BUSY = "runner.LockBusy"
# seconds before such a released run is due again (runner.finish_attempts_v1, revision
# 0024_sessions: the run keeps its trigger), doubled at each release in a row: a fast poll
# would otherwise claim it again while a loaded holder has still not unlocked; and how many
# releases in a row a run gets before the next such attempt counts (1 + 2 + 4 + 8 s)
LOCK_BUSY_DELAY = 1.0
LOCK_BUSY_RELEASES = 4


@dataclass(frozen=True)
class LoopConfig:
    workers: int = 10
    max_inflight: int = 0  # runs claimed and not yet finished; 0 means 2 x workers
    poll_interval: float = 1.0  # seconds between polls for retries, queued runs, takeovers
    claim_batch: int = 1000  # rows per claim statement at most
    finish_batch: int = 500  # outcomes per finish statement at most
    instance_heartbeat: float = 5.0
    grace: float = 30.0  # seconds running handlers get at shutdown before their runs are released
    watermark_interval: float = 60.0  # seconds between advances of the gap-scan watermarks
    steal_after: float = 0.5  # seconds before other runners' unclaimed shares of a slot are claimed
    max_backlog: int = 0  # claims queued before fan-out of later slots waits; 0: 10 x claim_batch
    max_partitions: int = MAX_PARTITIONS  # per slot; more fails the slot (recorded, alerting)
    prometheus_url: str | None = None  # where backfill pause conditions' Prometheus queries go
    async_workers: int = 0  # async def handlers running at once (runner/aio.py); 0 means workers
    retention_default: Retention | None = None  # jobs without retention=; None: never pruned
    prune_interval: float = 60.0  # seconds between passes of the retention duty
    prune_batch: int = 1000  # runs pruned per pass at most
    lanes: tuple[str, ...] | None = None  # the lanes this process serves; None: every lane
    lane_slots: tuple[tuple[str, int], ...] = ()  # handler slots per lane (runner/lanes.py)

    @property
    def inflight_cap(self) -> int:
        return self.max_inflight or 2 * self.workers

    @property
    def backlog_cap(self) -> int:
        return self.max_backlog or 10 * self.claim_batch


def connect(url: str, **kw: Any) -> psycopg.Connection[Any]:
    conn = psycopg.connect(url, autocommit=True, application_name="runner", **kw)
    conn.execute("SET TIME ZONE 'UTC'")
    conn.execute("SET jit = off")  # short statements by key: compiling them never pays
    return conn


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


@dataclass
class Deferred:
    """Other runners' share of one slot of a job, set aside until ``release`` (monotonic)."""

    release: float
    job_name: str
    slot: datetime
    claims: list[SlotClaim]


@dataclass
class Active:
    """A run this process is executing."""

    run: ClaimedRun
    ctx: RunContext  # a JobContext, or an AsyncJobContext for an async def handler
    deadline: float | None = None  # monotonic; set when the handler begins (job.timeout)


class Worker:
    """One runner process's scheduling loop, handler pool and completer."""

    def __init__(self, app: Runner, url: str, config: LoopConfig | None = None,
                 namespace: int = 21077, metrics: Metrics | None = None) -> None:
        self.app = app
        self.metrics = metrics or Metrics()
        self.url = url
        self.config = config or LoopConfig()
        self.jobs: dict[str, JobDef] = app.jobs
        self.owner = Owner.here(uuid4(), namespace)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock_conn: psycopg.Connection[Any] | None = None
        self._control: ConnectionPool[Any] | None = None
        # async def handlers: whether the app has any, and each lane's event loop (runner/aio.py)
        self._has_async = any(job.is_async for job in self.jobs.values())
        self._lane_async: dict[str, AsyncHandlers] = {}
        self._finished: queue.SimpleQueue[tuple[ClaimedRun, Outcome | None] | None] = queue.SimpleQueue()
        self._completer: threading.Thread | None = None
        # (run id, fence) -> the attempt this process is executing: by fence too, since one
        # process may run two attempts of a run (an older one it lost with its lock session,
        # still in its handler, and a newer one it took over itself)
        self._active: dict[tuple[int, int], Active] = {}
        self._active_lock = threading.Lock()
        self._inflight = 0
        self._pending: deque[SlotClaim] = deque()
        self._waiting: list[SlotClaim] = []  # overlap='wait' slots, retried every poll
        self._deferred: deque[Deferred] = deque()  # others' shares, in release order
        self._shares: dict[str, tuple[int, int]] = {}  # job -> (this runner's share, runners)
        self._prepared: dict[str, tuple[datetime, list[SlotClaim]]] = {}  # job -> its next slot's claims
        self._next_slot: dict[str, datetime] = {}
        # late slots handed to the misfire duty, per job, oldest range first
        self._late: dict[str, list[misfire.LateRange]] = {}
        self._late_retry: dict[str, float] = {}  # job -> monotonic time before which not to retry
        self._offset = 0.0  # database clock minus local clock, seconds
        self._next_lane = 0.0
        self._lane_due = False
        # lanes (runner/lanes.py): what this process serves, and each lane's handler threads,
        # ctx.db pool and runs in flight here; set at start
        self.served = lanes.Served((), {}, True)
        self.live: dict[str, JobDef] = {}  # the jobs whose live slots this process claims
        self._lane_handlers: dict[str, HandlerPool] = {}
        self._lane_pools: dict[str, ConnectionPool[Any]] = {}
        self._lane_inflight: dict[str, int] = {}
        self._lane_lock = threading.Lock()
        self._lanes_at = 0.0  # serving every lane: when the lane list was last read
        self._lane_runs: set[int] = set()  # runs the backfill lane started, still running
        # the attempts (run id, fence) whose advisory lock this process's lock session took:
        # one entry per hold of the re-entrant session lock. Each attempt's end releases its
        # own hold, and only its own: a refused (stale) outcome of an older attempt must never
        # unlock the newer attempt's lock, and a retry this process claims between the older
        # attempt's outcome commit and its unlock holds the key twice, so both ends unlock.
        self._locks: set[tuple[int, int]] = set()
        self._poll_soon = False  # a catch-up run ended: start the next one without waiting
        self._rng = random.Random()
        self._backlog_cap = self.config.backlog_cap
        leases = [j.lease.total_seconds() for j in self.jobs.values()] or [60.0]
        self._beat_every = min(max(min(leases) / 3, 0.5), 10.0)
        self.duties = self._make_duties()
        self.stats = {"claimed": 0, "conflicts": 0, "succeeded": 0, "failed": 0, "stale": 0,
                      "recovered": 0, "timed_out": 0, "released": 0, "stolen": 0}

    # -- life cycle -------------------------------------------------------------------

    def start(self) -> None:
        """Connect, register this process, sync job definitions, and set up the schedule."""
        self._lock_conn = connect(self.url)
        try:
            self.served = lanes.resolve(self._lock_conn, self.config.lanes, dict(self.config.lane_slots),
                                        self.config.workers,
                                        [(j.name, j.lane) for j in self.jobs.values()])
        except BaseException:
            self._lock_conn.close()
            self._lock_conn = None
            raise
        self.live = {name: job for name, job in self.jobs.items() if self.served.serves(job.lane)}
        self._lanes_at = time.monotonic()
        tracked = ledger.sync_jobs(self._lock_conn, list(self.jobs.values()),
                                   retention_default=self.config.retention_default)
        # registered as serving only the jobs whose live slots it claims: a slot's shares are
        # split among the processes that claim it
        ledger.register_instance(self._lock_conn, self.owner, __version__, list(self.live))
        self._refresh_shares()
        self._measure_offset()
        self._control = ConnectionPool(
            self.url, min_size=0, max_size=max(2, self.config.workers // 4), open=True,
            kwargs={"autocommit": True, "application_name": "runner-control"},
        )
        for lane in self.served.lanes:  # each served lane's handler threads and ctx.db pool
            self._lane_resources(lane)
        self._completer = threading.Thread(target=self._complete_forever, name="runner-completer",
                                           daemon=True)
        self._completer.start()
        # beside the loop, each on a thread and connection of its own (runner/duties.py)
        failed = self._duty_failed
        on_own_connection("gapscan", lambda: connect(self.url), gapscan.Advancer(self._stop), self._stop,
                          self.config.watermark_interval, on_failure=failed)
        on_own_connection("retention", lambda: connect(self.url),
                          retention.pass_of(self.owner.namespace, self.config.prune_batch),
                          self._stop, self.config.prune_interval, on_failure=failed)
        # backfill pause conditions: untrusted SQL, never on the lock session
        on_own_connection("conditions", lambda: conditions.connect(self.url),
                          conditions.pass_of(self.owner.namespace, list(self.jobs),
                                             self.config.prometheus_url),
                          self._stop, conditions.POLL, first_now=True, on_failure=failed)
        # slots due before a job's current schedule came into force are the earlier schedule's
        # (a redeploy that changed it): this definition never claims them
        since = ledger.schedules_since(self._lock_conn, list(self.jobs))
        # nor before its newest owed span: not a slot of a retirement or pause that just ended
        owed = ledger.owed_since(self._lock_conn, list(self.jobs))
        # late ranges a runner left open (stopped or killed midway): resumed first, each with
        # the ruling it was given (runner.misfire_ranges)
        for name, late in misfire.open_ranges(self._lock_conn, list(self.live.values())):
            self._late.setdefault(name, []).append(late)
        now = self.now()
        for job in self.live.values():
            # on-time slots from now on (within the job's tracked range, under its current
            # schedule); whatever was missed before is the misfire duty's
            cutoff = misfire.cutoff_for(job, now)
            first = max(cutoff, tracked[job.name] - misfire.EPSILON,
                        since.get(job.name, tracked[job.name]) - misfire.EPSILON,
                        owed.get(job.name, tracked[job.name]) - misfire.EPSILON)
            self._next_slot[job.name] = job.schedule.next_after(first)
            if cutoff >= tracked[job.name]:  # the downtime, decided from the newest complete slot
                self._hand_late(job.name, None, job.schedule.latest_at_or_before(cutoff))
        event(log, "runner_started", pid=self.owner.pid, jobs=len(self.jobs),
              workers=self.config.workers, instance=str(self.owner.instance),
              lanes=",".join(f"{lane}={n}" for lane, n in self.served.slots.items())
              + ("" if not self.served.every else " (every lane)"))

    def run(self) -> None:
        """Run until ``stop()``; then shut down (see module docstring)."""
        if self._lock_conn is None:
            self.start()
        try:
            while not self._stop.is_set():
                try:
                    delay = self.tick()
                except psycopg.OperationalError as exc:
                    if self._session_alive():
                        log.exception("database error in the loop (the session is alive); "
                                      "continuing in 1 s")
                        self._wake.wait(1.0)
                        continue
                    log.warning("database connection lost (%s); reconnecting", _first_line(exc))
                    self._reconnect()
                    continue
                except Exception:
                    log.exception("unexpected error in the loop; continuing in 1 s")
                    delay = 1.0
                if delay > 0:
                    self._wake.wait(delay)
                    self._wake.clear()
        finally:
            self.shutdown()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def shutdown(self) -> None:
        """Stop claiming; give running handlers ``grace`` seconds; release what still runs;
        record outcomes; release locks; deregister."""
        self._stop.set()
        deadline = time.monotonic() + self.config.grace
        while self._active and time.monotonic() < deadline:
            self._wake.wait(min(0.05, max(deadline - time.monotonic(), 0.0)))
            self._wake.clear()
            self._enforce_timeouts()
            self._beat_while_stopping()
        for active in self._take_all_active():
            active.ctx.cancel("the runner is shutting down")
            self.stats["released"] += 1
            event(log, "run_released", logging.WARNING, job=active.run.job_name, slot=active.run.slot,
                  partition=active.run.partition_key, run_id=active.run.id, attempt=active.run.attempt,
                  fence=active.run.fence, reason=f"still running after the {self.config.grace}s grace")
            self._finished.put((active.run, Outcome(active.run.id, active.run.fence, "released",
                                                    attempt_status="released")))
        with self._lane_lock:
            all_handlers, all_pools = list(self._lane_handlers.values()), list(self._lane_pools.values())
            all_async = list(self._lane_async.values())
        for handlers in all_handlers:
            handlers.shutdown()
        for loop in all_async:
            loop.shutdown()
        if self._completer is not None:
            self._finished.put(None)
            self._completer.join()
        if self._lock_conn is not None and not self._lock_conn.closed:
            try:
                ledger.stop_instance(self._lock_conn, self.owner)
            except psycopg.Error as exc:
                log.warning("could not deregister: %s", _first_line(exc))
            finally:
                self._lock_conn.close()
        for pool in [*all_pools, self._control]:
            if pool is not None:
                pool.close(timeout=1.0)
        event(log, "runner_stopped", pid=self.owner.pid, **self.stats)

    def _beat_while_stopping(self) -> None:
        """During the shutdown grace, running attempts and this instance keep beating: a
        lease shorter than the grace must not make peers end this session and re-run work
        that is finishing normally."""
        mono = time.monotonic()
        beats = self.duties["beats"]
        if mono < beats.next_at or not self._session_alive():
            return
        beats.next_at = mono + self._beat_every
        try:
            self._beat()
            ledger.heartbeat_instance(self._conn(), self.owner)
        except psycopg.Error as exc:
            log.warning("heartbeat during shutdown failed: %s", _first_line(exc))

    # -- the tick ---------------------------------------------------------------------

    def now(self) -> datetime:
        """The database clock, estimated locally."""
        return datetime.fromtimestamp(time.time() + self._offset, UTC)

    def _make_duties(self) -> Duties:
        """The tick's duties, in the order they see the ledger (runner/duties.py: each has its
        own cadence and error boundary; a failing duty is retried, the others go on):

        1. ``timeouts``: give up handlers past their timeout, so their capacity is known;
        2. ``fan_out``: due slots become claims (slots past grace become late ranges);
        3. ``steal``: other runners' shares of a slot whose time is up;
        4. ``claims``: on-time claims, before anything else touches the ledger this tick;
        5. ``misfire``: late ranges decided after this tick's claims (a range is fixed when it
           is handed over, so on-time claims cannot hide late slots);
        6. every poll interval: ``requeue_waiting`` (overlap=wait rows back in line),
           ``shares`` (who serves which share), ``takeover`` (dead and hung owners of the
           served lanes) before ``retries`` (due retries and queued runs: catch-up and reruns
           in correction, approvals in manual, lane by lane under each lane's per-process
           slots and fleet budget), so recovery takes capacity first;
        7. ``lane``: backfill plans (bulk, or the plan's lane), last (see ``_lane``).
        Lanes (runner/lanes.py): each served lane has its own handler slots, so these duties
        order the claims (realtime > correction > manual > bulk) without one lane taking
        another's threads; while live claims wait here, no other lane claims anything;
        8. ``beats``, ``instance_beat``, ``clock``: liveness and the database clock's offset;
        9. ``prepare``: while idle, the claims of slots due within PREPARE_AHEAD.
        """
        poll = self.config.poll_interval
        return Duties([
            Duty("timeouts", self._enforce_timeouts),
            Duty("fan_out", lambda: self._fan_out(self.now())),
            Duty("steal", self._steal),
            Duty("claims", self._claim_free),
            Duty("misfire", self._decide_misfires),
            Duty("requeue_waiting", self._requeue_waiting, every=poll),
            Duty("shares", self._refresh_shares, every=poll),
            Duty("takeover", self._take_over, every=poll),
            Duty("retries", self._start_due_runs, every=poll),
            Duty("lane", self._lane),
            Duty("beats", self._beat, every=self._beat_every),
            Duty("instance_beat", lambda: ledger.heartbeat_instance(self._conn(), self.owner),
                 every=self.config.instance_heartbeat),
            Duty("clock", self._measure_offset, every=60.0),
            Duty("prepare", lambda: self._prepare(self.now()) if not self._pending else None),
        ], self._session_alive, on_failure=self._duty_failed, retry_after=poll)

    def _duty_failed(self, name: str) -> None:
        self.metrics.of(self.metrics.duty_failures, name).inc()

    def tick(self) -> float:
        """One pass over the duties that are due (``_make_duties``: their order and why).
        Returns how long the loop may sleep."""
        if self._poll_soon:  # a catch-up run ended, or misfire decisions queued runs
            self._poll_soon = False
            self.duties["retries"].soon()
        self.duties.run_due()
        return self._sleep_for(self.now())

    def _steal(self) -> None:
        if self._deferred and self._deferred[0].release <= time.monotonic():
            self._release_deferred()

    def _claim_free(self) -> None:
        if self._pending and self._free() > 0:
            self.claim(min(self._free(), self.config.claim_batch))

    def _requeue_waiting(self) -> None:
        if self._waiting:  # back in line; late ones become the misfire duty's
            waiting, self._waiting = self._waiting, []
            self._pending.extend(self._hand_late_claims(waiting))

    def _take_over(self) -> None:
        """Orphans of the served lanes only, each lane within its free in-flight room here
        (``_cap`` minus its runs in flight): a takeover counts toward the lane's cap like a
        claim, so a bulk process with one free slot takes over one bulk run, and a process
        serving only realtime never takes a bulk run."""
        free = {lane: max(self._free(lane), 0) for lane in self._claimable()}
        result = takeover.run_once(self._conn(), self.owner, list(self.jobs), free, default_lease=60.0)
        self.stats["recovered"] += len(result.taken)
        for r in result.taken:
            self.metrics.of(self.metrics.takeovers, r.job_name).inc()
        self._start(result.taken)

    def _start_due_runs(self) -> None:
        """Retries and queued runs, lane by lane (each within its free slots here and its
        fleet budget); while live claims wait in this process, only the live lanes'."""
        lanes_ = self._claimable()
        if self._pending:
            lanes_ = [lane for lane in lanes_ if lane in self._live_lanes()]
        limits = {lane: self._free(lane) for lane in lanes_}
        if any(n > 0 for n in limits.values()):
            _, runs = ledger.claim_due_runs(self._conn(), self.owner, list(self.jobs), limits)
            self._start(runs)

    def _claimable(self) -> list[str]:
        """The lanes this process claims from, by priority; serving every lane, the list is
        read again every 30 s (a lane added meanwhile is served too)."""
        if self.served.every and time.monotonic() - self._lanes_at > 30.0:
            self._lanes_at = time.monotonic()
            self.served = lanes.resolve(self._conn(), None, dict(self.config.lane_slots),
                                        self.config.workers)
        return list(self.served.lanes)

    def _live_lanes(self) -> set[str]:
        return {job.lane for job in self.live.values()}

    def _slots(self, lane: str) -> int:
        return self.served.slots.get(lane) or lanes.default_slots(lane, self.served.lanes or (lane,),
                                                                  self.config.workers)

    def _cap(self, lane: str) -> int:
        """Runs of a lane in flight on this process at most: its slots; realtime claims ahead
        (--max-inflight, by default 2 x its slots), as the loop always did."""
        if lane == lanes.REALTIME:
            return self.config.max_inflight or 2 * self._slots(lane)
        cap = self._slots(lane)
        if self._has_async:
            # an async handler holds no handler thread of its lane: the lane's async bound
            # (``_async_slots``) may be wider than its threads (a catch-up of 300 async
            # partitions runs at once, not one by one)
            cap = max(cap, self._async_slots(lane))
        return cap

    def _async_slots(self, lane: str) -> int:
        """How many async handlers of a lane run at once on this process (its event loop's
        semaphore, runner/aio.py): realtime ``--async-workers``; another lane its
        ``--lane-slots`` value when given, else ``--async-workers`` (as before lanes)."""
        wide = self.config.async_workers or self.config.workers
        if lane == lanes.REALTIME:
            return wide
        return dict(self.config.lane_slots).get(lane, wide)

    def _async_for(self, lane: str) -> AsyncHandlers:
        """A lane's event loop for async handlers, started on the lane's first async run
        (runner/aio.py: one loop per lane, so bulk async work never takes a realtime async
        run's place or turn)."""
        with self._lane_lock:
            loop = self._lane_async.get(lane)
            if loop is None:
                assert self._control is not None
                size = self._async_slots(lane)
                loop = AsyncHandlers(self.url, size, min(size, self.config.workers), self._control,
                                     self._begin, self._done, lane=lane)
                loop.start()
                self._lane_async[lane] = loop
            return loop

    def _lane_resources(self, lane: str) -> tuple[HandlerPool, ConnectionPool[Any]]:
        """A lane's handler threads and ctx.db pool, made on first use (a run of a lane added
        after the start, or taken over)."""
        with self._lane_lock:  # the loop thread and handler threads
            handlers = self._lane_handlers.get(lane)
            pool = self._lane_pools.get(lane)
            if handlers is None or pool is None:
                n = self._slots(lane)
                handlers = self._lane_handlers[lane] = HandlerPool(n)
                pool = self._lane_pools[lane] = ConnectionPool(
                    self.url, min_size=0, max_size=n, open=True,
                    kwargs={"autocommit": True, "application_name": f"runner-{lane}"[:63]})
            return handlers, pool

    def _lane(self) -> None:
        """The backfill lane (runner/backfill.py), below realtime: after this tick's slots,
        takeovers and retries; with at most half of the free capacity, and none while due
        slots still wait to be claimed. Every poll interval, and on the tick after one of the
        lane's runs finished or a pass claimed some (so a plan keeps its concurrency busy); the
        pass also pauses and completes plans. It yields to a slot due within LANE_YIELD, so that
        its statements do not hold up that slot's claim (for one poll interval at most: many
        jobs of different periods may leave no quiet moment)."""
        mono = time.monotonic()
        free = {} if self._pending else {lane: self._free(lane) for lane in self._claimable()}
        limit = sum(max(n, 0) for n in free.values())
        by_poll = mono >= self._next_lane
        overdue = mono >= self._next_lane + self.config.poll_interval
        if ((by_poll or (self._lane_due and limit > 0))
                and (overdue or not self._slot_within(LANE_YIELD))):
            self._lane_due = False
            self._next_lane = mono + self.config.poll_interval
            started = backfill.run_once(self._conn(), self.owner, self.jobs, free)
            self._lane_runs.update(r.id for r in started)
            if started or limit == 0:  # more may be claimable (never reset here: a lane run
                self._lane_due = True  # that finished meanwhile set it)
            self._start(started)

    def _beat(self) -> None:
        with self._active_lock:  # running, and returned but not yet recorded
            ids = sorted({run_id for run_id, _ in self._locks})
        ledger.heartbeat_attempts(self._conn(), self.owner, ids)

    def _slot_within(self, seconds: float) -> bool:
        nearest = min(self._next_slot.values(), default=None)
        return nearest is not None and (nearest - self.now()).total_seconds() < seconds

    def _free(self, lane: str | None = None) -> int:
        """Free in-flight room of a lane here (None: of the live slots' lanes, the least)."""
        if lane is None:
            live = self._live_lanes() or {lanes.REALTIME}
            return min(self._free(one) for one in live)
        return self._cap(lane) - self._lane_inflight.get(lane, 0)

    def _hand_late(self, job_name: str, first: datetime | None, last: datetime) -> None:
        """Give the misfire duty the late slots [first, last] of a job (first None: from the
        newest complete slot)."""
        ranges = self._late.setdefault(job_name, [])
        if first is not None and ranges and ranges[-1].first is not None \
                and ranges[-1].first <= first <= ranges[-1].last:
            ranges[-1].extend(last)  # already handed over (overlapping)
            return
        ranges.append(misfire.LateRange(first, last))

    def _hand_late_claims(self, claims: list[SlotClaim]) -> list[SlotClaim]:
        """Claims whose slot is past its job's grace go to the misfire duty (their slot, as a
        range of one); returns the others, still on time."""
        now = self.now()
        on_time = []
        for c in claims:
            if c.slot <= misfire.cutoff_for(self.jobs[c.job_name], now):
                self._hand_late(c.job_name, c.slot, c.slot)
            else:
                on_time.append(c)
        return on_time

    def _decide_misfires(self) -> None:
        """The misfire duty: one batch of the oldest late range of each job that has one. Its
        own error boundary: a failure keeps the range (retried after a poll interval) and never
        stops the other duties; only a lost lock session goes up to the loop."""
        now = self.now()
        mono = time.monotonic()
        started = 0
        for name in sorted(self._late):
            if self._late_retry.get(name, 0.0) > mono:
                continue
            ranges = self._late[name]
            try:
                decisions = misfire.run_once(self._conn(), self.jobs[name], now, ranges[0],
                                             prometheus_url=self.config.prometheus_url)
            except psycopg.Error as exc:
                if not self._session_alive():
                    raise
                cls, msg = error_text(exc)
                log.error("job %r: misfire decisions failed (%s: %s); retrying in %.1fs", name,
                          cls, msg[:300], self.config.poll_interval)
                self._late_retry[name] = mono + self.config.poll_interval
                continue
            if decisions.paused:
                self._late_retry[name] = mono + self.config.poll_interval
                continue
            self._late_retry.pop(name, None)
            started += decisions.started
            if not decisions.more:
                ranges.pop(0)
                if not ranges:
                    del self._late[name]
        if started:
            self.duties["retries"].soon()  # start the catch-up runs now

    def _fan_out(self, now: datetime) -> None:
        for name, job in self.live.items():
            slot = self._next_slot[name]
            if slot > now:
                continue
            cutoff = misfire.cutoff_for(job, now)
            if slot <= cutoff:  # this process fell behind (stopped, overloaded): late slots
                last = job.schedule.latest_at_or_before(cutoff)
                self._hand_late(name, slot, last)
                slot = job.schedule.next_after(last)
            while slot <= now and len(self._pending) < self._backlog_cap:
                ready = self._prepared.pop(name, None)
                claims = ready[1] if ready is not None and ready[0] == slot else self._slot_claims(job, slot)
                self._share_out(job, slot, claims)
                slot = job.schedule.next_after(slot)
            # past the backlog cap, the slot waits unexpanded (memory stays flat); if it is
            # still waiting past its grace, the misfire duty decides it
            self._next_slot[name] = slot

    def _prepare(self, now: datetime) -> None:
        """While idle, build the claims of slots due within PREPARE_AHEAD, so that at the slot
        instant the loop only has to send them (1,000 jobs: ~15 ms less between the instant
        and the claim). Jobs with dynamic partitions are fanned out at the instant itself."""
        horizon = now + PREPARE_AHEAD
        for name, job in self.live.items():
            slot = self._next_slot[name]
            if slot <= horizon and not job.dynamic_partitions:
                ready = self._prepared.get(name)
                if ready is None or ready[0] != slot:
                    self._prepared[name] = (slot, self._slot_claims(job, slot))

    def _share_out(self, job: JobDef, slot: datetime, claims: list[SlotClaim]) -> None:
        """This runner's share of a slot's rows goes to the claim queue; the others' shares
        are set aside for ``steal_after`` seconds (module docstring: Shares)."""
        share = self._shares.get(job.name)
        if share is None or not claims:
            self._pending.extend(claims)
            return
        mine, runners = share
        others = []
        for c in claims:
            if int(c.idempotency_key[:8], 16) % runners == mine:
                self._pending.append(c)
            else:
                others.append(c)
        if others:
            self._deferred.append(Deferred(time.monotonic() + self.config.steal_after, job.name, slot,
                                           others))

    def _release_deferred(self) -> None:
        """Others' shares whose time is up: drop the rows that have a run; claim the rest,
        last rows first (the other runner works from the first)."""
        mono = time.monotonic()
        due: list[Deferred] = []
        while self._deferred and self._deferred[0].release <= mono:
            due.append(self._deferred.popleft())
        rows = [c for d in due for c in d.claims]
        try:
            unclaimed = ledger.unclaimed_rows(self._conn(), rows)
        except BaseException:
            self._deferred.extendleft(reversed(due))  # nothing is lost: look again on the next pass
            raise
        # by key, not by count: runners that computed different partition lists (a rolling
        # deploy, a time-varying callable) must not take each other's runs for theirs
        stolen = [rows[i] for i in sorted(unclaimed)]
        self._pending.extend(reversed(stolen))
        self.stats["stolen"] += len(stolen)

    def _refresh_shares(self) -> None:
        """Which share of each job's slots is this runner's: from the live runners serving it."""
        fresh_for = 3 * self.config.instance_heartbeat
        serving: dict[str, list[Any]] = {}
        for instance, jobs in ledger.live_instances(self._conn(), self.owner.namespace, fresh_for):
            for name in jobs:
                if name in self.live:
                    serving.setdefault(name, []).append(instance)
        self._shares = {name: (ids.index(self.owner.instance), len(ids)) for name, ids in serving.items()
                        if len(ids) > 1 and self.owner.instance in ids}

    def _slot_claims(self, job: JobDef, slot: datetime) -> list[SlotClaim]:
        """The claims of one slot, from its fan-out (runner/fanout.py: user callables behind
        their own error boundary, a dynamic job's partitions recorded before any claim)."""
        plan = plan_slot(self._conn(), job, slot, self.config.max_partitions)
        if plan.error is not None or plan.window_start is None or plan.window_end is None \
                or plan.business_date is None:
            return []
        keys = plan.partitions
        if len(keys) > 1:
            # start at a random place so that processes claiming the same fan-out without
            # shares (a runner not yet registered) don't collide on every row
            turn = self._rng.randrange(len(keys))
            keys = keys[turn:] + keys[:turn]
        start, end, business_date = plan.window_start, plan.window_end, plan.business_date
        name, overlap, lane = job.name, job.overlap, job.lane
        return [
            SlotClaim(name, slot, key, business_date, start, end, ikey, overlap, lane)
            for key, ikey in zip(keys, idempotency_keys(name, start, end, keys, job.version), strict=True)
        ]

    def claim(self, limit: int) -> int:
        """Claim up to ``limit`` pending slots in one statement; start the runs won."""
        batch = [self._pending.popleft() for _ in range(min(limit, len(self._pending)))]
        batch = self._hand_late_claims(batch)  # an overloaded runner never claims late slots
        if not batch:
            return 0
        try:
            db_now, runs, waiting = ledger.claim_slots_waiting(self._conn(), self.owner, batch)
        except psycopg.Error as exc:
            if not self._session_alive() or len(batch) == 1:
                if self._session_alive():  # this row cannot be stored (e.g. a key too large)
                    cls, msg = error_text(exc)
                    log.error("job %r: slot %s partition %r cannot be claimed (%s: %s); it stays "
                              "without a run (the gap scan shows it)", batch[0].job_name,
                              batch[0].slot.isoformat(), batch[0].partition_key[:100], cls, msg[:300])
                    return 0
                self._pending.extendleft(reversed(batch))  # nothing is lost: claim them later
                raise
            # the session is alive: one row is at fault; claim them one at a time
            won = 0
            for one in batch:
                self._pending.appendleft(one)
                won += self.claim(1)
            return won
        if waiting:  # overlap='wait': an earlier slot still runs; try again on a later pass
            self._waiting.extend(c for c in batch if (c.job_name, c.slot, c.partition_key) in waiting)
        early = [c for c in batch if c.slot > db_now]
        if early:  # our clock ran ahead of the database's: retry those when they are due
            self._pending.extendleft(reversed(early))
            self._offset -= (early[0].slot - db_now).total_seconds() / 2
        won = len(runs)
        lost = len(batch) - len(early) - won - len(waiting)
        self.stats["claimed"] += won
        self.stats["conflicts"] += lost
        if lost:
            won_keys = {(r.job_name, r.slot, r.partition_key) for r in runs}
            for c in batch:
                key = (c.job_name, c.slot, c.partition_key)
                if c.slot <= db_now and key not in won_keys and key not in waiting:
                    self.metrics.of(self.metrics.conflicts, c.job_name).inc()
                    event(log, "job_claim_skipped", logging.DEBUG, job=c.job_name, slot=c.slot,
                          partition=c.partition_key, reason="another process claimed it")
        m = self.metrics
        for r in runs:
            m.observe_lag(r.job_name, max((db_now - r.slot).total_seconds(), 0.0), r.trigger)
        self._start(runs)
        return won

    def _start(self, runs: list[ClaimedRun]) -> None:
        for run in runs:
            self._inflight += 1
            self._lane_inflight[run.lane] = self._lane_inflight.get(run.lane, 0) + 1
            if not run.locked:
                outcome = self._key_held(run)
                if outcome is not None:
                    self._finished.put((run, outcome))
                    continue
            with self._active_lock:
                self._locks.add((run.id, run.fence))
            self._launch(run)
        self.metrics.inflight.set(self._inflight)

    def _key_held(self, run: ClaimedRun) -> Outcome | None:
        """The outcome of an attempt that started while another session held its run's key
        (None: the key is free now, and this session took it: the attempt runs).

        For a moment that is ordinary: a runner records an attempt's outcome, then unlocks
        the run a round trip later, and a retry due at once may be claimed in between (by
        another runner; this one's own claims share its session, whose lock is re-entrant).
        When a registered runner session holds the key (runner.runner_sessions_v1), the
        attempt is released, uncounted, with its trigger kept, and the run is due again
        LOCK_BUSY_DELAY later, twice that after a second release in a row, and so on
        (revision 0024_sessions; before, due at once, and a second release in a row counted:
        under load a holder had not always unlocked by the next poll). At most
        LOCK_BUSY_RELEASES in a row (a runner session that keeps the key would make a run
        loop for ever): after those, and whenever the holder is any other session (an
        application sharing RUNNER_LOCK_NAMESPACE, or a squatter), the attempt fails with
        LockUnavailable and counts against max_attempts like any other, so the run ends
        dead, never retried forever; the takeover duty ends a squatter where it may
        (runner/takeover.py). Never waiting with the run running and its key free: the
        takeover duty leaves such a run alone only for a few seconds (take_over_orphans: a
        fresh attempt of a live runner session)."""
        try:
            got, by_runner, streak = ledger.key_holder(self._conn(), self.owner.namespace, run.id, run.fence)
        except psycopg.Error as exc:  # the lock session is gone: count it (the fence decides)
            log.debug("run %s: reading its key's holder failed: %s", run.id, _first_line(exc))
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
            current = ledger.run_is_current(self._conn(), run.id, run.fence)
        except psycopg.Error as exc:  # the lock session is gone, the key with it
            log.debug("run %s: reading its fence failed: %s", run.id, _first_line(exc))
            current = False
        if current:
            return None
        with contextlib.suppress(psycopg.Error):
            ledger.unlock_runs(self._conn(), self.owner.namespace, [run.id])
        event(log, "attempt_lost", logging.WARNING, job=run.job_name, slot=run.slot,
              partition=run.partition_key, run_id=run.id, attempt=run.attempt, fence=run.fence,
              reason="taken over before this attempt took its key; its handler is not run")
        return Outcome(run.id, run.fence, "failed", error_class="runner.OwnerLost",
                       error_message="taken over before the attempt took its key")

    def _launch(self, run: ClaimedRun) -> None:
        """Hand a started, locked attempt to its handler (a thread, or the lane's event loop)."""
        job = self.jobs[run.job_name]
        ctx: RunContext
        handlers, pool = self._lane_resources(run.lane)
        if job.is_async:
            aloop = self._async_for(run.lane)
            ctx = actx = aloop.context(run, job)
        else:
            ctx = JobContext(run, job, pool, self._control)
        with self._active_lock:
            self._active[(run.id, run.fence)] = Active(run, ctx)
        self.metrics.of(self.metrics.started, run.job_name, run.trigger).inc()
        event(log, "job_claimed", job=run.job_name, slot=run.slot, partition=run.partition_key,
              run_id=run.id, attempt=run.attempt, fence=run.fence, trigger=run.trigger)
        crash_point("after_claim")
        if job.is_async:
            aloop.submit(run, job, actx)
        else:
            handlers.submit(self._execute, run, ctx)

    def _execute(self, run: ClaimedRun, ctx: JobContext) -> None:
        began = self._begin(run)
        try:
            outcome = execute(run, self.jobs[run.job_name], self._lane_resources(run.lane)[1], ctx)
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
            with self._active_lock:
                active = self._active.get((run.id, run.fence))
                if active is not None:
                    active.deadline = began + job.timeout.total_seconds()
            self._wake.set()  # the loop sleeps until the nearest deadline
        return began

    def _done(self, run: ClaimedRun, outcome: Outcome | None, began: float) -> None:
        """A handler (sync or async) ended: its outcome to the completer, unless the runner
        gave up on the attempt meanwhile (timeout, shutdown: recorded already)."""
        self.metrics.of(self.metrics.duration, run.job_name).observe(time.monotonic() - began)
        with self._active_lock:
            mine = self._active.pop((run.id, run.fence), None) is not None
        if mine:
            self._finished.put((run, outcome))
        else:
            log.warning("run %s: the handler ended after the runner gave up on it "
                        "(timeout or shutdown); its outcome is discarded", run.id)

    def _enforce_timeouts(self) -> None:
        now = time.monotonic()
        with self._active_lock:
            overdue = [a for a in self._active.values() if a.deadline is not None and now >= a.deadline]
            for a in overdue:
                del self._active[(a.run.id, a.run.fence)]
        for a in overdue:
            job = self.jobs[a.run.job_name]
            reason = f"timed out after {job.timeout}"
            a.ctx.cancel(reason)
            if not job.is_async:  # an async one's task is cancelled: no thread is stuck
                self._lane_resources(a.run.lane)[0].compensate()
            self.stats["timed_out"] += 1
            event(log, "attempt_timed_out", logging.WARNING, job=a.run.job_name, slot=a.run.slot,
                  partition=a.run.partition_key, run_id=a.run.id, attempt=a.run.attempt,
                  fence=a.run.fence, reason=reason)
            outcome = failure(a.run, job, AttemptTimedOut(reason), a.ctx)
            self._finished.put((a.run, Outcome(
                outcome.run_id, outcome.fence, outcome.status, attempt_status="timed_out",
                error_class="runner.Timeout", error_message=reason,
                retry_delay=outcome.retry_delay, processed=outcome.processed, failed=outcome.failed)))

    def _take_all_active(self) -> list[Active]:
        with self._active_lock:
            actives = list(self._active.values())
            self._active.clear()
        return actives

    def _sleep_for(self, now: datetime) -> float:
        if self._pending and self._free() > 0:
            return 0.0
        next_slot = min(self._next_slot.values(), default=None)
        nearest = self.duties.next_due()
        delay = max((nearest if nearest is not None else time.monotonic() + 1.0) - time.monotonic(), 0.0)
        with self._active_lock:
            deadlines = [a.deadline for a in self._active.values() if a.deadline is not None]
        if deadlines:
            delay = min(delay, max(min(deadlines) - time.monotonic(), 0.0))
        if next_slot is not None:
            delay = min(delay, max((next_slot - now).total_seconds(), 0.0))
        if self._deferred:
            delay = min(delay, max(self._deferred[0].release - time.monotonic(), 0.0))
        return max(delay, 0.0005)

    # -- completions ------------------------------------------------------------------

    def _complete_forever(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        done = False
        while not done:
            item = self._finished.get()
            batch: list[tuple[ClaimedRun, Outcome | None]] = []
            while item is not None:
                batch.append(item)
                if len(batch) >= self.config.finish_batch:
                    break
                try:
                    item = self._finished.get_nowait()
                except queue.Empty:
                    break
            done = item is None
            if batch:
                conn = self._record(conn, batch)
        if conn is not None:
            conn.close()

    def _record(self, conn: psycopg.Connection[Any] | None,
                batch: list[tuple[ClaimedRun, Outcome | None]]) -> psycopg.Connection[Any] | None:
        outcomes = [o for _, o in batch if o is not None]
        landed: dict[tuple[int, int], bool] = {}
        delay = 0.1
        give_up = None
        while outcomes:
            try:
                if conn is None or conn.closed:
                    conn = connect(self.url)
                crash_point("before_completion")
                landed = ledger.finish_attempts(conn, outcomes)
                break
            except psycopg.OperationalError as exc:
                if self._stop.is_set():
                    give_up = give_up or time.monotonic() + self.config.grace
                    if time.monotonic() > give_up:
                        log.error("could not record %d outcome(s) before exiting (%s); their runs "
                                  "stay running and are taken over once this process is gone",
                                  len(outcomes), _first_line(exc))
                        break
                log.warning("recording %d outcome(s) failed (%s); retrying in %.1fs",
                            len(outcomes), _first_line(exc), delay)
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(delay)  # backoff between reconnection attempts
                delay = min(delay * 2, 10.0)
        now = time.time()
        for run, outcome in batch:
            if outcome is None:  # recorded in the handler's own transaction
                self.stats["succeeded"] += 1
                self._ended(run, "succeeded", now)
            elif not landed.get((outcome.run_id, outcome.fence), False):
                self.stats["stale"] += 1
                self.metrics.of(self.metrics.completed, run.job_name, "refused").inc()
                event(log, "outcome_refused", logging.WARNING, job=run.job_name, slot=run.slot,
                      partition=run.partition_key, run_id=run.id, attempt=run.attempt,
                      fence=run.fence, outcome=outcome.status, reason="stale fence")
            else:
                status = outcome.attempt_status or outcome.status
                if outcome.status == "succeeded":
                    self.stats["succeeded"] += 1
                elif outcome.status in ("failed", "dead"):
                    self.stats["failed"] += 1
                self._ended(run, status, now, outcome)
        if self._lane_runs:
            for run, _ in batch:
                if run.id in self._lane_runs:
                    self._lane_runs.discard(run.id)
                    self._lane_due = True
        if any(run.trigger == "catch_up" for run, _ in batch):
            self._poll_soon = True  # replays run back to back, not one per poll interval
        with self._active_lock:
            ends = {(run.id, run.fence) for run, _ in batch} & self._locks
            self._locks -= ends
            locked = [run_id for run_id, _ in sorted(ends)]  # a run twice: two holds, two unlocks
        try:
            ledger.unlock_runs(self._conn(), self.owner.namespace, locked)
        except psycopg.Error as exc:  # the session is gone, and its locks with it
            log.debug("unlock after completion failed: %s", _first_line(exc))
        self._inflight -= len(batch)
        for run, _ in batch:
            self._lane_inflight[run.lane] = self._lane_inflight.get(run.lane, 1) - 1
        self.metrics.inflight.set(self._inflight)
        self._wake.set()
        return conn

    def _ended(self, run: ClaimedRun, status: str, now: float, outcome: Outcome | None = None) -> None:
        self.metrics.of(self.metrics.completed, run.job_name, status).inc()
        if status == "succeeded":
            self.metrics.of(self.metrics.last_success, run.job_name).set(now)
            event(log, "attempt_succeeded", job=run.job_name, slot=run.slot, partition=run.partition_key,
                  run_id=run.id, attempt=run.attempt, fence=run.fence)
        elif status != "released":
            event(log, "attempt_failed", logging.WARNING, job=run.job_name, slot=run.slot,
                  partition=run.partition_key, run_id=run.id, attempt=run.attempt, fence=run.fence,
                  status=status, error_class=outcome.error_class if outcome else None,
                  error=(outcome.error_message or "")[:300] if outcome else None)

    # -- connections and clock --------------------------------------------------------

    def _session_alive(self) -> bool:
        """Whether the lock session still works (a failed statement may leave it so)."""
        conn = self._lock_conn
        return conn is not None and not conn.closed and not conn.broken

    def _conn(self) -> psycopg.Connection[Any]:
        assert self._lock_conn is not None
        return self._lock_conn

    def _reconnect(self) -> None:
        """A new lock session after the old one died. Its locks died with it: lock again
        the runs still being executed that nobody took over meanwhile; the others are
        asked to stop (whatever they record will be refused by the fence)."""
        old = self._lock_conn
        if old is not None:
            with contextlib.suppress(Exception):
                old.close()
        delay = 0.2
        while not self._stop.is_set():
            try:
                self._lock_conn = connect(self.url)
                with self._active_lock:
                    mine = [(a.run.id, a.run.fence) for a in self._active.values()]
                # peers see the new session first: a session holding runner keys that is not
                # registered is a squatter to them (runner/takeover.py)
                ledger.heartbeat_instance(self._conn(), self.owner)
                kept = ledger.relock_runs(self._conn(), self.owner.namespace, mine)
                break
            except psycopg.OperationalError as exc:  # down, or cut again while re-locking
                log.warning("database unreachable (%s); retrying in %.1fs", _first_line(exc), delay)
                with contextlib.suppress(Exception):
                    if self._lock_conn is not None:
                        self._lock_conn.close()
                self._wake.wait(delay)
                delay = min(delay * 2, 10.0)
        else:
            return
        with self._active_lock:
            lost = [a for a in self._active.values() if (a.run.id, a.run.fence) not in kept]
            self._locks = kept  # the old session's holds died with it; the new one holds these
        for a in lost:
            a.ctx.cancel("this process lost its lock session and another process owns the run")
        log.warning("lock session re-established: %d run(s) kept, %d lost to other processes",
                    len(kept), len(lost))

    def _measure_offset(self) -> None:
        best: tuple[float, float] | None = None
        for _ in range(3):
            t0 = time.time()
            db = ledger.db_now(self._conn()).timestamp()
            t1 = time.time()
            sample = (t1 - t0, db - (t0 + t1) / 2)
            if best is None or sample[0] < best[0]:
                best = sample
        assert best is not None
        self._offset = best[1]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
