"""The loop's duties: named units of work, each with its own cadence and error boundary.

A runner's tick is a fixed, explicit sequence of duties (see ``Worker._make_duties`` in
runner/worker/loop.py for the order and why it is that order). Each duty is a function of no
arguments with a cadence: every tick, or at most every so many seconds (monotonic clock),
and it can be asked to run on the next tick (``soon``). One duty's failure never stops the
others:

* a lost lock session (``psycopg.OperationalError`` while the session is broken) goes up to
  the loop, which reconnects: every duty needs that session, so none can go on without it;
* any other exception (a transient database error, a bug, a user callable that raises where
  it was not guarded) is logged with the duty's name, counted in
  ``runner_duty_failures_total{duty}``, and the duty is retried after ``retry_after`` seconds
  (doubling on repeated failures up to ``max_retry_after``); the rest of the tick goes on.

So the order in which duties see the ledger, and what a failing duty does to the others, is
written down here and in the Worker, not implied by the shape of one long method. Each
maintenance duty is a module of runner/worker/ of one shape (``Maintenance``: a name, a
cadence, a config checked when it is made, ``run_once()``), owning its own state.

A few duties live beside the loop instead, each on a thread and connection of its own
(``on_own_connection``): the gap-scan watermarks, retention, the backfill pause conditions and
ending hung owners' sessions. They must never hold up the loop's lock session (a pause
condition is untrusted SQL, a prune pass deletes in batches, the hung owners are found in the
server's whole lock table), and they share the same error boundary and failure counter.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg

from runner.errors import error_text

log = logging.getLogger("runner.duties")


class Maintenance(Protocol):
    """The shape of every maintenance duty of the loop (runner/worker/: takeover, retries,
    misfire, lane, beats): a name, a cadence (None: every tick), a config checked when it is
    made, and ``run_once()``, one bounded pass that tests can call directly."""

    name: str
    every: float | None

    def run_once(self) -> None: ...


@dataclass
class Duty:
    """One named duty. ``every``: None runs it on every tick; else at most every so many
    seconds. ``next_at`` is monotonic time."""

    name: str
    run: Callable[[], None]
    every: float | None = None
    next_at: float = 0.0
    failures: int = 0  # consecutive

    @classmethod
    def of(cls, service: Maintenance) -> Duty:
        """The loop's entry for a maintenance duty: its name, ``run_once`` and cadence."""
        return cls(service.name, service.run_once, service.every)

    def due(self, mono: float) -> bool:
        return mono >= self.next_at

    def soon(self) -> None:
        """Run on the next tick, whatever the cadence."""
        self.next_at = 0.0


class Duties:
    """The ordered duties of one loop."""

    def __init__(self, duties: Iterable[Duty], session_alive: Callable[[], bool],
                 on_failure: Callable[[str], None] | None = None, retry_after: float = 1.0,
                 max_retry_after: float = 30.0) -> None:
        self.order = list(duties)
        self._by_name = {d.name: d for d in self.order}
        if len(self._by_name) != len(self.order):
            raise ValueError("duty names must be unique")
        self._session_alive = session_alive
        self._on_failure = on_failure
        self.retry_after = retry_after
        self.max_retry_after = max_retry_after

    def __getitem__(self, name: str) -> Duty:
        return self._by_name[name]

    def run_due(self) -> None:
        """Run every due duty once, in order, each behind its own error boundary."""
        for duty in self.order:
            mono = time.monotonic()
            if not duty.due(mono):
                continue
            if duty.every is not None:
                duty.next_at = mono + duty.every
            try:
                duty.run()
            except psycopg.OperationalError:
                if not self._session_alive():
                    raise  # the loop reconnects; every duty needs the lock session
                self._failed(duty)
            except Exception:
                if not self._session_alive():
                    raise
                self._failed(duty)
            else:
                duty.failures = 0

    def next_due(self) -> float | None:
        """The monotonic time of the nearest periodic duty (None: there is none)."""
        times = [d.next_at for d in self.order if d.every is not None or d.failures]
        return min(times, default=None)

    def _failed(self, duty: Duty) -> None:
        duty.failures += 1
        delay = min(self.retry_after * 2 ** (duty.failures - 1), self.max_retry_after)
        duty.next_at = time.monotonic() + delay
        exc = sys.exc_info()[1]
        cls, msg = error_text(exc) if exc is not None else ("?", "")
        log.error("duty %s failed (%s: %s); the other duties go on; retrying in %.1fs "
                  "(failure %d in a row)", duty.name, cls, msg.splitlines()[0][:300] if msg else "",
                  delay, duty.failures, exc_info=log.isEnabledFor(logging.DEBUG))
        if self._on_failure is not None:
            self._on_failure(duty.name)


def on_own_connection(name: str, connect: Callable[[], psycopg.Connection[Any]],
                      work: Callable[[psycopg.Connection[Any]], None], stop: threading.Event,
                      every: float, *, first_now: bool = False,
                      on_failure: Callable[[str], None] | None = None,
                      max_retry_after: float = 30.0) -> threading.Thread:
    """Start a duty that lives beside the loop, on a daemon thread and a connection of its
    own (the gap-scan watermarks, retention, pause conditions): ``work(conn)`` every
    ``every`` seconds until ``stop`` is set, first at once if ``first_now`` else after one
    interval.

    Its error boundary is the loop's: any exception is logged with the duty's name, counted
    through ``on_failure`` (``runner_duty_failures_total{duty}``) and retried after a delay
    that doubles from ``every`` up to ``max_retry_after`` (never shorter than ``every``); a
    connection that is closed, broken or lost (``OperationalError``) is opened again on the
    next pass. Nothing it does can stop the loop or the other duties, and the loop's SIGTERM
    never waits for it (daemon; its connection closes when the pass ends)."""

    def forever() -> None:
        conn: psycopg.Connection[Any] | None = None
        failures = 0
        delay = 0.0 if first_now else every
        while not stop.wait(delay):
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = connect()
                work(conn)
            except Exception as exc:
                failures += 1
                delay = max(every, min(every * 2 ** failures, max_retry_after))
                cls, msg = error_text(exc)
                log.warning("duty %s failed (%s: %s); retrying in %.0fs (failure %d in a row)",
                            name, cls, msg.splitlines()[0][:300] if msg else "", delay, failures)
                if on_failure is not None:
                    on_failure(name)
                if conn is not None and (conn.closed or conn.broken
                                         or isinstance(exc, psycopg.OperationalError)):
                    with contextlib.suppress(Exception):
                        conn.close()
                    conn = None
            else:
                failures = 0
                delay = every
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    thread = threading.Thread(target=forever, name=f"runner-{name}", daemon=True)
    thread.start()
    return thread
