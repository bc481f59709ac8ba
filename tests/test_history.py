"""The schedule history across two code versions of one job (issue 26, defect 2;
runner/worker/history.py has the design): an old version restarted mid-rollout never rewrites the
history while the new one runs, the new one's schedule is in force as soon as it runs alone,
and a later downtime of it is judged by its own schedule: every missed slot is run or listed,
no slot of the old schedule is listed as a phantom gap, and the audit is clean. Real
``runner start`` processes of two app files (tests/apps/history_v1.py every 3 s,
tests/apps/history_v2.py every 2 s, the same job, partitions a and b)."""

from __future__ import annotations

import itertools
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, scalar

APP = "tests/apps/history_v{}.py:app"
JOB = "rollout"
ACCOUNTED = ("succeeded", "skipped", "coalesced", "cancelled")


def start(version: int, url: str, tmp_path: Path, name: str) -> RunnerProcess:
    return RunnerProcess(APP.format(version), url, "--poll-interval", "0.1", log=tmp_path / f"{name}.log")


def stopped_at(url: str, proc: RunnerProcess) -> datetime:
    """When a runner process deregistered (runner.instances.stopped_at): slots after it are
    no longer its."""
    value: datetime = scalar(url, "SELECT stopped_at FROM runner.instances WHERE pid = %s AND stopped_at IS NOT NULL"
                                  " ORDER BY started_at DESC LIMIT 1", (proc.proc.pid,))
    assert value is not None
    return value


def db_now(url: str) -> datetime:
    value: datetime = scalar(url, "SELECT now()")
    return value


def ran(url: str, after: datetime, grid: int, off_grid: int | None = None) -> int:
    """Succeeded runs of slots after ``after`` on the ``grid``-second grid (and not on
    ``off_grid``'s)."""
    return int(scalar(url, "SELECT count(*) FROM runner.job_runs WHERE job_name = %s AND status = 'succeeded'"
                           " AND schedule_slot > %s AND extract(epoch FROM schedule_slot)::numeric %% %s = 0"
                           " AND (%s::int IS NULL OR extract(epoch FROM schedule_slot)::numeric %% %s <> 0)",
                      (JOB, after, grid, off_grid, off_grid)))


def history(url: str) -> list[int]:
    """The schedule history of the job, as its intervals in seconds, oldest first."""
    return [int(r[0]) for r in rows(url, "SELECT extract(epoch FROM every_interval) FROM runner.job_schedules"
                                         " WHERE job_name = %s ORDER BY valid_from", (JOB,))]


def downtime_accounted(url: str, stopped: datetime, restarted: datetime, grid: int = 2) -> bool:
    """Every slot x partition of the ``grid``-second schedule in (stopped, restarted) has a
    run that accounts for it, or is listed by the gap scan."""
    missing = rows(url, """
        WITH slots AS (
            SELECT s AS slot FROM generate_series(
                to_timestamp(ceil(extract(epoch FROM %(stopped)s::timestamptz) / %(grid)s) * %(grid)s),
                %(restarted)s::timestamptz, make_interval(secs => %(grid)s)) AS s
            WHERE s > %(stopped)s AND s < %(restarted)s
        )
        SELECT x.slot, p.key FROM slots x CROSS JOIN unnest(ARRAY['a', 'b']) AS p(key)
        WHERE NOT EXISTS (SELECT 1 FROM runner.job_runs r
                          WHERE r.job_name = %(job)s AND r.schedule_slot = x.slot AND r.partition_key = p.key
                            AND r.status = ANY(%(accounted)s))
          AND NOT EXISTS (SELECT 1 FROM runner.missing_slots_v1(now(), %(job)s) m
                          WHERE m.schedule_slot = x.slot AND m.partition_key = p.key)
        ORDER BY 1, 2""", {"stopped": stopped, "restarted": restarted, "job": JOB, "accounted": list(ACCOUNTED),
                          "grid": grid})
    assert not missing, f"{len(missing)} slot x partitions of the downtime neither run nor listed: {missing}"
    return True


