"""The schema: alembic revisions in their own version table, idempotent upgrade, working
downgrade, offline SQL for a DBA, and a snapshot that guards against drift."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg

from runner import migrate
from tests.support import ROOT, rows, run_cli, scalar


def test_schema_matches_committed_snapshot(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        actual = migrate.describe_schema(conn)
    expected = (ROOT / "sql" / "schema.txt").read_text()
    assert actual == expected, (
        "the migrated schema differs from sql/schema.txt; if the change is intended, run "
        "`python scripts/dump_schema.py <scratch database url>` and commit the result"
    )


def test_version_table_lives_in_runner_schema(db_url: str) -> None:
    assert scalar(db_url, "SELECT version_num FROM runner.alembic_version") == migrate.head_revision()
    assert scalar(db_url, "SELECT to_regclass('public.alembic_version')") is None


def test_upgrade_is_idempotent(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        before = migrate.describe_schema(conn)
    migrate.upgrade(db_url)
    migrate.upgrade(db_url)
    with psycopg.connect(db_url) as conn:
        assert migrate.describe_schema(conn) == before
    assert rows(db_url, "SELECT version_num FROM runner.alembic_version") == [
        (migrate.head_revision(),)
    ]


def test_downgrade_then_upgrade_round_trips(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        before = migrate.describe_schema(conn)
    migrate.downgrade(db_url, "base")
    assert scalar(db_url, "SELECT to_regclass('runner.job_runs')") is None
    assert scalar(db_url, "SELECT count(*) FROM runner.alembic_version") == 0
    migrate.upgrade(db_url)
    with psycopg.connect(db_url) as conn:
        assert migrate.describe_schema(conn) == before


def test_leaves_application_tables_alone(empty_db_url: str) -> None:
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.alembic_version (version_num text)")
        conn.execute("INSERT INTO public.alembic_version VALUES ('app_rev_1')")
    migrate.upgrade(empty_db_url)
    assert rows(empty_db_url, "SELECT version_num FROM public.alembic_version") == [("app_rev_1",)]
    migrate.downgrade(empty_db_url, "base")
    assert rows(empty_db_url, "SELECT version_num FROM public.alembic_version") == [("app_rev_1",)]


def test_cli_db_upgrade_and_current(empty_db_url: str) -> None:
    current = run_cli("db", "current", url=empty_db_url)
    assert current.returncode == 0, current.stderr
    assert "current: (none" in current.stdout
    up = run_cli("db", "upgrade", url=empty_db_url)
    assert up.returncode == 0, up.stderr
    assert migrate.head_revision() in up.stdout
    again = run_cli("db", "current", "--json", url=empty_db_url)
    assert '"up_to_date": true' in again.stdout


def test_cli_db_sql_needs_no_database() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNNER_", "PG"))}
    out = subprocess.run([sys.executable, "-m", "runner", "db", "sql"], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "CREATE SCHEMA IF NOT EXISTS runner;" in out.stdout
    assert "CREATE TABLE runner.job_runs" in out.stdout
    assert "CREATE TABLE runner.alembic_version" in out.stdout
    assert "no database configured" not in out.stderr


def test_plain_alembic_from_repo_root(empty_db_url: str) -> None:
    out = subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head"], capture_output=True,
                         text=True, cwd=ROOT, timeout=60,
                         env={**os.environ, "RUNNER_DATABASE_URL": empty_db_url})
    assert out.returncode == 0, out.stderr
    assert scalar(empty_db_url, "SELECT version_num FROM runner.alembic_version") == (
        migrate.head_revision()
    )


def test_head_constant_matches_alembic() -> None:
    assert migrate.alembic_head() == migrate.HEAD


HOT_TABLE_SETTINGS = {"autovacuum_vacuum_scale_factor=0.0", "autovacuum_vacuum_threshold=100000",
                      "autovacuum_vacuum_insert_scale_factor=0.0", "autovacuum_vacuum_insert_threshold=100000",
                      "autovacuum_analyze_scale_factor=0.0", "autovacuum_analyze_threshold=100000"}
RELOPTIONS = ("SELECT c.relname, c.reloptions FROM pg_class c WHERE c.oid IN"
              " ('runner.job_runs'::regclass, 'runner.attempts'::regclass) ORDER BY 1")


def test_hot_tables_vacuum_by_churn_not_by_size(db_url: str) -> None:
    """Revision 0015_scale: fixed autovacuum thresholds on the two hot tables, so the vacuum
    cadence follows the churn, not the ledger's size; its downgrade gives the server's back."""
    got = rows(db_url, RELOPTIONS)
    assert [name for name, _ in got] == ["attempts", "job_runs"]
    for _name, options in got:
        assert set(options or []) == HOT_TABLE_SETTINGS
    migrate.downgrade(db_url, "0010_web")
    assert rows(db_url, RELOPTIONS) == [("attempts", None), ("job_runs", None)]
    migrate.upgrade(db_url)
    assert all(set(options or []) == HOT_TABLE_SETTINGS for _, options in rows(db_url, RELOPTIONS))


def test_replay_plans_are_tagged_correction_from_0018_and_catch_up_before(db_url: str) -> None:
    """Revision 0018_recovery: runner.record_replay_plan_v1 tags a replay's plan with its lane,
    correction; its downgrade restores the function 0007_security shipped (tag catch_up)."""
    body = "SELECT prosrc FROM pg_proc WHERE proname = 'record_replay_plan_v1'"
    assert "'correction', 1" in rows(db_url, body)[0][0]
    migrate.downgrade(db_url, "0016_health")
    assert "'catch_up', 1" in rows(db_url, body)[0][0]
    migrate.upgrade(db_url)
    assert "'correction', 1" in rows(db_url, body)[0][0]
