"""The misfire duty of one process: late slots, handed over by the claim path, decided by
their job's policy (runner/worker/misfire.py) in bounded batches.

Late slots (not started within the job's grace: every runner was down, or this one was
stopped or overloaded) are never claimed as if on time. The claim path hands each job's late
slots over as ranges (``hand``, ``hand_claims``); a range is fixed when it is handed over, so
on-time claims cannot hide late slots. Each pass decides one batch of the oldest range of
each job that has one. Its own error boundary, per job: a failure keeps the range (retried
after a poll interval) and never stops the other jobs or duties; only a lost lock session
goes up to the loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg

from runner.errors import error_text
from runner.model.jobs import JobDef
from runner.store.ledger import SlotClaim
from runner.worker import misfire
from runner.worker.config import LoopConfig
from runner.worker.session import LockSession

log = logging.getLogger("runner.loop")


class Misfires:
    """The ``misfire`` duty (module docstring). ``started`` is called when a pass queued
    catch-up runs (the retries duty starts them now)."""

    name = "misfire"
    every: float | None = None

    def __init__(self, config: LoopConfig, jobs: dict[str, JobDef], session: LockSession,
                 started: Callable[[], None]) -> None:
        if config.poll_interval <= 0:
            raise ValueError("poll_interval must be > 0")
        self.config = config
        self.jobs = jobs
        self.session = session
        self._started = started
        # late slots per job, oldest range first
        self._late: dict[str, list[misfire.LateRange]] = {}
        self._retry: dict[str, float] = {}  # job -> monotonic time before which not to retry

    def resume(self, conn: psycopg.Connection[Any], jobs: list[JobDef]) -> None:
        """The ranges of these jobs a runner left open in the ledger (misfire.open_ranges),
        before any other, each with its ruling."""
        for name, late in misfire.open_ranges(conn, jobs):
            self._late.setdefault(name, []).append(late)

    def hand(self, job_name: str, first: datetime | None, last: datetime) -> None:
        """The late slots [first, last] of a job (first None: from the newest complete slot)."""
        ranges = self._late.setdefault(job_name, [])
        if first is not None and ranges and ranges[-1].first is not None \
                and ranges[-1].first <= first <= ranges[-1].last:
            ranges[-1].extend(last)  # already handed over (overlapping)
            return
        ranges.append(misfire.LateRange(first, last))

    def hand_claims(self, claims: list[SlotClaim]) -> list[SlotClaim]:
        """Claims whose slot is past its job's grace are handed over (their slot, as a range
        of one); returns the others, still on time."""
        now = self.session.now()
        on_time = []
        for c in claims:
            if c.slot <= misfire.cutoff_for(self.jobs[c.job_name], now):
                self.hand(c.job_name, c.slot, c.slot)
            else:
                on_time.append(c)
        return on_time

    def run_once(self) -> None:
        """One batch of the oldest late range of each job that has one (module docstring)."""
        now = self.session.now()
        mono = time.monotonic()
        started = 0
        for name in sorted(self._late):
            if self._retry.get(name, 0.0) > mono:
                continue
            ranges = self._late[name]
            try:
                decisions = misfire.run_once(self.session.conn(), self.jobs[name], now, ranges[0],
                                             prometheus_url=self.config.prometheus_url)
            except psycopg.Error as exc:
                if not self.session.alive():
                    raise
                cls, msg = error_text(exc)
                log.error("job %r: misfire decisions failed (%s: %s); retrying in %.1fs", name,
                          cls, msg[:300], self.config.poll_interval)
                self._retry[name] = mono + self.config.poll_interval
                continue
            if decisions.paused:
                self._retry[name] = mono + self.config.poll_interval
                continue
            self._retry.pop(name, None)
            started += decisions.started
            if not decisions.more:
                ranges.pop(0)
                if not ranges:
                    del self._late[name]
        if started:
            self._started()
