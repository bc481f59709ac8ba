"""Behind a real PgBouncer (issue 29, point 1; tests/pgbouncer.py starts Debian's 1.18).

Session mode works: runs start, ``runner check`` is clean, no lock outlives the runner. A
transaction (or statement) pool is refused with one line, by ``runner start`` (its lock session
would take run locks on one pooled backend and unlock them on another), when the lock session
reconnects to one, and by ``runner db upgrade`` (its session lock would stay held on a pooled
backend). And a runner never ends a session that is not provably a runner's own lock session:
a pooled backend left holding run keys serves the application's clients.

Fails before the fix: through the transaction pool ``runner start`` ran (a third of the runs,
``prepared statement "_pg3_1"`` errors, run locks left on an idle pooled backend), ``runner db
upgrade`` exited 0 leaving the migrate lock held, and the runner ended the pooled backend
holding run keys as a lock squatter.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
import pytest

from runner.store import pooler
from tests.pgbouncer import pgbouncer
from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, run_cli, scalar

APP = "tests/apps/hello.py:app"  # one job, every second
NAMESPACE = 21077
REFUSAL = "through a pooler in transaction or statement mode"

# advisory locks of the test database, whoever holds them
ADVISORY = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")


def one_line_refusal(out: Any) -> None:
    assert out.returncode != 0, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and REFUSAL in lines[0] and "pool_mode = session" in lines[0], out.stderr


def test_session_pool_runs_and_leaves_nothing_behind(db_url: str, tmp_path: Path) -> None:
    """Two runners through a session pool: every second's run starts, once; after both exit
    (and after a client that ended holding a lock) no advisory lock is held, `runner check` through the pool is clean, and the application's
    session through the same pool was never ended."""
    with pgbouncer(tmp_path, db_url, "session", pool_size=10) as bouncer, \
            psycopg.connect(bouncer.url, autocommit=True) as application:
        app_pid = application.execute("SELECT pg_backend_pid()").fetchone()[0]
        # through the pooler nothing proves a direct connection, so the full check runs (and
        # passes: session mode); straight to the server over TCP, one statement proves it
        assert not pooler.direct(application)
        with psycopg.connect(db_url, autocommit=True) as straight:
            assert pooler.direct(straight) == (straight.info.hostaddr != "")
        # a client that ends without unlocking (a runner killed outright) leaves no lock on the
        # pooled backend: PgBouncer's server_reset_query (DISCARD ALL) releases it (README)
        gone = psycopg.connect(bouncer.url, autocommit=True)
        held = gone.execute("SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock(runner.lock_key_v1(%s, 1)))"
                            " AS l", (NAMESPACE,)).fetchone()[0]
        gone.close()
        eventually(lambda: scalar(db_url, ADVISORY) == 0, timeout=10, message="the lock released")
        assert scalar(db_url, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (held,)) == 1  # still pooled
        procs = [RunnerProcess(APP, bouncer.url, "--poll-interval", "0.2", "--grace", "1", "--workers", "2",
                               log=tmp_path / f"runner{i}.log") for i in range(2)]
        try:
            eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 4,
                       timeout=60, message="runs through the session pool")
        finally:
            codes = [p.terminate() for p in procs]
        assert codes == [0, 0], [p.output() for p in procs]
        for p in procs:
            assert "prepared statement" not in p.output() and REFUSAL not in p.output(), p.output()
        # one run per slot, none lost: every slot between the first and the last has its run
        slots = [s for (s,) in rows(db_url, "SELECT schedule_slot FROM runner.job_runs ORDER BY 1")]
        assert len(slots) == len(set(slots)) and len(slots) == int((slots[-1] - slots[0]).total_seconds()) + 1
        assert scalar(db_url, ADVISORY) == 0
        check = run_cli("check", url=bouncer.url)
        assert check.returncode == 0, check.stdout + check.stderr
        assert application.execute("SELECT pg_backend_pid()").fetchone() == (app_pid,)
    assert_ledger_clean(db_url)


def test_transaction_and_statement_pools_are_refused_with_one_line(db_url: str, tmp_path: Path) -> None:
    """`runner start` and `runner db upgrade` through a transaction or a statement pool exit
    non-zero with one line saying what to use; nothing is
    registered, no lock is left held, and an upgrade straight to PostgreSQL afterwards does not
    wait for a leaked migrate lock."""
    for mode in ("transaction", "statement"):
        with pgbouncer(tmp_path, db_url, mode) as bouncer:
            out = run_cli("start", "--app", APP, url=bouncer.url, timeout=60)
            one_line_refusal(out)
            one_line_refusal(run_cli("db", "upgrade", url=bouncer.url, timeout=60))
            assert scalar(db_url, ADVISORY) == 0
    assert scalar(db_url, "SELECT count(*) FROM runner.instances") == 0
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs") == 0
    direct = run_cli("db", "upgrade", "--lock-timeout", "5", url=db_url, timeout=60)
    assert direct.returncode == 0, direct.stderr


def test_a_lock_session_that_reconnects_into_a_transaction_pool_stops_the_runner(
        db_url: str, tmp_path: Path) -> None:
    """The lock session is cut and its URL now leads through a transaction pool: the loop's
    reconnect refuses it (PoolerRefused, one line) and the runner stops, instead of taking run
    locks there."""
    from runner.store.pooler import PoolerRefused
    from runner.worker.loop import LoopConfig, Worker
    from tests.apps.hello import app

    with pgbouncer(tmp_path, db_url, "transaction") as bouncer:
        worker = Worker(app, db_url, LoopConfig(workers=2, poll_interval=0.05, grace=1))
        worker.start()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                worker.run()
            except BaseException as exc:  # handed to the test thread
                failure.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 1,
                       timeout=30, message="a run, direct")
            lock_pid = worker.session.conn().info.backend_pid
            worker.session.url = bouncer.url
            with psycopg.connect(db_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (lock_pid,))
            thread.join(30)
            assert not thread.is_alive()
        finally:
            worker.stop()
            thread.join(30)
        assert len(failure) == 1 and isinstance(failure[0], PoolerRefused), failure
        assert REFUSAL in str(failure[0]) and "\n" not in str(failure[0])
        # nothing of the runner's is left on the pooled backends
        assert scalar(db_url, ADVISORY) == 0


def test_a_pooled_backend_holding_run_keys_is_reported_never_ended(db_url: str, tmp_path: Path) -> None:
    """What a runner through a transaction pool used to leave: a pooled backend holding a
    running run's key (its owner gone) while it serves the application's clients. A runner
    (straight to PostgreSQL, allowed to end any session) reports it and never ends it; once the
    key is let go, the run is recovered."""
    from datetime import UTC, datetime, timedelta

    slot = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    with psycopg.connect(db_url, autocommit=True) as conn:
        run_id = conn.execute(
            "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date, window_start,"
            " window_end, status, trigger, attempt, fence, idempotency_key, started_at)"
            " VALUES ('hello', %s, '', %s, %s, %s, 'running', 'schedule', 1, 1, 'k', now()) RETURNING id",
            (slot, slot.date(), slot - timedelta(seconds=1), slot)).fetchone()[0]
        conn.execute(
            "INSERT INTO runner.attempts (run_id, attempt, fence, trigger, owner_host, owner_pid, owner_instance,"
            " lock_key) VALUES (%s, 1, 1, 'schedule', 'gone', 1, %s, runner.lock_key_v1(%s, %s))",
            (run_id, uuid4(), NAMESPACE, run_id))
    with pgbouncer(tmp_path, db_url, "transaction", pool_size=1) as bouncer, \
            psycopg.connect(bouncer.url, autocommit=True, prepare_threshold=None) as application:
        # one pooled backend: the key stays on it, and it serves every client of the pool
        pooled = application.execute("SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock("
                                     "runner.lock_key_v1(%s, %s))) AS l", (NAMESPACE, run_id)).fetchone()[0]
        proc = RunnerProcess(APP, db_url, "--poll-interval", "0.2", "--grace", "1",
                             log=tmp_path / "runner.log")
        try:
            eventually(lambda: f"session={pooled}" in proc.output(), timeout=30, message="the backend reported")
            done = scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'")
            eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'")
                       >= done + 3, timeout=30, message="three more runs (takeover passes every 0.2 s)")
            assert application.execute("SELECT pg_backend_pid()").fetchone() == (pooled,)  # not ended
            assert scalar(db_url, "SELECT status FROM runner.job_runs WHERE id = %s", (run_id,)) == "running"
            application.execute("SELECT pg_advisory_unlock_all()")
            eventually(lambda: scalar(db_url, "SELECT status FROM runner.job_runs WHERE id = %s",
                                      (run_id,)) == "succeeded", timeout=30, message="the run recovered")
        finally:
            assert proc.terminate() == 0, proc.output()
        assert "lock_squatter " in proc.output() and "never ended" in proc.output(), proc.output()
        assert application.execute("SELECT pg_backend_pid()").fetchone() == (pooled,)
    assert_ledger_clean(db_url)


@pytest.mark.parametrize("who", ["unregistered", "registered, not connected as runner"])
def test_only_a_runners_own_lock_session_is_ever_ended(db_url: str, who: str) -> None:
    """runner.try_terminate_v1 (the one way a runner ends a session), called by a superuser:
    false for a session that is not registered, and for a registered backend that is not
    connected as a runner's lock session (an application's client on a backend a runner
    registered through a transaction pool); a runner's own lock session is ended."""
    def register(conn: psycopg.Connection[Any]) -> None:
        conn.execute("INSERT INTO runner.instances (instance_id, host, pid, backend_pid, lock_namespace,"
                     " runner_version, jobs, definitions) VALUES (%s, 'h', 1, pg_backend_pid(), %s, 't', '{}', '{}')",
                     (uuid4(), NAMESPACE))

    with psycopg.connect(db_url, autocommit=True) as admin, \
            psycopg.connect(db_url, autocommit=True, application_name="app") as victim, \
            psycopg.connect(db_url, autocommit=True, application_name="runner") as runner:
        if who != "unregistered":
            register(victim)
        register(runner)
        pid = victim.info.backend_pid
        assert admin.execute("SELECT runner.try_terminate_v1(%s)", (pid,)).fetchone() == (False,)
        assert victim.execute("SELECT pg_backend_pid()").fetchone() == (pid,)
        assert admin.execute("SELECT runner.try_terminate_v1(%s)", (runner.info.backend_pid,)).fetchone() == (True,)
        with pytest.raises(psycopg.OperationalError):
            runner.execute("SELECT 1")
