"""Runners of two logins side by side (revision 0024_sessions).

PostgreSQL shows a session's backend_start only to a superuser, a member of
pg_read_all_stats or of the session's role. runner.runner_sessions_v1 required
backend_start <= the instance's heartbeat, so to a runner logged in as another role than its
peer (two fleets, or one login per host), to a runner_readonly dashboard and to an operator,
every peer's lock session looked like a squatter: runner.alerts listed each live runner as
lock_squatter, and a runner with pg_signal_backend ended its peer's lock session (the peer's
runs abandoned and taken over). Since 0024 the instance row records the login of the session
that wrote its backend_pid (runner.instances.login, by a trigger), and a session of that
login at that pid is the runner's even when its start is hidden.

Fails before the fix: the readonly login sees both runners as lock squatters; the runners end
each other's lock sessions (lock_squatter_ended in their logs, abandoned attempts).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, scalar

APP = "tests/apps/two_logins.py:app"
NAMESPACE = 21077

HOLDERS = """
SELECT DISTINCT l.pid FROM pg_locks l
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND (l.classid::bigint >> 16) = %s
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


def as_user(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"))


@pytest.fixture
def two_workers(db_url: str, db_roles: Any) -> Iterator[tuple[str, str]]:
    """Two LOGIN roles in the worker group, each allowed to end other sessions
    (pg_signal_backend, as sql/roles.sql suggests for takeover): URLs for both."""
    db_roles.apply(db_url)
    tag = secrets.token_hex(3)
    names = [f"rt_w{n}_{tag}" for n in (1, 2)]
    with psycopg.connect(db_url, autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}, pg_signal_backend").format(
                sql.Identifier(name), sql.Literal(db_roles.password), sql.Identifier(db_roles.groups["worker"])))
    worker_url = db_roles.url(db_url, "worker")
    try:
        yield as_user(worker_url, names[0], db_roles.password), as_user(worker_url, names[1], db_roles.password)
    finally:
        with psycopg.connect(db_url, autocommit=True) as conn:
            for name in names:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,))
            for name in names:
                eventually(lambda n=name: scalar(db_url, "SELECT count(*) FROM pg_stat_activity WHERE usename = %s",
                                                 (n,)) == 0, message="the test logins' sessions gone")
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_runners_of_two_logins_are_runner_sessions_to_each_other_and_to_readers(
        db_url: str, db_roles: Any, two_workers: tuple[str, str], tmp_path: Path) -> None:
    first, second = two_workers
    procs = [RunnerProcess(APP, url, "--poll-interval", "0.2", "--grace", "5", log=tmp_path / f"r{n}.log")
             for n, url in enumerate((first, second))]
    try:
        def both_hold_keys() -> list[int] | None:
            pids = [p for (p,) in rows(db_url, "SELECT backend_pid FROM runner.instances WHERE stopped_at IS NULL"
                                               " ORDER BY backend_pid")]
            holders = {p for (p,) in rows(db_url, HOLDERS, (NAMESPACE,))}
            return pids if len(pids) == 2 and set(pids) <= holders else None
        pids = eventually(both_hold_keys, timeout=30, message="both runners holding run keys at once")
        logins = rows(db_url, "SELECT i.backend_pid, r.rolname FROM runner.instances i JOIN pg_roles r"
                              " ON r.oid = i.login WHERE i.stopped_at IS NULL ORDER BY 1")
        assert len(logins) == 2 and logins[0][1] != logins[1][1], logins
        # each login, a dashboard and an operator see both lock sessions as runner sessions
        for viewer in (first, second, db_roles.url(db_url, "readonly"), db_roles.url(db_url, "operator")):
            seen = {p for (p,) in rows(viewer, "SELECT runner.runner_sessions_v1()")}
            assert set(pids) <= seen, (viewer.split("@")[0].split("//")[1].split(":")[0], pids, seen)
            assert scalar(viewer, "SELECT count(*) FROM runner.alerts WHERE kind = 'lock_squatter'") == 0
        # both keep working side by side: runs of both, no session ended
        eventually(lambda: scalar(db_url, "SELECT count(DISTINCT owner_instance) FROM runner.attempts"
                                          " WHERE status = 'succeeded'") == 2
                   and scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 16,
                   timeout=60, message="runs of both runners succeeded")
    finally:
        codes = [p.terminate() for p in procs]
    logs = [p.output() for p in procs]
    assert codes == [0, 0], logs
    for log in logs:
        assert "lock_squatter" not in log, log
    bad = rows(db_url, "SELECT run_id, attempt, status, error_class FROM runner.attempts"
                       " WHERE status NOT IN ('succeeded', 'released') OR error_class IS NOT NULL"
                       " AND error_class <> 'runner.LockBusy'")
    assert bad == [], bad
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE trigger = 'recovery' AND attempt > 1"
                          " AND NOT EXISTS (SELECT 1 FROM runner.attempts a WHERE a.run_id = job_runs.id"
                          " AND a.status = 'released')") == 0
    assert_ledger_clean(db_url)


def test_the_login_of_an_instance_row_is_the_writers_own_and_no_one_chooses_it(
        db_url: str, db_roles: Any, two_workers: tuple[str, str]) -> None:
    """A worker that registers another session's pid (a squatter's) gets no login for it, so
    the squatter stays a squatter to a viewer that cannot see its start; an UPDATE of login
    itself is ignored; the writer's own pid gets its own login."""
    first, second = two_workers
    squatter = psycopg.connect(second, autocommit=True)
    try:
        squatter.execute("SELECT pg_advisory_lock(runner.lock_key_v1(%s, 424242))", (NAMESPACE,))
        spid = squatter.info.backend_pid
        with psycopg.connect(first, autocommit=True) as conn:
            forged = conn.execute(
                "INSERT INTO runner.instances (instance_id, host, pid, backend_pid, lock_namespace, login)"
                " VALUES (gen_random_uuid(), 'h', 1, %s, %s, (SELECT oid FROM pg_roles WHERE rolname = current_user))"
                " RETURNING instance_id, login", (spid, NAMESPACE)).fetchone()
            assert forged is not None and forged[1] is None, forged
            me = conn.info.backend_pid
            own = conn.execute(
                "INSERT INTO runner.instances (instance_id, host, pid, backend_pid, lock_namespace)"
                " VALUES (gen_random_uuid(), 'h', 2, pg_backend_pid(), %s) RETURNING instance_id, login",
                (NAMESPACE,)).fetchone()
            assert own is not None
            assert own[1] == conn.execute("SELECT oid FROM pg_roles WHERE rolname = session_user").fetchone()[0]
            # a direct write of login is ignored; pointing the row at another pid clears it
            assert conn.execute("UPDATE runner.instances SET login = 10 WHERE instance_id = %s RETURNING login",
                                (own[0],)).fetchone() == (own[1],)
            assert conn.execute("UPDATE runner.instances SET backend_pid = %s WHERE instance_id = %s"
                                " RETURNING login", (spid, forged[0])).fetchone() == (None,)
            seen = {p for (p,) in conn.execute("SELECT runner.runner_sessions_v1()")}
            assert me in seen and spid not in seen, (me, spid, seen)
            squats = conn.execute("SELECT detail FROM runner.alerts WHERE kind = 'lock_squatter'").fetchall()
            assert len(squats) == 1 and f"session {spid} " in squats[0][0], squats
    finally:
        squatter.close()
