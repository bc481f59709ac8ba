"""Failure made boring: real `runner start` processes killed, stopped, cut off and shut down."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, scalar

SETUP = """
CREATE TABLE marks (run_id bigint, attempt int, fence bigint, pid int, what text,
                    at timestamptz DEFAULT clock_timestamp());
CREATE TABLE release (run_id bigint, attempt int);
CREATE TABLE sink (run_id bigint, attempt int, fence bigint);
"""


@pytest.fixture
def fault_db(db_url: str) -> str:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(SETUP)
    return db_url


# the fault app's daily jobs' one slot (tests/apps/faults.py): the same in every process of
# every test here, late at start, the next one a day away
SLOT = (datetime.now(UTC) - timedelta(minutes=30)).replace(second=0, microsecond=0)


def start(url: str, tmp: Path, name: str, *extra: str) -> RunnerProcess:
    """A runner of the fault app. Its shutdown grace is 5 s unless given (a "slow" attempt
    blocks until the test lets it go; the default 30 s would outlast the wait for its exit)."""
    grace = () if "--grace" in extra else ("--grace", "5")
    return RunnerProcess("tests/apps/faults.py:app", url, "--poll-interval", "0.2", *grace, *extra,
                         env={"FAULTS_SLOT": SLOT.isoformat()}, log=tmp / f"{name}.log")


def slow_run(url: str) -> tuple[int, int]:
    got = rows(url, "SELECT r.id, m.pid FROM runner.job_runs r JOIN marks m ON m.run_id = r.id"
                    " WHERE r.job_name = 'slow' AND m.what = 'started' AND m.attempt = 1")
    return got[0] if got else None  # type: ignore[return-value]


def instances(url: str) -> int:
    return scalar(url, "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL")


def test_kill_9_owner_is_taken_over_at_once(fault_db: str, tmp_path: Path) -> None:
    a = start(fault_db, tmp_path, "a")
    b = None
    try:
        run_id, pid = eventually(lambda: slow_run(fault_db), timeout=20)
        assert pid == a.proc.pid
        b = start(fault_db, tmp_path, "b")
        eventually(lambda: instances(fault_db) == 2, timeout=20)
        killed_at = scalar(fault_db, "SELECT now()")
        a.kill()  # SIGKILL: no chance to clean up
        eventually(lambda: scalar(fault_db, "SELECT status FROM runner.job_runs WHERE id = %s",
                                  (run_id,)) == "succeeded", timeout=20)
        recovered_at = scalar(fault_db, "SELECT started_at FROM runner.attempts WHERE run_id = %s"
                                        " AND attempt = 2", (run_id,))
        print(f"takeover latency after kill -9: {(recovered_at - killed_at).total_seconds():.3f}s")
    finally:
        a.kill()
        if b:
            assert b.terminate() == 0, b.output()
    assert rows(fault_db, "SELECT attempt, status, trigger, error_class FROM runner.attempts"
                          " WHERE run_id = %s ORDER BY attempt", (run_id,)) == [
        (1, "abandoned", "catch_up", "runner.OwnerLost"), (2, "succeeded", "recovery", None)]
    assert rows(fault_db, "SELECT attempt FROM sink WHERE run_id = %s", (run_id,)) == [(2,)]
    # the recovery is the run's second counted attempt (max_attempts=2): a crash loop ends
    # dead rather than forever (tests/test_edges.py)
    assert scalar(fault_db, "SELECT fence FROM runner.job_runs WHERE id = %s", (run_id,)) == 2
    assert_ledger_clean(fault_db)


def test_sigstop_past_lease_is_fenced_out(fault_db: str, tmp_path: Path) -> None:
    a = start(fault_db, tmp_path, "a")
    b = None
    try:
        run_id, _ = eventually(lambda: slow_run(fault_db), timeout=20)
        b = start(fault_db, tmp_path, "b")
        eventually(lambda: instances(fault_db) == 2, timeout=20)
        os.kill(a.proc.pid, signal.SIGSTOP)
        # past the 2 s lease, b ends a's lock session and takes the run over
        eventually(lambda: scalar(fault_db, "SELECT status FROM runner.job_runs WHERE id = %s",
                                  (run_id,)) == "succeeded", timeout=30)
        # a wakes up and its blocked handler is let go: it writes and tries to succeed
        with psycopg.connect(fault_db, autocommit=True) as conn:
            conn.execute("INSERT INTO release VALUES (%s, 1)", (run_id,))
        os.kill(a.proc.pid, signal.SIGCONT)
        eventually(lambda: scalar(fault_db, "SELECT status FROM runner.attempts WHERE run_id = %s"
                                            " AND attempt = 1", (run_id,)) == "stale", timeout=30)
    finally:
        with __import__("contextlib").suppress(ProcessLookupError):
            os.kill(a.proc.pid, signal.SIGCONT)
        code_a = a.terminate()
        code_b = b.terminate() if b else 0
    assert (code_a, code_b) == (0, 0), a.output() + (b.output() if b else "")
    # exactly one success, one sink row (the recovery's); the stale owner's write rolled back
    assert rows(fault_db, "SELECT status, fence FROM runner.job_runs WHERE id = %s", (run_id,)) == [
        ("succeeded", 2)]
    assert rows(fault_db, "SELECT attempt, fence FROM sink WHERE run_id = %s", (run_id,)) == [(2, 2)]
    assert "refused" in a.output()
    assert_ledger_clean(fault_db)


def test_connection_killed_mid_run_loses_nothing(fault_db: str, tmp_path: Path) -> None:
    a = start(fault_db, tmp_path, "a")
    try:
        run_id, _ = eventually(lambda: slow_run(fault_db), timeout=20)
        killed = scalar(fault_db, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                                  " WHERE application_name = 'runner' AND datname = current_database()")
        assert killed >= 1
        with psycopg.connect(fault_db, autocommit=True) as conn:
            conn.execute("INSERT INTO release VALUES (%s, 1)", (run_id,))
        # the process reconnects, locks its run again (nobody took it) and completes it
        eventually(lambda: scalar(fault_db, "SELECT status FROM runner.job_runs WHERE id = %s",
                                  (run_id,)) == "succeeded", timeout=30)
        eventually(lambda: scalar(fault_db, "SELECT count(*) FROM runner.job_runs"
                                            " WHERE job_name = 'quick' AND status = 'succeeded'") >= 3)
    finally:
        assert a.terminate() == 0, a.output()
    assert scalar(fault_db, "SELECT count(*) FROM sink WHERE run_id = %s", (run_id,)) == 1
    assert "reconnect" in a.output() or "re-established" in a.output()
    assert_ledger_clean(fault_db)


def test_shutdown_hands_running_runs_over(fault_db: str, tmp_path: Path) -> None:
    a = start(fault_db, tmp_path, "a", "--grace", "0.5")
    b = None
    try:
        run_id, _ = eventually(lambda: slow_run(fault_db), timeout=20)
        b = start(fault_db, tmp_path, "b")
        eventually(lambda: instances(fault_db) == 2, timeout=20)
        assert a.terminate() == 0, a.output()  # SIGTERM: grace passes, the run is released
        eventually(lambda: scalar(fault_db, "SELECT status FROM runner.job_runs WHERE id = %s",
                                  (run_id,)) == "succeeded", timeout=20)
    finally:
        a.kill()
        if b:
            assert b.terminate() == 0, b.output()
    got = rows(fault_db, "SELECT attempt, status, trigger FROM runner.attempts WHERE run_id = %s"
                         " ORDER BY attempt", (run_id,))
    assert got == [(1, "released", "catch_up"), (2, "succeeded", "recovery")]
    # the released attempt did not count against max_attempts
    assert rows(fault_db, "SELECT uncounted_attempts, attempt FROM runner.job_runs WHERE id = %s",
                (run_id,)) == [(1, 2)]
    assert_ledger_clean(fault_db)


def test_timeouts_stop_handlers_without_blocking_the_runner(fault_db: str, tmp_path: Path) -> None:
    a = start(fault_db, tmp_path, "a", "--grace", "0.5")
    try:
        for job in ("cooperative-timeout", "stubborn-timeout"):
            eventually(lambda job=job: scalar(fault_db, "SELECT status FROM runner.job_runs WHERE job_name = %s",
                                              (job,)) == "dead", timeout=20, message=job)
        # meanwhile the every-second job kept running
        eventually(lambda: scalar(fault_db, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'quick'"
                                            " AND status = 'succeeded'") >= 2)
    finally:
        assert a.terminate() == 0, a.output()
    got = rows(fault_db, "SELECT r.job_name, a.status, a.error_class FROM runner.attempts a"
                         " JOIN runner.job_runs r ON r.id = a.run_id"
                         " WHERE r.job_name LIKE '%%timeout' ORDER BY 1")
    assert got == [("cooperative-timeout", "timed_out", "runner.Timeout"),
                   ("stubborn-timeout", "timed_out", "runner.Timeout")]
    # the stubborn handler's pg_sleep was cancelled: no statement of it is still running
    assert scalar(fault_db, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(3600)%%'"
                            " AND state = 'active' AND datname = current_database()") == 0
    assert_ledger_clean(fault_db)


def test_ending_a_hung_owner_without_the_privilege_is_false_not_an_error(db_url: str) -> None:
    import uuid

    role = f"runner_nopriv_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        admin.execute(f'GRANT USAGE ON SCHEMA runner TO "{role}"')
        admin.execute(f'GRANT EXECUTE ON FUNCTION runner.try_terminate_v1(integer) TO "{role}"')
        # a runner's own lock session (registered, connected as runner): the one kind of
        # session try_terminate_v1 ends, where the caller may
        victim_conn = psycopg.connect(db_url, autocommit=True, application_name="runner")
        victim_conn.execute("INSERT INTO runner.instances (instance_id, host, pid, backend_pid, lock_namespace,"
                            " runner_version, jobs, definitions)"
                            " VALUES (%s, 'h', 1, pg_backend_pid(), 21077, 't', '{}', '{}')", (uuid.uuid4(),))
        victim = victim_conn.info.backend_pid
        try:
            url = psycopg.conninfo.make_conninfo(db_url, user=role)
            with psycopg.connect(url, autocommit=True) as weak:
                assert weak.execute("SELECT runner.try_terminate_v1(%s)", (victim,)).fetchone() == (False,)
            assert victim_conn.execute("SELECT 1").fetchone() == (1,)  # still alive
            assert scalar(db_url, "SELECT count(*) FROM runner.runner_sessions_v1() s WHERE s = %s",
                          (victim,)) == 1  # (so it was the privilege that kept it)
        finally:
            victim_conn.close()
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')


def test_sigterm_waits_for_handlers_and_a_second_sigint_exits_at_once(fault_db: str, tmp_path: Path) -> None:
    a = start(fault_db, tmp_path, "a", "--grace", "600")
    run_id, _ = eventually(lambda: slow_run(fault_db), timeout=20)
    a.proc.send_signal(signal.SIGINT)  # first: stop claiming, wait for the running handler
    eventually(lambda: "stopping" in a.output(), timeout=10)
    assert a.proc.poll() is None  # still waiting for the blocked handler (grace 600 s)
    a.proc.send_signal(signal.SIGINT)  # second: exit at once
    assert a.proc.wait(10) == 130
    a.kill()
    # the run is left running without a live owner, for takeover (its lock died with the process)
    assert scalar(fault_db, "SELECT status FROM runner.job_runs WHERE id = %s", (run_id,)) == "running"
    assert scalar(fault_db, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database ="
                            " (SELECT oid FROM pg_database WHERE datname = current_database())") == 0
    # a runner started later takes the orphan over; then the ledger is whole again
    b = start(fault_db, tmp_path, "b")
    try:
        eventually(lambda: scalar(fault_db, "SELECT status FROM runner.job_runs WHERE id = %s",
                                  (run_id,)) == "succeeded", timeout=20)
    finally:
        assert b.terminate() == 0, b.output()
    assert_ledger_clean(fault_db)
