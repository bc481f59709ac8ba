"""The completer of one process: a thread with its own connection that records finished
attempts in batches (one ``finish_attempts`` statement for many runs) and then releases their
locks on the lock session.

The session lock is re-entrant and the release follows the commit, so a retry due at once can
be claimed in between: each attempt's end releases its own hold (runner/worker/attempts.py).
A recorded run leaves the in-flight count (runner/worker/budget.py) and wakes the loop, which
may claim again. An outcome the ledger refuses (a stale fence: the run was taken over) is
counted and logged, never retried.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from runner.events import event
from runner.store import ledger
from runner.store.ledger import ClaimedRun, Outcome, Owner
from runner.worker.attempt import crash_point
from runner.worker.attempts import Attempts
from runner.worker.budget import InFlight
from runner.worker.config import LoopConfig, connect, first_line
from runner.worker.metrics import Metrics
from runner.worker.session import LockSession

log = logging.getLogger("runner.loop")

Batch = list[tuple[ClaimedRun, Outcome | None]]


class Completer:
    """Records outcomes in batches on a thread of its own (module docstring). ``recorded`` is
    called, on that thread, with each batch's runs once they are recorded and unlocked."""

    def __init__(self, url: str, config: LoopConfig, owner: Owner, session: LockSession,
                 attempts: Attempts, inflight: InFlight, metrics: Metrics, stats: dict[str, int],
                 stop: threading.Event, wake: threading.Event,
                 recorded: Callable[[list[ClaimedRun]], None]) -> None:
        self.url = url
        self.config = config
        self.owner = owner
        self.session = session
        self.attempts = attempts
        self.inflight = inflight
        self.metrics = metrics
        self.stats = stats
        self._stop = stop
        self._wake = wake
        self._recorded = recorded
        self._queue: queue.SimpleQueue[tuple[ClaimedRun, Outcome | None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def put(self, run: ClaimedRun, outcome: Outcome | None) -> None:
        """A finished attempt (``outcome`` None: recorded in the handler's own transaction)."""
        self._queue.put((run, outcome))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._forever, name="runner-completer", daemon=True)
        self._thread.start()

    def finish(self) -> None:
        """Record what is queued, then end the thread (at shutdown)."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()

    def _forever(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        done = False
        while not done:
            item = self._queue.get()
            batch: Batch = []
            while item is not None:
                batch.append(item)
                if len(batch) >= self.config.finish_batch:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            done = item is None
            if batch:
                conn = self.record(conn, batch)
        if conn is not None:
            conn.close()

    def record(self, conn: psycopg.Connection[Any] | None, batch: Batch) -> psycopg.Connection[Any] | None:
        """Record one batch on ``conn`` (opened again when it is gone); returns the connection."""
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
                                  len(outcomes), first_line(exc))
                        break
                log.warning("recording %d outcome(s) failed (%s); retrying in %.1fs",
                            len(outcomes), first_line(exc), delay)
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(delay)  # backoff between reconnection attempts
                delay = min(delay * 2, 10.0)
        now = time.time()
        ended: dict[tuple[str, str], int] = {}  # (job, status) -> attempts: the counters once a batch
        for run, outcome in batch:
            if outcome is None:  # recorded in the handler's own transaction
                self.stats["succeeded"] += 1
                self._ended(run, "succeeded", ended)
            elif not landed.get((outcome.run_id, outcome.fence), False):
                self.stats["stale"] += 1
                ended[run.job_name, "refused"] = ended.get((run.job_name, "refused"), 0) + 1
                event(log, "outcome_refused", logging.WARNING, job=run.job_name, slot=run.slot,
                      partition=run.partition_key, run_id=run.id, attempt=run.attempt,
                      fence=run.fence, outcome=outcome.status, reason="stale fence")
            else:
                status = outcome.attempt_status or outcome.status
                if outcome.status == "succeeded":
                    self.stats["succeeded"] += 1
                elif outcome.status in ("failed", "dead"):
                    self.stats["failed"] += 1
                self._ended(run, status, ended, outcome)
        m = self.metrics
        for (job_name, status), n in ended.items():
            m.of(m.completed, job_name, status).inc(n)
            if status == "succeeded":
                m.of(m.last_success, job_name).set(now)
            elif status == "handed_off":
                m.of(m.handoffs, job_name).inc(n)
        runs = [run for run, _ in batch]
        self._recorded(runs)
        locked = self.attempts.release(runs)
        try:
            ledger.unlock_runs(self.session.conn(), self.owner.namespace, locked)
        except psycopg.Error as exc:  # the session is gone, and its locks with it
            log.debug("unlock after completion failed: %s", first_line(exc))
        self.metrics.inflight.set(self.inflight.ended(run.lane for run in runs))
        self._wake.set()
        return conn

    def _ended(self, run: ClaimedRun, status: str, ended: dict[tuple[str, str], int],
               outcome: Outcome | None = None) -> None:
        """One attempt's end: counted in ``ended`` (the batch's metrics), and its event."""
        ended[run.job_name, status] = ended.get((run.job_name, status), 0) + 1
        if status == "succeeded":
            event(log, "attempt_succeeded", job=run.job_name, slot=run.slot, partition=run.partition_key,
                  run_id=run.id, attempt=run.attempt, fence=run.fence)
        elif status == "handed_off":
            event(log, "attempt_handed_off", job=run.job_name, slot=run.slot, partition=run.partition_key,
                  run_id=run.id, attempt=run.attempt, fence=run.fence)
        elif status != "released":
            event(log, "attempt_failed", logging.WARNING, job=run.job_name, slot=run.slot,
                  partition=run.partition_key, run_id=run.id, attempt=run.attempt, fence=run.fence,
                  status=status, error_class=outcome.error_class if outcome else None,
                  error=(outcome.error_message or "")[:300] if outcome else None)
