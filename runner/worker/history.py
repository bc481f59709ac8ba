"""The schedule history across code versions: which definition of a job's schedule is in
force when, kept by the runners that sync it.

``runner.job_schedules`` is the history: each row is a definition (kind, cron or interval,
zone, partitions) in force from its ``valid_from`` until the next row's. The gap scan
(``runner.missing_slots``), ``runner check`` and the misfire duty judge every slot by the row
in force at it, so the history must say what the code that ran at each instant ran.

**Why one writer with a rule.** Before revision 0026 every starting runner appended its own
definition whenever it differed from the newest row. During a rollout (v1 every 3 s, v2
every 2 s) a supervisor restarting one v1 process rewrote the history back to 3 s while v2
kept running, and once only v2 ran the history still said 3 s: the gap scan listed 3 s slots
v2 never had, and a downtime of v2 was judged by the 3 s schedule, so most of its missed 2 s
slots were neither run nor listed, and the audit, expanding the same history, agreed
(issue 26, defect 2).

**The rule** (``runner.sync_schedule_v1``, sql/functions/sync_schedule_v1.sql, under the job's
row lock):

* Each runner records the definition it runs of each job: its fingerprint
  (``runner.schedule_fingerprint_v1``, 12 hex digits) and a label, in
  ``runner.instances.definitions``, written when it registers.
* A starting runner appends its definition only when the history's current definition is
  not run by any *live* runner (not stopped, instance heartbeat within 3 x
  ``instance_heartbeat``, its lock session connected). Otherwise it runs its own schedule
  without rewriting the history (``runner.jobs`` keeps the history's definition too), logs
  ``definition_conflict`` and ``runner.alerts`` shows a ``definition_conflict`` row naming
  both fingerprints, their schedules and the hosts and pids that run each. So an old version
  restarted mid-rollout never rewrites the history while the new one runs, and vice versa:
  the history keeps whichever definition was in force until its last runner is gone.
  The version not in force runs its own slots from its start, and of those due before it
  only the ones within the job's grace, as any start does (its on-time window): runs of
  slots the history does not expect, inside the span the ``definition_conflict`` alert
  names and ``runner.instances.definitions`` keeps
  (tests/test_history.py::test_a_new_version_started_mid_interval_runs_only_its_on_time_window).
* A running runner whose definition is not the history's current one (the history duty
  below, every ``instance_heartbeat``, 5 s by default: one short query) re-asserts it as soon
  as no live runner runs the current one: v2 alone, after v1's last runner stopped, restores
  its 2 s schedule within that interval. The row
  is dated from when the other definition's last runner stopped (``stopped_at``, or its last
  heartbeat if it died), never before this runner's own start, never more than
  ``fresh_for`` back and never at or before the current row: this runner ran its own
  schedule all along, so the slots since then are its own, and no slot of the old schedule
  that nobody ran is left as a phantom gap. A later downtime of v2 is then judged by v2's
  schedule, and v2's restart hands those missed slots to its misfire duty.
* A runner starting when nobody runs the current definition appends its own from now, as
  before: a downtime between two versions is judged by the schedule in force during it.

Whatever the order of restarts, the history changes only when the definition in force has
no live runner, so every slot is judged by a schedule some live runner was running, and the
misfire duty, the gap scan and the audit read the same rows.

**The audit.** Every history row is stamped when written, whoever writes it (the trigger
``job_schedules_stamp``, revision 0026_history): its fingerprint, ``recorded_at`` and
``explained_by`` (a sync, a re-assertion, a plain append in force from now of the job's
synced definition, the schema owner; never the writer's choice). A row that nothing
explains, or any row dated into the past that is not a job's first row nor a re-assertion
within 60 s, whoever wrote it, is reported by ``runner check`` as ``history_unexplained``.
The worker role cannot write the table at all (issue 28, point 1: a worker login back-dated
a definition and hid missed slots): ``runner.sync_schedule_v1`` is a runner's only writer,
dates every row itself, and refuses a caller's ``as_of`` that is not now unless the session
is the schema owner's (tests inject time that way).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import psycopg

from runner.events import event
from runner.model.jobs import JobDef
from runner.store import ledger
from runner.store.ledger import Definition, Owner

log = logging.getLogger("runner.history")


def report(definitions: Mapping[str, Definition]) -> None:
    """Log the jobs whose definition was not written because a live runner runs another."""
    for d in definitions.values():
        if not d.in_force and d.held_by:
            event(log, "definition_conflict", logging.WARNING, job=d.job_name, fingerprint=d.fingerprint,
                  schedule=d.label, history=d.current, held_by=d.held_by)


def run_once(conn: psycopg.Connection[Any], owner: Owner, jobs: Mapping[str, JobDef],
             fresh_for: float) -> list[Definition]:
    """The history duty: re-assert this runner's definition of each job whose history holds
    another one that no live runner runs any more. ``conn`` is the runner's lock session (the
    function checks that the caller is the instance it names). Returns what was appended."""
    appended = []
    for name in ledger.definitions_behind(conn, owner.instance):
        job = jobs.get(name)
        if job is None:
            continue
        d = ledger.sync_schedule(conn, job, owner.instance, reassert=True, fresh_for=fresh_for)
        if d is not None and d.appended:
            appended.append(d)
            event(log, "schedule_reasserted", job=name, fingerprint=d.fingerprint, schedule=d.label,
                  valid_from=d.valid_from)
    return appended