@pytest.mark.slow
def test_an_old_version_restarted_mid_rollout_never_rewrites_the_history(db_url: str, tmp_path: Path) -> None:
    """Issue 26, defect 2, in the issue's order: v1 runs; v2 starts (a rollout); a supervisor
    restarts the v1 process; v1 stops; v2 runs alone, then is down 6 s and starts again."""
    procs: list[RunnerProcess] = []
    conflicts: list[Any] = []
    try:
        began = db_now(db_url)
        a = start(1, db_url, tmp_path, "v1-a")
        procs.append(a)
        eventually(lambda: ran(db_url, began, 3) >= 2, timeout=60, message="v1 runs")
        b = start(2, db_url, tmp_path, "v2-b")
        procs.append(b)
        t = db_now(db_url)
        eventually(lambda: ran(db_url, t, 2, off_grid=3) >= 2, timeout=60, message="v2 runs its own slots")
        # both versions live: the alert names both definitions
        conflicts = eventually(lambda: rows(db_url, "SELECT detail FROM runner.alerts"
                                                    " WHERE kind = 'definition_conflict' AND job_name = %s",
                                            (JOB,)), timeout=10, message="a definition_conflict alert")
        # the supervisor restarts the v1 process (its start syncs v1's definition again)
        assert a.terminate() == 0, a.output()
        a2 = start(1, db_url, tmp_path, "v1-a2")
        procs.append(a2)
        eventually(lambda: "runner_started" in a2.output(), timeout=60, message="v1 restarted")
        t = db_now(db_url)
        eventually(lambda: ran(db_url, t, 3, off_grid=2) >= 1, timeout=60, message="the restarted v1 runs")
        assert a2.terminate() == 0, a2.output()
        alone = db_now(db_url)
        v1_gone = stopped_at(db_url, a2)
        # v2 alone: its schedule is back in force within an instance heartbeat (5 s)
        eventually(lambda: history(db_url)[-1] == 2, timeout=10,
                   message="the history's current definition is v2's again, v2 running alone")
        eventually(lambda: ran(db_url, alone, 2) >= 3, timeout=60, message="v2 runs alone")
        # a downtime of v2: 6 s, 3 slots x 2 partitions
        assert b.terminate() == 0, b.output()
        stopped = db_now(db_url)
        eventually(lambda: scalar(db_url, "SELECT now() - %s > interval '6 seconds'", (stopped,)), timeout=60)
        b2 = start(2, db_url, tmp_path, "v2-b2")
        procs.append(b2)
        eventually(lambda: "runner_started" in b2.output(), timeout=60, message="v2 restarted")
        restarted = db_now(db_url)
        eventually(lambda: downtime_accounted(db_url, stopped, restarted), timeout=30,
                   message="every missed slot x partition of v2 run or listed")
        eventually(lambda: ran(db_url, restarted, 2) >= 2, timeout=60, message="v2 runs again")
        assert b2.terminate() == 0, b2.output()
    finally:
        for p in procs:
            if p.proc.poll() is None:
                p.terminate()
    # the history went from v1 to v2 once, never back
    assert history(db_url) == [3, 2], history(db_url)
    # the alert named both fingerprints (and what runs them)
    fingerprints = rows(db_url, "SELECT fingerprint FROM runner.job_schedules WHERE job_name = %s"
                                " ORDER BY valid_from", (JOB,))
    assert len(conflicts) == 1 and all(f[0] in conflicts[0][0] for f in fingerprints), conflicts
    assert "every 00:00:03" in conflicts[0][0] and "every 00:00:02" in conflicts[0][0], conflicts
    # no phantom slot of v1's schedule listed once v1's last runner stopped (a slot of v1's
    # while it ran that it left half claimed, its other partition v2's share, is listed: not a
    # phantom, and not silent)
    phantom = rows(db_url, "SELECT schedule_slot, partition_key, state FROM runner.missing_slots_v1(now(), %s)"
                           " WHERE schedule_slot > %s AND extract(epoch FROM schedule_slot)::numeric %% 2 <> 0",
                   (JOB, v1_gone))
    assert not phantom, phantom
    assert_ledger_clean(db_url)


