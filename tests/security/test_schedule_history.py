"""Issue 28, point 1: a worker login hid missed slots by back-dating the schedule history (one
row "every 100 years" dated a second after track_from took the gap scan from 49 missing slots
to 1, and `runner check` found nothing). The attack again, as a real LOGIN of the worker role:
its direct writes of runner.job_schedules are refused; runner.sync_schedule_v1, its only way
to write the history, refuses to date an append into the past or the future, and dates a
re-assertion at most 60 s back whatever it is told; and a back-dated row that only a
superuser can still write is reported by `runner check` (exit 1)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import errors

from runner import Runner
from runner.store import ledger
from tests.security.conftest import Logins, refused, snapshot
from tests.support import rows, run_cli, scalar

SYNC = ("SELECT * FROM runner.sync_schedule_v1(job_name => 'tick', schedule_kind => 'every', cron => NULL,"
        " every_interval => %(every)s::interval, timezone => 'UTC', partitions => NULL,"
        " dynamic_partitions => false, instance => %(instance)s::uuid, reassert => %(reassert)s,"
        " fresh_for => %(fresh_for)s, as_of => %(as_of)s::timestamptz)")


def registered(logins: Logins) -> Any:
    """Job 'tick' (every minute, tracked from two hours ago) synced by the worker login as a
    runner start does; returns its track_from."""
    app = Runner()
    with psycopg.connect(logins.worker, autocommit=True) as conn:
        now = ledger.db_now(conn)
        app.job("tick", every="1m", track_from=now.replace(second=0, microsecond=0) - timedelta(hours=2))(
            lambda ctx: None)
        return ledger.sync_jobs(conn, list(app.jobs.values()))["tick"]


def missing(url: str) -> int:
    return int(scalar(url, "SELECT count(*) FROM runner.missing_slots WHERE job_name = 'tick'"))


def test_the_worker_cannot_write_the_history_but_through_the_function(bare_logins: Logins) -> None:
    track_from = registered(bare_logins)
    admin = bare_logins.admin
    assert rows(admin, "SELECT valid_from, explained_by FROM runner.job_schedules") == [(track_from, "first sync")]
    assert missing(admin) >= 100  # two hours of a minutely job, none run
    before = snapshot(admin)
    back = track_from + timedelta(seconds=1)
    # the attack of the issue, and its variants: every direct write is refused
    for statement, params in (
            ("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval, timezone)"
             " VALUES ('tick', %s, 'every', '100 years', 'UTC')", (back,)),
            ("UPDATE runner.job_schedules SET every_interval = '100 years'", None),
            ("UPDATE runner.job_schedules SET valid_from = valid_from + interval '1 second'", None),
            ("DELETE FROM runner.job_schedules", None),
            ("TRUNCATE runner.job_schedules", None)):
        assert "permission denied" in refused(bare_logins.worker, statement, params), statement
    # the function: an append dated by the caller into the past, or the future, is refused
    with psycopg.connect(bare_logins.worker, autocommit=True) as conn:
        for as_of in (back, ledger.db_now(conn) + timedelta(days=365)):
            with pytest.raises(errors.InsufficientPrivilege) as refusal:
                conn.execute(SYNC, {"every": "100 years", "instance": None, "reassert": False,
                                    "fresh_for": 15, "as_of": as_of})
            assert "may be appended only from now" in str(refusal.value), refusal.value
            assert "only the schema owner dates the schedule history" in str(refusal.value)
        # and so is a runner start told to date its sync (the whole sync rolls back)
        changed = Runner()
        changed.job("tick", every="1d", track_from=track_from)(lambda ctx: None)
        with pytest.raises(errors.InsufficientPrivilege):
            ledger.sync_jobs(conn, list(changed.jobs.values()), now=back)
    assert snapshot(admin) == before, "a refused write changed the ledger"
    assert missing(admin) >= 100
    # what the function does write for this login: a definition in force from now
    with psycopg.connect(bare_logins.worker, autocommit=True) as conn:
        [row] = conn.execute(SYNC, {"every": "1 day", "instance": None, "reassert": False,
                                    "fresh_for": 15, "as_of": None}).fetchall()
        assert row[3] is True
        assert row[4] == scalar(admin, "SELECT max(recorded_at) FROM runner.job_schedules")
    assert missing(admin) >= 100  # nothing missed before now was forgotten
    assert rows(admin, "SELECT explained_by FROM runner.job_schedules ORDER BY valid_from") == [
        ("first sync",), ("sync",)]
    out = run_cli("check", "--json", url=admin)
    assert out.returncode == 0, (out.stdout, out.stderr)


def test_a_forged_instance_cannot_date_a_reassertion_far_back(bare_logins: Logins) -> None:
    """A re-assertion is dated from when the other definition's last runner stopped, never
    before the caller's own start: a worker login that registers an instance "started" at
    track_from + 1 s on its own session and passes fresh_for = a year gets a row dated at most
    60 s before now, which the audit accepts as a re-assertion; the slots missed before stay
    listed."""
    track_from = registered(bare_logins)
    admin = bare_logins.admin
    listed = missing(admin)
    with psycopg.connect(bare_logins.worker, autocommit=True) as conn:
        instance = conn.execute(
            "INSERT INTO runner.instances (instance_id, host, pid, backend_pid, lock_namespace, started_at)"
            " VALUES (gen_random_uuid(), 'forger', 1, pg_backend_pid(), 1, %s) RETURNING instance_id",
            (track_from + timedelta(seconds=1),)).fetchone()
        assert instance is not None
        [row] = conn.execute(SYNC, {"every": "100 years", "instance": instance[0], "reassert": True,
                                    "fresh_for": 365 * 86400.0, "as_of": None}).fetchall()
        now = ledger.db_now(conn)
    assert row[3] is True
    assert now - timedelta(seconds=61) <= row[4] <= now, row
    assert missing(admin) >= listed - 2  # at most the last minute's slot is judged by the new row
    out = run_cli("check", "--json", url=admin)
    assert out.returncode == 0, (out.stdout, out.stderr)


def test_a_superusers_backdated_row_is_reported_by_runner_check(bare_logins: Logins) -> None:
    """Only a superuser (or the schema owner) can still write the history directly. Whatever
    explanation it writes, the row is stamped by the trigger, and one dated into the past is
    history_unexplained: `runner check` exits 1 and names it."""
    track_from = registered(bare_logins)
    admin = bare_logins.admin
    listed = missing(admin)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval,"
                     " timezone, explained_by, recorded_at) VALUES ('tick', %s, 'every', '100 years', 'UTC',"
                     " 'first sync', %s)", (track_from + timedelta(seconds=1), track_from))
    assert missing(admin) < listed  # the attack works for a superuser: slots are hidden ...
    out = run_cli("check", "--json", url=admin)
    assert out.returncode == 1, (out.stdout, out.stderr)  # ... and the audit says so
    [found] = [v for v in json.loads(out.stdout) if v["invariant"] == "history_unexplained"]
    assert found["job_name"] == "tick"
    assert found["detail"]["explained_by"] == "schema owner"  # the trigger's word, not the writer's
    assert found["detail"]["schedule"] == "every 100 years UTC"
    assert "back-dated" in found["detail"]["problem"]
    text = run_cli("check", url=admin)
    assert text.returncode == 1 and "history_unexplained" in text.stdout + text.stderr
