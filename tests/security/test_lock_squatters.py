"""Run-lock keys cannot be squatted for good (issue 12, point 5).

Any role that can connect can take any advisory key, and run keys are predictable
(runner.lock_key_v1). A session that is not a registered runner session (runner.instances)
and holds such keys is a squatter: runners never end it (issue 29: it may be the
application's session, or a pooled backend), log it as such (never as a run's "owner"), runner.alerts lists it (lock_squatter), and a run whose key it
holds fails in bounded, counted attempts (runner.LockUnavailable) instead of retrying
forever.

Fails before the fix: no alert kind lock_squatter; a dead owner's run whose key a squatter
holds is never recovered (only a heartbeat past the lease got the squatter ended, and the
log then blamed it as the run's "owner session").
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg

from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, run_cli, scalar

APP = "tests/apps/squatted.py:app"
NAMESPACE = 21077


def squatter_alerts(url: str) -> list[dict[str, Any]]:
    out = run_cli("status", "--json", url=url)
    assert out.returncode == 0, out.stderr
    return [a for a in json.loads(out.stdout)["alerts"] if a["kind"] == "lock_squatter"]


def start(url: str, tmp: Path, name: str) -> RunnerProcess:
    return RunnerProcess(APP, url, "--poll-interval", "0.2", "--grace", "1", log=tmp / f"{name}.log")


def test_squatted_keys_fail_in_counted_attempts_and_alert(db_url: str, db_roles: Any, tmp_path: Path) -> None:
    """The runner (a worker login) may not end a superuser's session: the squatted runs go
    dead after max_attempts counted attempts, the alert names the session all along."""
    db_roles.apply(db_url)
    with psycopg.connect(db_url, autocommit=True) as squatter:
        first = squatter.execute("SELECT nextval(pg_get_serial_sequence('runner.job_runs', 'id'))").fetchone()[0]
        squatted = [first + 1 + i for i in range(3)]  # the keys of the next runs, taken ahead
        for run_id in squatted:
            squatter.execute("SELECT pg_advisory_lock(runner.lock_key_v1(%s, %s))", (NAMESPACE, run_id))
        squatter_pid = squatter.info.backend_pid
        proc = start(db_roles.url(db_url, "worker"), tmp_path, "worker")
        try:
            def all_dead() -> bool:
                got = rows(db_url, "SELECT status FROM runner.job_runs WHERE id = ANY(%s)", (squatted,))
                return len(got) == 3 and {s for (s,) in got} == {"dead"}
            eventually(all_dead, timeout=60, message="the squatted runs dead")
            alerts = squatter_alerts(db_url)
            assert len(alerts) == 1, alerts
            assert f"session {squatter_pid} " in alerts[0]["detail"]
            assert "not a registered runner session" in alerts[0]["detail"]
            assert "3 advisory key(s)" in alerts[0]["detail"]
            eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 2,
                       timeout=30, message="the other runs go on")
        finally:
            assert proc.terminate() == 0, proc.output()
        # bounded and counted: max_attempts attempts each, every one refused its lock
        attempts = rows(db_url, "SELECT run_id, count(*), bool_and(error_class = 'runner.errors.LockUnavailable'),"
                                " max(r.attempt) FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id"
                                " WHERE run_id = ANY(%s) GROUP BY run_id ORDER BY run_id", (squatted,))
        assert attempts == [(run_id, 3, True, 3) for run_id in squatted], attempts
        log = proc.output()
        assert "lock_squatter " in log and f"session={squatter_pid}" in log, log
        assert "owner session" not in log
        assert log.count("lock_squatter ") == 1, log  # reported once a minute, not every pass
    assert squatter_alerts(db_url) == []  # the session is gone: no alert
    assert_ledger_clean(db_url)


def test_a_squatter_on_a_dead_owners_run_is_reported_never_ended_and_the_run_recovered_once_it_lets_go(
        db_url: str, db_roles: Any, tmp_path: Path) -> None:
    """The owner died, a read-only login holds the run's key (before the owner's heartbeat
    ages). The runner may end any session (a superuser), and does not end this one: it is not
    a runner's own session (it may be the application's, or a pooled backend PgBouncer hands
    to the application: tests/test_poolers.py). It reports it; once the session lets go of the
    key, the run is recovered.

    Fails before issue 29: the runner ended the session (lock_squatter_ended)."""
    db_roles.apply(db_url)
    slot = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    with psycopg.connect(db_url, autocommit=True) as conn:
        run_id = conn.execute(
            "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date, window_start,"
            " window_end, status, trigger, attempt, fence, idempotency_key, started_at)"
            " VALUES ('squatted', %s, '', %s, %s, %s, 'running', 'schedule', 1, 1, 'k', now()) RETURNING id",
            (slot, slot.date(), slot - timedelta(seconds=1), slot)).fetchone()[0]
        conn.execute(
            "INSERT INTO runner.attempts (run_id, attempt, fence, trigger, owner_host, owner_pid, owner_instance,"
            " lock_key) VALUES (%s, 1, 1, 'schedule', 'gone', 1, %s, runner.lock_key_v1(%s, %s))",
            (run_id, uuid4(), NAMESPACE, run_id))
    squatter = psycopg.connect(db_roles.url(db_url, "readonly"), autocommit=True)
    try:
        assert squatter.execute("SELECT pg_try_advisory_lock(runner.lock_key_v1(%s, %s))",
                                (NAMESPACE, run_id)).fetchone() == (True,)
        squatter_pid = squatter.info.backend_pid
        proc = start(db_url, tmp_path, "runner")
        try:
            eventually(lambda: f"session={squatter_pid}" in proc.output(), timeout=30,
                       message="the squatter reported")
            # passes of the takeover duty after the report (every 0.2 s): several runs later
            done = scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'")
            eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'")
                       >= done + 3, timeout=30, message="three more runs")
            assert squatter.execute("SELECT pg_backend_pid()").fetchone() == (squatter_pid,)  # not ended
            assert scalar(db_url, "SELECT status FROM runner.job_runs WHERE id = %s", (run_id,)) == "running"
            assert [a["run_id"] for a in squatter_alerts(db_url)] == [run_id]
            squatter.execute("SELECT pg_advisory_unlock_all()")
            eventually(lambda: scalar(db_url, "SELECT status FROM runner.job_runs WHERE id = %s",
                                      (run_id,)) == "succeeded", timeout=30, message="the run recovered")
        finally:
            assert proc.terminate() == 0, proc.output()
        assert rows(db_url, "SELECT attempt, trigger, status FROM runner.attempts WHERE run_id = %s ORDER BY attempt",
                    (run_id,)) == [(1, "schedule", "abandoned"), (2, "recovery", "succeeded")]
        log = proc.output()
        assert "lock_squatter " in log and "never ended" in log, log
        assert "lock_squatter_ended" not in log
        assert f"owner session {squatter_pid}" not in log
        assert not squatter.broken
    finally:
        squatter.close()
    assert_ledger_clean(db_url)
