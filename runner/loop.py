"""The tick: due slots -> one claim statement -> a bounded worker pool -> batched outcomes.

One ``Worker`` per ``runner start`` process. Its threads and connections:

* the loop thread owns the *lock connection*: a long-lived session (autocommit) that issues
  the claims, so every run this process wins is locked by ``pg_try_advisory_lock`` in the
  claim statement itself, on the session that will hold it for the run's whole attempt;
* ``workers`` handler threads; a handler that touches ``ctx.db`` borrows a connection from a
  pool of at most ``workers`` connections for its transaction;
* one completer thread with its own connection, which records finished attempts in batches
  (one ``finish_attempts`` statement for many runs) and then releases their locks.

So a process holds at most ``workers + 2`` connections, however many runs it executes.

The loop sleeps until the next slot of any job or the poll interval (for retries and queued
runs), whichever is sooner; it wakes at once when a handler finishes and work is waiting.
Slot instants are compared with the database clock (an offset measured at start and
refreshed), and the claim statement itself refuses slots that the database does not yet
consider due, so several runners on machines with skewed clocks agree.

Until misfire policies exist, a starting runner begins with each job's latest slot at or
before now; older slots missed while no runner was alive are left for the gap scan.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import psycopg
from psycopg_pool import ConnectionPool

from runner import __version__, ledger
from runner.app import JobDef, Runner
from runner.attempt import error_text, execute
from runner.ledger import ClaimedRun, Outcome, Owner, SlotClaim
from runner.schedule import idempotency_key

log = logging.getLogger("runner.loop")


@dataclass(frozen=True)
class LoopConfig:
    workers: int = 10
    max_inflight: int = 0  # runs claimed and not yet finished; 0 means 2 x workers
    poll_interval: float = 1.0  # seconds between polls for retries and queued runs
    claim_batch: int = 500  # rows per claim statement at most
    finish_batch: int = 500  # outcomes per finish statement at most
    instance_heartbeat: float = 5.0

    @property
    def inflight_cap(self) -> int:
        return self.max_inflight or 2 * self.workers


def connect(url: str, **kw: Any) -> psycopg.Connection[Any]:
    conn = psycopg.connect(url, autocommit=True, application_name="runner", **kw)
    conn.execute("SET TIME ZONE 'UTC'")
    return conn


class Worker:
    """One runner process's scheduling loop, workers and completer."""

    def __init__(self, app: Runner, url: str, config: LoopConfig | None = None,
                 namespace: int = 21077) -> None:
        self.app = app
        self.url = url
        self.config = config or LoopConfig()
        self.jobs: dict[str, JobDef] = app.jobs
        self.owner = Owner.here(uuid4(), namespace)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock_conn: psycopg.Connection[Any] | None = None
        self._pool: ConnectionPool[Any] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._finished: queue.Queue[tuple[ClaimedRun, Outcome | None] | None] = queue.Queue()
        self._completer: threading.Thread | None = None
        self._inflight = 0
        self._inflight_lock = threading.Lock()
        self._pending: deque[SlotClaim] = deque()
        self._next_slot: dict[str, datetime] = {}
        self._offset = 0.0  # database clock minus local clock, seconds
        self._next_poll = 0.0
        self._next_instance_beat = 0.0
        self._rng = random.Random()
        self.stats = {"claimed": 0, "conflicts": 0, "succeeded": 0, "failed": 0, "stale": 0}

    # -- life cycle -------------------------------------------------------------------

    def start(self) -> None:
        """Connect, register this process, sync job definitions, and set up the schedule."""
        self._lock_conn = connect(self.url)
        ledger.sync_jobs(self._lock_conn, list(self.jobs.values()))
        ledger.register_instance(self._lock_conn, self.owner, __version__)
        self._measure_offset()
        self._pool = ConnectionPool(
            self.url, min_size=0, max_size=self.config.workers, open=True,
            kwargs={"autocommit": True, "application_name": "runner-worker"},
        )
        self._executor = ThreadPoolExecutor(self.config.workers, thread_name_prefix="runner-handler")
        self._completer = threading.Thread(target=self._complete_forever, name="runner-completer",
                                           daemon=True)
        self._completer.start()
        now = self.now()
        for job in self.jobs.values():
            # begin with the latest slot at or before now (see module docstring)
            self._next_slot[job.name] = job.schedule.latest_at_or_before(now)
        log.info("runner %s started: %d job(s), %d worker(s), instance %s",
                 self.owner.pid, len(self.jobs), self.config.workers, self.owner.instance)

    def run(self) -> None:
        """Run until ``stop()``; then stop claiming, let running handlers finish, and close."""
        if self._lock_conn is None:
            self.start()
        try:
            while not self._stop.is_set():
                delay = self.tick()
                if delay > 0:
                    self._wake.wait(delay)
                    self._wake.clear()
        finally:
            self.shutdown()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def shutdown(self) -> None:
        """Stop claiming; wait for running handlers; record their outcomes; release locks."""
        self._stop.set()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._completer is not None:
            self._finished.put(None)
            self._completer.join()
        if self._lock_conn is not None and not self._lock_conn.closed:
            try:
                ledger.stop_instance(self._lock_conn, self.owner)
            finally:
                self._lock_conn.close()
        if self._pool is not None:
            self._pool.close()
        log.info("runner %s stopped: %s", self.owner.pid, self.stats)

    # -- the tick ---------------------------------------------------------------------

    def now(self) -> datetime:
        """The database clock, estimated locally."""
        return datetime.fromtimestamp(time.time() + self._offset, UTC)

    def tick(self) -> float:
        """One pass: fan out due slots, claim what capacity allows, start handlers. Returns
        how long the loop may sleep before the next pass."""
        now = self.now()
        self._fan_out(now)
        free = self.config.inflight_cap - self._inflight
        if free > 0 and self._pending:
            free -= self.claim(min(free, self.config.claim_batch))
        mono = time.monotonic()
        if free > 0 and mono >= self._next_poll:
            self._next_poll = mono + self.config.poll_interval
            self._start(self._claim_due(free))
        if mono >= self._next_instance_beat:
            self._next_instance_beat = mono + self.config.instance_heartbeat
            ledger.heartbeat_instance(self._conn(), self.owner)
        return self._sleep_for(self.now())

    def _fan_out(self, now: datetime) -> None:
        for name, job in self.jobs.items():
            slot = self._next_slot[name]
            while slot <= now:
                self._pending.extend(self._slot_claims(job, slot))
                slot = job.schedule.next_after(slot)
            self._next_slot[name] = slot

    def _slot_claims(self, job: JobDef, slot: datetime) -> Iterable[SlotClaim]:
        try:
            keys = job.partitions_for(slot)
        except Exception as exc:
            cls, msg = error_text(exc)
            log.error("job %r: partitions for slot %s raised %s: %s; the slot stays unclaimed "
                      "(the gap scan shows it)", job.name, slot.isoformat(), cls, msg)
            return []
        if len(keys) > 1:
            # start at a random place so that processes claiming the same fan-out don't
            # collide on every row
            turn = self._rng.randrange(len(keys))
            keys = keys[turn:] + keys[:turn]
        start, end = job.schedule.window(slot)
        business_date = job.schedule.business_date(start)
        return [
            SlotClaim(job.name, slot, key, business_date, start, end,
                      idempotency_key(job.name, start, end, key, job.version))
            for key in keys
        ]

    def claim(self, limit: int) -> int:
        """Claim up to ``limit`` pending slots in one statement; start the runs won."""
        batch = [self._pending.popleft() for _ in range(min(limit, len(self._pending)))]
        db_now, runs = ledger.claim_slots(self._conn(), self.owner, batch)
        early = [c for c in batch if c.slot > db_now]
        if early:  # our clock ran ahead of the database's: retry those when they are due
            self._pending.extendleft(reversed(early))
            self._offset -= (early[0].slot - db_now).total_seconds() / 2
        won = len(runs)
        self.stats["claimed"] += won
        self.stats["conflicts"] += len(batch) - len(early) - won
        if len(batch) - len(early) - won:
            log.debug("claim conflicts: %d of %d slot(s) already had a run",
                      len(batch) - len(early) - won, len(batch) - len(early))
        self._start(runs)
        return won

    def _claim_due(self, limit: int) -> list[ClaimedRun]:
        _, runs = ledger.claim_due_runs(self._conn(), self.owner, list(self.jobs), limit)
        return runs

    def _start(self, runs: list[ClaimedRun]) -> None:
        assert self._executor is not None
        for run in runs:
            with self._inflight_lock:
                self._inflight += 1
            if not run.locked:
                log.error("run %s: its advisory lock is held by another session; is "
                          "RUNNER_LOCK_NAMESPACE shared with the application?", run.id)
                self._finished.put((run, Outcome(
                    run.id, run.fence, "failed", "runner.LockUnavailable",
                    "advisory lock key held by another session", retry_delay=1.0)))
                continue
            log.debug("job_claimed job=%s slot=%s partition=%r run=%s attempt=%s fence=%s",
                      run.job_name, run.slot.isoformat(), run.partition_key, run.id,
                      run.attempt, run.fence)
            self._executor.submit(self._execute, run)

    def _execute(self, run: ClaimedRun) -> None:
        assert self._pool is not None
        try:
            outcome = execute(run, self.jobs[run.job_name], self._pool)
        except BaseException as exc:  # never lose a run to a bug in the runner itself
            cls, msg = error_text(exc)
            outcome = Outcome(run.id, run.fence, "failed", cls, msg, retry_delay=1.0)
        self._finished.put((run, outcome))

    def _sleep_for(self, now: datetime) -> float:
        if self._pending and self._inflight < self.config.inflight_cap:
            return 0.0
        next_slot = min(self._next_slot.values(), default=None)
        delay = max(self._next_poll - time.monotonic(), 0.0)
        if next_slot is not None:
            delay = min(delay, max((next_slot - now).total_seconds(), 0.0))
        return max(delay, 0.0005)

    # -- completions ------------------------------------------------------------------

    def _complete_forever(self) -> None:
        conn = connect(self.url)
        try:
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
        finally:
            conn.close()

    def _record(self, conn: psycopg.Connection[Any],
                batch: list[tuple[ClaimedRun, Outcome | None]]) -> psycopg.Connection[Any]:
        outcomes = [o for _, o in batch if o is not None]
        for delay in (0.1, 0.5, 1, 2, 5, 10, 0):
            try:
                landed = ledger.finish_attempts(conn, outcomes)
                break
            except psycopg.OperationalError as exc:
                if not delay:
                    raise
                log.warning("recording %d outcome(s) failed (%s); retrying in %ss",
                            len(outcomes), exc, delay)
                time.sleep(delay)
                conn.close()
                with contextlib.suppress(psycopg.OperationalError):
                    conn = connect(self.url)
        for outcome in outcomes:
            if not landed.get(outcome.run_id, False):
                self.stats["stale"] += 1
                log.warning("run %s: outcome %s refused: fence %s is stale", outcome.run_id,
                            outcome.status, outcome.fence)
            elif outcome.status == "succeeded":
                self.stats["succeeded"] += 1
            else:
                self.stats["failed"] += 1
        self.stats["succeeded"] += sum(1 for _, o in batch if o is None)
        locked = [run.id for run, _ in batch if run.locked]
        ledger.unlock_runs(self._conn(), self.owner.namespace, locked)
        with self._inflight_lock:
            self._inflight -= len(batch)
        self._wake.set()
        return conn

    # -- connections and clock --------------------------------------------------------

    def _conn(self) -> psycopg.Connection[Any]:
        assert self._lock_conn is not None
        return self._lock_conn

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

