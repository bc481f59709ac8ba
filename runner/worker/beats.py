"""The heartbeats of one process: its attempts' (the ``beats`` duty, every third of the
shortest lease, between 0.5 and 10 s) and its own (``instance_beat``, every
``instance_heartbeat`` seconds, in runner.instances: peers read it to share slots out and to
tell a live runner from a dead one).

An attempt beats while this session holds its key: running, and returned but not yet
recorded. During the shutdown grace both keep beating (``while_stopping``): a lease shorter
than the grace must not make peers end this session and re-run work that is finishing
normally.
"""

from __future__ import annotations

import logging
import time

import psycopg

from runner.model.jobs import JobDef
from runner.store import ledger
from runner.store.ledger import Owner
from runner.worker.attempts import Attempts
from runner.worker.config import LoopConfig, first_line
from runner.worker.duties import Duty
from runner.worker.session import LockSession

log = logging.getLogger("runner.loop")


class Beats:
    """The ``beats`` duty (module docstring)."""

    name = "beats"

    def __init__(self, jobs: dict[str, JobDef], owner: Owner, session: LockSession,
                 attempts: Attempts) -> None:
        leases = [j.lease.total_seconds() for j in jobs.values()] or [60.0]
        self.every: float | None = min(max(min(leases) / 3, 0.5), 10.0)
        self.owner = owner
        self.session = session
        self.attempts = attempts

    def run_once(self) -> None:
        ledger.heartbeat_attempts(self.session.conn(), self.owner, self.attempts.held_runs())

    def while_stopping(self, duty: Duty) -> None:
        """One beat of the attempts and the instance during the shutdown grace, on the
        cadence of this duty (``duty``: its entry in the loop's duties)."""
        mono = time.monotonic()
        if mono < duty.next_at or not self.session.alive():
            return
        assert self.every is not None
        duty.next_at = mono + self.every
        try:
            self.run_once()
            ledger.heartbeat_instance(self.session.conn(), self.owner)
        except psycopg.Error as exc:
            log.warning("heartbeat during shutdown failed: %s", first_line(exc))


class InstanceBeat:
    """The ``instance_beat`` duty (module docstring)."""

    name = "instance_beat"

    def __init__(self, config: LoopConfig, owner: Owner, session: LockSession) -> None:
        if config.instance_heartbeat <= 0:
            raise ValueError("instance_heartbeat must be > 0")
        self.every: float | None = config.instance_heartbeat
        self.owner = owner
        self.session = session

    def run_once(self) -> None:
        ledger.heartbeat_instance(self.session.conn(), self.owner)