@pytest.mark.slow
def test_a_rollback_after_a_restart_mid_rollout_restores_the_old_schedule(db_url: str, tmp_path: Path) -> None:
    """The other way out of the same rollout: v1 runs, v2 starts, the v1 process is
    restarted, then v2 is stopped (a rollback) and v1 runs alone: v1's schedule is in force
    again within an instance heartbeat, a 6 s downtime of v1 is judged by it (every missed
    3 s slot x partition run or listed), no 2 s slot is listed as a phantom, the history never
    repeats a definition back to back, and the audit is clean."""
    procs: list[RunnerProcess] = []
    try:
        began = db_now(db_url)
        a = start(1, db_url, tmp_path, "v1-a")
        procs.append(a)
        eventually(lambda: ran(db_url, began, 3) >= 2, timeout=60, message="v1 runs")
        b = start(2, db_url, tmp_path, "v2-b")
        procs.append(b)
        t = db_now(db_url)
        eventually(lambda: ran(db_url, t, 2, off_grid=3) >= 2, timeout=60, message="v2 runs its own slots")
        assert a.terminate() == 0, a.output()
        a2 = start(1, db_url, tmp_path, "v1-a2")
        procs.append(a2)
        eventually(lambda: "runner_started" in a2.output(), timeout=60, message="v1 restarted")
        t = db_now(db_url)
        eventually(lambda: ran(db_url, t, 3, off_grid=2) >= 1, timeout=60, message="the restarted v1 runs")
        assert b.terminate() == 0, b.output()  # the rollback
        alone = db_now(db_url)
        v2_gone = stopped_at(db_url, b)
        eventually(lambda: history(db_url)[-1] == 3, timeout=10,
                   message="the history's current definition is v1's, v1 running alone")
        eventually(lambda: ran(db_url, alone, 3) >= 3, timeout=60, message="v1 runs alone")
        assert a2.terminate() == 0, a2.output()
        stopped = db_now(db_url)
        eventually(lambda: scalar(db_url, "SELECT now() - %s > interval '6 seconds'", (stopped,)), timeout=60)
        a3 = start(1, db_url, tmp_path, "v1-a3")
        procs.append(a3)
        eventually(lambda: "runner_started" in a3.output(), timeout=60, message="v1 restarted after its downtime")
        restarted = db_now(db_url)
        eventually(lambda: downtime_accounted(db_url, stopped, restarted, grid=3), timeout=30,
                   message="every missed slot x partition of v1 run or listed")
        eventually(lambda: ran(db_url, restarted, 3) >= 2, timeout=60, message="v1 runs again")
        assert a3.terminate() == 0, a3.output()
    finally:
        for p in procs:
            if p.proc.poll() is None:
                p.terminate()
    kept = history(db_url)
    assert kept[-1] == 3 and all(x != y for x, y in itertools.pairwise(kept)), kept
    phantom = rows(db_url, "SELECT schedule_slot, partition_key, state FROM runner.missing_slots_v1(now(), %s)"
                           " WHERE schedule_slot > %s AND extract(epoch FROM schedule_slot)::numeric %% 3 <> 0",
                   (JOB, v2_gone))
    assert not phantom, phantom
    assert_ledger_clean(db_url)


def test_a_new_version_started_mid_interval_runs_only_its_on_time_window(db_url: str, tmp_path: Path) -> None:
    """A new version started while the old one runs (a conflict: the history keeps v1's
    definition, runner/worker/history.py) runs its own schedule from its start, and of the
    slots due before it only those within its grace (1 s): the on-time window of any start
    (runner/worker/claims.py, ``begin``). Those runs are of slots the history does not expect
    (v2's grid, v1 in force): the rollout's mixed span that definition_conflict names, which
    the model test excuses by exactly this bound (tests/test_model.py, ``rollout``; the long
    tier's seed 267526912 found the bound it had assumed, one interval, too narrow). Nothing
    older is claimed, whatever the phase of the interval the start falls in, and the audit
    stays clean."""
    procs: list[RunnerProcess] = []
    try:
        began = db_now(db_url)
        a = start(1, db_url, tmp_path, "v1-a")
        procs.append(a)
        # (a few of v1's slots first: slots of v2's grid off v1's then lie between the job's
        # track_from and v2's start, which a wider window would claim)
        eventually(lambda: ran(db_url, began, 3) >= 2, timeout=60, message="v1 runs")
        b = start(2, db_url, tmp_path, "v2-b")
        procs.append(b)
        t = db_now(db_url)
        eventually(lambda: ran(db_url, t, 2, off_grid=3) >= 2, timeout=60, message="v2 runs its own slots")
        assert b.terminate() == 0, b.output()
        assert a.terminate() == 0, a.output()
    finally:
        for p in procs:
            if p.proc.poll() is None:
                p.terminate()
    started = scalar(db_url, "SELECT started_at FROM runner.instances WHERE pid = %s", (b.proc.pid,))
    assert history(db_url) == [3], history(db_url)  # v1 ran throughout: the history kept it
    # every slot v2's process ran: none due more than its grace before it started
    slots = [r[0] for r in rows(db_url, "SELECT DISTINCT r.schedule_slot FROM runner.attempts a"
                                        " JOIN runner.job_runs r ON r.id = a.run_id"
                                        " WHERE r.job_name = %s AND a.owner_pid = %s ORDER BY 1",
                                (JOB, b.proc.pid))]
    assert slots, "v2 ran nothing"
    window = scalar(db_url, "SELECT %s::timestamptz - interval '1 second'", (started,))
    assert slots[0] > window, (slots[0], started)
    assert_ledger_clean(db_url)
