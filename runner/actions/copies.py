"""A ledger restored as a copy of another, and its adoption (issue 29, point 6).

A ledger records where it lives when schema step 0007_identity runs (runner.ledger_identity:
the cluster's system identifier, the database's oid and name). A copy carries its source's
row, so ``runner.ledger_copy_v1()`` tells one: pg_dump/pg_restore or CREATE DATABASE ...
TEMPLATE gives a new database oid even within one cluster, a restore into another cluster a
new system identifier. Physical copies (a promoted replica, pg_basebackup, PITR) keep both
and are the same ledger as far as this can tell: a failover must not stop the fleet.

Why it matters: a copy holds its source's work as of the dump — backfill plans running,
late ranges open, runs queued, failed or running under the source's runners — and a
``runner start`` against it would carry all of that out a second time (a staging database
restored from production would replay production's backfill at once). So while the ledger is
an unadopted copy, every runner of it *holds* (``Hold``) the duties that act on work it did not
start itself: the backfill lane, the misfire duty (catch-up of late slots: the ranges are
read and kept, not decided), the retries duty (retries and queued runs: reruns, approvals,
catch-up) and the takeover duty (the source's running runs, whose owners are not here).
Live slots falling due from its start on run as usual. The instance rows of the source are
not peers either way: a runner's lock session must be connected to this database
(runner.runner_sessions_v1 and the ``live_instances`` statement check ``datname``).

An operator ends the hold with ``runner db adopt --reason R`` (or the console's ``adopt``
action: one registry, runner/actions/registry.py): ``runner.adopt_ledger_v1`` records the current
identity, marks the source's instance rows stopped and writes the ``runner.requests`` row in
one transaction. Runners re-read the identity every ``RECHECK`` seconds while they hold, so
they go on within that long; a ledger found not copied at start is never read again (a
database cannot become a copy under a live runner). ``runner.alerts`` shows ``copied_ledger``
meanwhile, ``runner check`` and ``runner start`` say it in one line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from runner.actions.operate import OperatorError, call_action, checked_text, default_who, get_request
from runner.events import event
from runner.sqlfiles import queries
from runner.store import ledger

log = logging.getLogger("runner.copies")

Q = queries("copies")

RECHECK = 5.0  # seconds between two reads of the identity while a runner holds

# the loop's duties a copy holds until adopted (runner/worker/loop.py names them)
HELD_DUTIES = ("misfire", "takeover", "retries", "lane")


class Hold:
    """Whether this runner holds the duties of HELD_DUTIES (module docstring): ``check`` at
    start; ``run_once`` (a duty of the loop) re-reads the identity every RECHECK seconds while
    held and calls ``on_adopted`` once the copy is adopted."""

    name = "copy"
    every: float | None = None

    def __init__(self, conn: Callable[[], psycopg.Connection[Any]],
                 on_adopted: Callable[[], None] | None = None) -> None:
        self._conn = conn
        self._on_adopted = on_adopted
        self.detail: str | None = None
        self._next = 0.0

    @property
    def held(self) -> bool:
        return self.detail is not None

    def check(self) -> str | None:
        """Read the identity now; returns why the ledger is a copy (None: it is not)."""
        was = self.detail
        self.detail = ledger.ledger_copy(self._conn())
        self._next = time.monotonic() + RECHECK
        if self.detail is not None and was is None:
            log.warning("%s", self.detail)
            event(log, "ledger_copied", detail=self.detail)
        elif self.detail is None and was is not None:
            event(log, "ledger_adopted")
            if self._on_adopted is not None:
                self._on_adopted()
        return self.detail

    def run_once(self) -> None:
        if self.detail is not None and time.monotonic() >= self._next:
            self.check()

    def guard(self, run: Callable[[], None]) -> Callable[[], None]:
        """``run``, or nothing while the ledger is an unadopted copy."""
        def guarded() -> None:
            if self.detail is None:
                run()
        return guarded


# -- runner db adopt (runner/actions/registry.py registers it) ---------------------------------------


@dataclass(frozen=True)
class AdoptPlan:
    copy: dict[str, Any]  # runner.ledger_copy_v1's row
    plans_running: int  # backfill plans planned or running, which runners will go on with
    runs_queued: int  # pending or failed runs (queued, retries)
    runs_running: int  # running runs, which runners will take over when their owner is not here
    instances: int  # instance rows not stopped whose session is not connected here

    @property
    def refusal(self) -> str | None:
        if self.copy["copied"]:
            return None
        return (f"this ledger is not a copy: it was recorded in database {self.copy['database_name']} "
                f"(oid {self.copy['database_oid']}) of cluster {self.copy['system_identifier']}, where it "
                "is; nothing to adopt")

    def shown(self) -> dict[str, Any]:
        return {"identity": self.copy, "plans_running": self.plans_running, "runs_queued": self.runs_queued,
                "runs_running": self.runs_running, "instances_to_stop": self.instances,
                "refusal": self.refusal}


def plan_adopt(conn: psycopg.Connection[Any]) -> AdoptPlan:
    """What adopting this ledger would let its runners do (reads only)."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(Q["adopt_impact"]).fetchone()
    assert row is not None
    copy = {k: row[k] for k in ("copied", "detail", "recorded_system_identifier", "recorded_database_oid",
                                "recorded_database_name", "recorded_at", "system_identifier",
                                "database_oid", "database_name")}
    for key in ("recorded_system_identifier", "system_identifier"):  # 64-bit: JSON readers lose digits
        copy[key] = None if copy[key] is None else str(copy[key])
    return AdoptPlan(copy=copy, plans_running=row["plans_running"], runs_queued=row["runs_queued"],
                     runs_running=row["runs_running"], instances=row["instances"])


def adopt(conn: psycopg.Connection[Any], plan: AdoptPlan, reason: str,
          who: str | None = None) -> dict[str, Any]:
    """Adopt the copy (runner.adopt_ledger_v1): the current identity recorded, the source's
    instance rows stopped, and the runner.requests row, in one transaction."""
    if plan.refusal:
        raise OperatorError(plan.refusal)
    reason = checked_text(reason, "--reason")
    who = checked_text(who or default_who(), "--by")
    with conn.transaction():
        done = call_action(conn, Q["adopt"], {"who": who, "reason": reason})
        request = get_request(conn, done[0]["request_id"])
    return {"request": request, "instances_stopped": done[0]["instances_stopped"]}
