"""Upgrading while running (issue 16): `runner db upgrade` holds a documented advisory lock
so that two deploys never migrate at once (the second waits, then has nothing to do), and a
runner refuses to start against a schema older than its code (run `runner db upgrade`) or
newer (a revision it does not know), writing nothing."""

from __future__ import annotations

import subprocess

import psycopg

from runner import migrate
from tests.support import ROOT, eventually, run_cli, runner_cmd, scalar

WAITING = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
           " AND classid = 21077 AND objid = 4294967294 AND objsubid = 2")  # (21077, -2) as two ints


def upgrade_process(url: str) -> subprocess.Popen[str]:
    import os

    return subprocess.Popen(runner_cmd("db", "upgrade"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env={**os.environ, "RUNNER_DATABASE_URL": url})


def test_two_deploys_migrate_one_at_a_time(empty_db_url: str) -> None:
    with psycopg.connect(empty_db_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(21077, %s)", (migrate.MIGRATE_LOCK_KEY,))
        first, second = upgrade_process(empty_db_url), upgrade_process(empty_db_url)
        # both wait for the lock, and nothing is migrated meanwhile
        eventually(lambda: scalar(empty_db_url, WAITING) == 2, timeout=60, message="both upgrades wait")
        assert first.poll() is None and second.poll() is None
        assert scalar(empty_db_url, "SELECT to_regclass('runner.alembic_version')") is None
        holder.execute("SELECT pg_advisory_unlock(21077, %s)", (migrate.MIGRATE_LOCK_KEY,))
        outs = [p.communicate(timeout=120) for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs
    assert scalar(empty_db_url, "SELECT version_num FROM runner.alembic_version") == migrate.HEAD


def test_concurrent_upgrades_of_an_empty_database_both_succeed(empty_db_url: str) -> None:
    procs = [upgrade_process(empty_db_url) for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert scalar(empty_db_url, "SELECT version_num FROM runner.alembic_version") == migrate.HEAD


def test_the_migrate_key_is_the_key_schemes(db_url: str) -> None:
    assert scalar(db_url, "SELECT runner.duty_lock_key_v1('migrate')") == migrate.MIGRATE_LOCK_KEY
    assert scalar(db_url, "SELECT runner.duty_lock_key_v1('prune')") == -1


def test_a_runner_newer_than_the_schema_refuses_to_start(db_url: str) -> None:
    migrate.downgrade(db_url, "0008_audit")
    out = run_cli("start", "--app", "tests/apps/hello.py:app", url=db_url)
    assert out.returncode == 1
    [line] = [x for x in out.stderr.splitlines() if x.startswith("runner: error: ")]
    assert f"older than this runner's {migrate.HEAD}: run `runner db upgrade`" in line
    assert scalar(db_url, "SELECT count(*) FROM runner.jobs") == 0
    assert scalar(db_url, "SELECT count(*) FROM runner.instances") == 0


def test_a_runner_older_than_the_schema_refuses_to_start(db_url: str) -> None:
    """The schema was migrated by a newer runner (a revision this code does not know)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE runner.alembic_version SET version_num = '0010_next'")
    out = run_cli("start", "--app", "tests/apps/hello.py:app", url=db_url)
    assert out.returncode == 1
    [line] = [x for x in out.stderr.splitlines() if x.startswith("runner: error: ")]
    assert "revision 0010_next, which this runner does not know" in line and "upgrade this one" in line
    assert scalar(db_url, "SELECT count(*) FROM runner.jobs") == 0
