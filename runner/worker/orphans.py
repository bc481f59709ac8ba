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

Lanes (runner/worker/lanes.py): a process takes over only runs of the lanes it serves, and each lane
at most its free in-flight room on the process (``limit`` maps lane -> room; the statement
numbers each lane's orphans, oldest first, and keeps that many), so a takeover counts toward
the lane's cap exactly as a claim does. Ending squatters and hung owners is lane-blind: a
session is ended for what it holds, and its runs then wait for a process serving their lane.

A *hung* owner still holds its lock but has stopped beating: its process is stopped
(SIGSTOP), partitioned or wedged. Past its job's lease, ``end_hung`` ends the holder's
session with ``pg_terminate_backend`` (which needs the ``pg_signal_backend`` role, the same
role as the holder, or superuser); the lock goes with the session and the next pass takes
the run over. If the old owner wakes up, every write it tries is refused by the fence.
``end_hung`` runs beside the loop, on a connection of its own with a statement timeout
(``HUNG_TIMEOUT``), never on the lock session: it reads the server's whole lock table, which
during a slot of 100,000 runs held as many advisory locks and took up to 12 s a call, while no
claim could be sent on the lock session (issue 32).

Only a registered runner session (runner.instances, sql/functions/runner_sessions_v1.sql)
is an owner, and only a session proven to be a runner's lock session is ever ended
(runner.try_terminate_v1 checks it again: registered, and connected as ``runner``). Any other
session holding a key of the runner's lock namespace is a *squatter* (an application sharing
``RUNNER_LOCK_NAMESPACE``, a login that takes keys on purpose: any role that can connect can,
or a pooled backend a runner left keys on through a transaction pool, which a pooler hands to
the application's clients): while it holds a running run's key the run cannot be recovered,
and a run due to take its key fails (runner.LockUnavailable, counted against
``max_attempts``). A squatter is never ended (it may be the application's session: ending it
would cut the application off), only reported: ``end_hung`` logs each (``lock_squatter``, once
a minute per session) and runner.alerts lists them (``lock_squatter``) until it releases the
keys or an operator ends it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from runner.events import event
from runner.store import ledger
from runner.store.ledger import ClaimedRun, Owner

log = logging.getLogger("runner.takeover")

DEFAULT_LEASE = 60.0
HUNG_TIMEOUT = 5.0  # seconds: the statement timeout of end_hung's connection
SQUATTER_LOG_EVERY = 60.0  # seconds between reports of a squatter this runner may not end
_reported: dict[int, float] = {}  # squatter pid -> when it was last reported


@dataclass
class TakeoverResult:
    taken: list[ClaimedRun]


def connect_bounded(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """``conn``, every statement of it bounded by ``HUNG_TIMEOUT`` (set on the session, not
    as a startup option, which a pooler may refuse): the connection ``end_hung`` runs on."""
    conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{int(HUNG_TIMEOUT * 1000)}ms",))
    return conn


def end_hung(conn: psycopg.Connection[Any], owner: Owner, job_names: Sequence[str],
             lock_pid: int | None, default_lease: float = DEFAULT_LEASE) -> list[ledger.HungOwner]:
    """Report squatters (never ended) and end the sessions of hung owners past their lease;
    the sessions ended. ``conn`` is a connection of its own, never the lock session;
    ``lock_pid``, this process's lock session (never judged: its own runs beat here)."""
    _report_squatters(conn, owner.namespace)
    hung = ledger.end_hung_owners(conn, job_names, default_lease, lock_pid=lock_pid)
    for h in hung:
        if h.terminated:
            log.warning("run %s: owner session %s silent since %s (past its lease): ended it",
                        h.run_id, h.holder_pid, h.heartbeat_at.isoformat())
        else:
            log.error("run %s: owner session %s silent since %s (past its lease), and this "
                      "runner may not end it (grant pg_signal_backend)", h.run_id, h.holder_pid,
                      h.heartbeat_at.isoformat())
    return [h for h in hung if h.terminated]


def run_once(conn: psycopg.Connection[Any], owner: Owner, job_names: Sequence[str],
             limit: int | Mapping[str, int]) -> TakeoverResult:
    """One pass: take over runs with no live owner (a hung one's session is ended by
    ``end_hung``, beside the loop): ``limit`` maps each lane this process serves to its free
    in-flight room here (a lane not in it is not taken from); an int: any lane, that many in
    all. ``conn`` must be this process's lock session."""
    taken: list[ClaimedRun] = []
    if (limit if isinstance(limit, int) else sum(max(n, 0) for n in limit.values())) > 0:
        taken, dead = ledger.take_over_orphans(conn, owner, job_names, limit)
        if dead:
            ledger.unlock_runs(conn, owner.namespace, dead)
        for run_id in dead:
            event(log, "run_dead", logging.ERROR, run_id=run_id,
                  reason="its owner died with no attempts left (max_attempts)")
        for run in taken:
            event(log, "run_recovered", logging.WARNING, job=run.job_name, slot=run.slot,
                  partition=run.partition_key, run_id=run.id, attempt=run.attempt, fence=run.fence)
    return TakeoverResult(taken=taken)


def _report_squatters(conn: psycopg.Connection[Any], namespace: int) -> None:
    now = time.monotonic()
    for s in ledger.squatters(conn, namespace):
        if now - _reported.get(s.pid, -SQUATTER_LOG_EVERY) < SQUATTER_LOG_EVERY:
            continue
        _reported[s.pid] = now
        runs = ", ".join(map(str, s.run_ids[:10])) + (", ..." if len(s.run_ids) > 10 else "")
        event(log, "lock_squatter", logging.ERROR, session=s.pid, user=s.user,
              application=s.application, keys=len(s.run_ids), runs=runs,
              reason="not a registered runner session, so never ended by a runner (it may be the "
                     "application's, or a pooled backend): the runs it holds cannot be recovered and "
                     "runs due to take its keys fail until it releases them or an operator ends it")
    if len(_reported) > 1000:
        _reported.clear()
