"""The lock session of one process, and its clock.

The lock connection is a long-lived session (autocommit) that issues the claims, so every run
the process wins is locked by ``pg_try_advisory_lock`` in the claim statement itself, on the
session that holds it for the run's whole attempt. The loop thread uses it for every duty;
the completer thread unlocks finished runs on it (a psycopg connection serialises its
statements). It must be a session of its own, not one of a transaction or statement pool
(runner/store/pooler.py): checked when it opens and at every reconnect. When it dies, its locks die
with it: ``reconnect`` opens a new one and locks again the runs still being executed that
nobody took over meanwhile; the others are asked to stop (whatever they record will be
refused by the fence).

Slot instants are compared with the database clock: ``now()`` is the local clock plus an
offset measured at start and refreshed every minute (the ``clock`` duty), and pulled back
when a claim finds the database not yet at a slot (``ahead``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

import psycopg

from runner.store import ledger, pooler
from runner.store.ledger import Owner
from runner.worker.attempts import Attempts
from runner.worker.config import connect, first_line

log = logging.getLogger("runner.loop")


class LockSession:
    """The process's lock connection and its estimate of the database clock."""

    def __init__(self, url: str, owner: Owner, stop: threading.Event, wake: threading.Event) -> None:
        self.url = url
        self.owner = owner
        self._stop = stop
        self._wake = wake
        self._conn: psycopg.Connection[Any] | None = None
        self._offset = 0.0  # database clock minus local clock, seconds

    def open(self) -> psycopg.Connection[Any]:
        """Connect; PoolerRefused (one line) when the URL goes through a transaction or
        statement pool (runner/store/pooler.py): its locks would not stay with this session."""
        self._conn = self._connect()
        return self._conn

    def _connect(self) -> psycopg.Connection[Any]:
        """A new lock session, checked: proven direct in one statement, else the full check
        on connections of the check's own (runner/store/pooler.py)."""
        conn = connect(self.url)
        try:
            if not pooler.direct(conn):
                pooler.check_url(self.url)
        except BaseException:
            conn.close()
            raise
        return conn

    @property
    def opened(self) -> bool:
        return self._conn is not None

    def conn(self) -> psycopg.Connection[Any]:
        assert self._conn is not None
        return self._conn

    def backend_pid(self) -> int | None:
        """The lock session's server process (None before it opens); read by other threads."""
        conn = self._conn
        return None if conn is None or conn.closed else conn.info.backend_pid

    def alive(self) -> bool:
        """Whether the lock session still works (a failed statement may leave it so)."""
        conn = self._conn
        return conn is not None and not conn.closed and not conn.broken

    def close(self) -> None:
        """Deregister this process and close the session (at shutdown)."""
        conn = self._conn
        if conn is not None and not conn.closed:
            try:
                ledger.stop_instance(conn, self.owner)
            except psycopg.Error as exc:
                log.warning("could not deregister: %s", first_line(exc))
            finally:
                conn.close()

    def abandon(self) -> None:
        """Close the session without deregistering (a start that failed)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def reconnect(self, attempts: Attempts) -> None:
        """A new lock session after the old one died (module docstring)."""
        old = self._conn
        if old is not None:
            with contextlib.suppress(Exception):
                old.close()
        delay = 0.2
        while not self._stop.is_set():
            try:
                # the URL may lead elsewhere now (a pooler put in front of the database):
                # PoolerRefused goes up and stops the process (Worker.run)
                self._conn = self._connect()
                mine = attempts.keys()
                # peers see the new session first: a session holding runner keys that is not
                # registered is a squatter to them (runner/worker/orphans.py)
                ledger.heartbeat_instance(self.conn(), self.owner)
                kept = ledger.relock_runs(self.conn(), self.owner.namespace, mine)
                break
            except psycopg.OperationalError as exc:  # down, or cut again while re-locking
                log.warning("database unreachable (%s); retrying in %.1fs", first_line(exc), delay)
                with contextlib.suppress(Exception):
                    if self._conn is not None:
                        self._conn.close()
                self._wake.wait(delay)
                delay = min(delay * 2, 10.0)
        else:
            return
        lost = attempts.keep(kept)  # the old session's holds died with it; the new one holds these
        for a in lost:
            a.ctx.cancel("this process lost its lock session and another process owns the run")
        log.warning("lock session re-established: %d run(s) kept, %d lost to other processes",
                    len(kept), len(lost))

    # -- the clock ------------------------------------------------------------------------

    def now(self) -> datetime:
        """The database clock, estimated locally."""
        return datetime.fromtimestamp(time.time() + self._offset, UTC)

    def measure_offset(self) -> None:
        best: tuple[float, float] | None = None
        for _ in range(3):
            t0 = time.time()
            db = ledger.db_now(self.conn()).timestamp()
            t1 = time.time()
            sample = (t1 - t0, db - (t0 + t1) / 2)
            if best is None or sample[0] < best[0]:
                best = sample
        assert best is not None
        self._offset = best[1]

    def ahead(self, seconds: float) -> None:
        """Our clock ran ``seconds`` ahead of the database's at a claim: pull half of it back."""
        self._offset -= seconds / 2
