"""The takeover duty: runs whose owner is gone get a new attempt at once.

A live owner holds its run's advisory lock on its process's lock session; PostgreSQL drops
the lock when that session ends (the process was killed, its connection cut). ``run_once``
finds running runs whose lock nobody holds, locks them on this process's lock session and
takes them over in one statement that re-checks status and fence, so it never races a
completion: the old attempt is closed as ``abandoned``, the new one has a higher fence and
trigger ``recovery``. A recovery counts against the job's ``max_attempts`` like any other
attempt: a run whose owners died that many times (a handler that kills its process) goes
``dead`` instead of being taken over again. Detection needs no heartbeat timeout, only the
next pass of the loop (every poll interval, 1 s by default).

A *hung* owner still holds its lock but has stopped beating: its process is stopped
(SIGSTOP), partitioned or wedged. Past its job's lease, ``run_once`` ends the holder's
session with ``pg_terminate_backend`` (which needs the ``pg_signal_backend`` role, the same
role as the holder, or superuser); the lock goes with the session and the next pass takes
the run over. If the old owner wakes up, every write it tries is refused by the fence.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from runner import ledger
from runner.events import event
from runner.ledger import ClaimedRun, Owner

log = logging.getLogger("runner.takeover")

DEFAULT_LEASE = 60.0


@dataclass
class TakeoverResult:
    taken: list[ClaimedRun]
    terminated: list[ledger.HungOwner]


def run_once(conn: psycopg.Connection[Any], owner: Owner, job_names: Sequence[str], limit: int,
             default_lease: float = DEFAULT_LEASE) -> TakeoverResult:
    """One pass: end hung owners past their lease, then take over runs with no live owner
    (at most ``limit``). ``conn`` must be this process's lock session."""
    hung = ledger.end_hung_owners(conn, job_names, default_lease)
    for h in hung:
        if h.terminated:
            log.warning("run %s: owner session %s silent since %s (past its lease): ended it",
                        h.run_id, h.holder_pid, h.heartbeat_at.isoformat())
        else:
            log.error("run %s: owner session %s silent since %s (past its lease), and this "
                      "runner may not end it (grant pg_signal_backend)", h.run_id, h.holder_pid,
                      h.heartbeat_at.isoformat())
    taken: list[ClaimedRun] = []
    if limit > 0:
        taken, dead = ledger.take_over_orphans(conn, owner, job_names, limit)
        if dead:
            ledger.unlock_runs(conn, owner.namespace, dead)
        for run_id in dead:
            event(log, "run_dead", logging.ERROR, run_id=run_id,
                  reason="its owner died with no attempts left (max_attempts)")
        for run in taken:
            event(log, "run_recovered", logging.WARNING, job=run.job_name, slot=run.slot,
                  partition=run.partition_key, run_id=run.id, attempt=run.attempt, fence=run.fence)
    return TakeoverResult(taken=taken, terminated=[h for h in hung if h.terminated])
