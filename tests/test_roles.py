"""sql/roles.sql: each role can do what its users need and nothing more, proven with real
LOGIN users (and a real `runner start` for the worker)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql

from tests.support import ROOT, RunnerProcess, eventually, rows, run_cli, scalar


def relations(url: str, kinds: tuple[str, ...]) -> list[str]:
    return [r[0] for r in rows(url, "SELECT c.relname FROM pg_class c JOIN pg_namespace n"
                                    " ON n.oid = c.relnamespace WHERE n.nspname = 'runner'"
                                    " AND c.relkind = ANY(%s) ORDER BY 1", (list(kinds),))]


def denied(conn: psycopg.Connection[Any], statement: sql.Composable | str) -> bool:
    try:
        with conn.transaction():
            conn.execute(statement)
    except errors.InsufficientPrivilege:
        return True
    return False


def add_request(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO runner.requests (action, job_name, who, reason)"
                     " VALUES ('pause', 'hello', 'dba@test', 'seed row')")


def test_readonly_reads_every_table_and_view_and_writes_nothing(db_url: str, db_roles: Any) -> None:
    db_roles.apply(db_url)
    add_request(db_url)
    readonly = db_roles.url(db_url, "readonly")
    tables = relations(db_url, ("r", "p"))
    views = relations(db_url, ("v", "m"))
    assert {"job_runs", "attempts", "jobs", "requests"} <= set(tables)
    assert {"job_health", "alerts"} <= set(views)
    with psycopg.connect(readonly, autocommit=True) as conn:
        for name in tables + views:
            conn.execute(sql.SQL("SELECT * FROM runner.{}").format(sql.Identifier(name))).fetchall()
        for name in tables:
            target = sql.SQL("runner.{}").format(sql.Identifier(name))
            column = sql.Identifier(rows(db_url, "SELECT attname FROM pg_attribute WHERE attrelid"
                                                 " = %s::regclass AND attnum > 0 AND attidentity = ''"
                                                 " ORDER BY attnum LIMIT 1", (f"runner.{name}",))[0][0])
            assert denied(conn, sql.SQL("INSERT INTO {} DEFAULT VALUES").format(target)), name
            assert denied(conn, sql.SQL("UPDATE {} SET {} = {} WHERE false").format(target, column, column)), name
            assert denied(conn, sql.SQL("DELETE FROM {} WHERE false").format(target)), name
            assert denied(conn, sql.SQL("TRUNCATE {}").format(target)), name
            assert denied(conn, sql.SQL("SELECT * FROM {} FOR UPDATE").format(target)), name
    # the operator's read-only commands work as readonly; a ledger-changing one is refused
    out = run_cli("status", "--json", url=readonly)
    assert out.returncode == 0, out.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, track_from)"
                     " VALUES ('hello', 'every', '1 second', now())")
    out = run_cli("pause", "hello", "--reason", "try", "--yes", url=readonly)
    assert out.returncode == 1
    assert out.stderr.startswith("runner: error: database error: InsufficientPrivilege"), out.stderr
    assert scalar(db_url, "SELECT paused FROM runner.jobs WHERE job_name = 'hello'") is False
    assert scalar(db_url, "SELECT count(*) FROM runner.requests") == 1


def test_worker_runs_a_real_runner_but_cannot_delete_or_touch_the_audit(
        db_url: str, db_roles: Any, tmp_path: Path) -> None:
    db_roles.apply(db_url)
    add_request(db_url)
    worker = db_roles.url(db_url, "worker")
    proc = RunnerProcess("tests/apps/hello.py:app", worker, "--poll-interval", "0.2",
                         log=tmp_path / "worker.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs"
                                          " WHERE status = 'succeeded'") >= 2,
                   timeout=30, message="two runs succeeded as the worker role")
    finally:
        code = proc.terminate()
    assert code == 0, proc.output()
    assert "rror" not in proc.output(), proc.output()
    assert scalar(db_url, "SELECT count(*) FROM runner.instances WHERE stopped_at IS NOT NULL") == 1
    with psycopg.connect(worker, autocommit=True) as conn:
        for table in ("job_runs", "attempts", "jobs", "job_schedules", "instances", "requests"):
            target = sql.SQL("runner.{}").format(sql.Identifier(table))
            assert denied(conn, sql.SQL("DELETE FROM {}").format(target)), table
            assert denied(conn, sql.SQL("TRUNCATE {}").format(target)), table
        assert denied(conn, "UPDATE runner.requests SET reason = 'rewritten'")
        assert denied(conn, "INSERT INTO runner.requests (action, who, reason) VALUES ('rerun', 'w', 'r')")
    assert rows(db_url, "SELECT reason FROM runner.requests") == [("seed row",)]


def test_operator_reruns_and_pauses_but_cannot_rewrite_fences_or_the_audit(
        db_url: str, db_roles: Any) -> None:
    db_roles.apply(db_url)
    operator = db_roles.url(db_url, "operator")
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, track_from)"
                     " VALUES ('hello', 'every', '1 second', now())")
        conn.execute("INSERT INTO runner.job_runs (job_name, schedule_slot, business_date, window_start,"
                     " window_end, status, trigger, attempt, fence, idempotency_key)"
                     " VALUES ('hello', '2026-01-01T00:00:00Z', '2026-01-01', '2026-01-01T00:00:00Z',"
                     " '2026-01-01T00:00:00Z', 'dead', 'schedule', 3, 3, 'k')")
    out = run_cli("rerun", "hello", "--slot", "2026-01-01T00:00:00+00:00", "--reason", "fixed upstream",
                  "--yes", url=operator)
    assert out.returncode == 0, out.stderr
    out = run_cli("pause", "hello", "--reason", "maintenance", "--yes", url=operator)
    assert out.returncode == 0, out.stderr
    assert rows(db_url, "SELECT action, db_user FROM runner.requests ORDER BY id") == [
        ("rerun", db_roles.users["operator"]), ("pause", db_roles.users["operator"])]
    assert scalar(db_url, "SELECT status FROM runner.job_runs") == "pending"
    with psycopg.connect(operator, autocommit=True) as conn:
        assert denied(conn, "UPDATE runner.job_runs SET fence = fence + 1")
        assert denied(conn, "UPDATE runner.job_runs SET attempt = 0")
        assert denied(conn, "UPDATE runner.jobs SET cron = '* * * * *'")
        assert denied(conn, "DELETE FROM runner.job_runs")
        assert denied(conn, "UPDATE runner.requests SET reason = 'nothing happened'")
        assert denied(conn, "DELETE FROM runner.requests")
        # when and as whom are the database's to say
        assert denied(conn, "INSERT INTO runner.requests (action, who, reason, db_user)"
                            " VALUES ('pause', 'x', 'y', 'someone_else')")
        assert denied(conn, "INSERT INTO runner.requests (action, who, reason, requested_at)"
                            " VALUES ('pause', 'x', 'y', '2000-01-01')")


def test_requests_stay_append_only_even_if_a_role_was_granted_too_much(db_url: str, db_roles: Any) -> None:
    db_roles.apply(db_url)
    add_request(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT UPDATE, DELETE, TRUNCATE ON runner.requests TO {}").format(
            sql.Identifier(db_roles.groups["worker"])))
    with psycopg.connect(db_roles.url(db_url, "worker"), autocommit=True) as conn:
        for statement in ("UPDATE runner.requests SET reason = 'x'", "DELETE FROM runner.requests",
                          "TRUNCATE runner.requests"):
            with pytest.raises(errors.InsufficientPrivilege, match="append-only"):
                conn.execute(statement)
    assert scalar(db_url, "SELECT count(*) FROM runner.requests") == 1
    # the owner (the migrations' role) may still prune
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DELETE FROM runner.requests")
    assert scalar(db_url, "SELECT count(*) FROM runner.requests") == 0


def test_roles_file_is_idempotent_and_converges(db_url: str, db_roles: Any) -> None:
    db_roles.apply(db_url)
    readonly = db_roles.groups["readonly"]
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT INSERT ON runner.job_runs TO {}").format(sql.Identifier(readonly)))
    db_roles.apply(db_url)  # again: the stray grant is gone, nothing else changed
    assert scalar(db_url, "SELECT has_table_privilege(%s, 'runner.job_runs', 'INSERT')", (readonly,)) is False
    assert scalar(db_url, "SELECT has_table_privilege(%s, 'runner.job_runs', 'SELECT')", (readonly,)) is True


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed")
def test_roles_file_runs_with_psql_as_documented(db_url: str, db_roles: Any) -> None:
    db_roles.apply(db_url)  # creates the session's roles; psql below must re-run it cleanly
    options = " ".join(f"-c runner.{kind}_role={name}" for kind, name in db_roles.groups.items())
    out = subprocess.run(["psql", db_url, "-v", "ON_ERROR_STOP=1", "-q", "-f", str(ROOT / "sql" / "roles.sql")],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PGOPTIONS": options})
    assert out.returncode == 0, out.stderr
    assert scalar(db_url, "SELECT has_table_privilege(%s, 'runner.alerts', 'SELECT')",
                  (db_roles.groups["readonly"],)) is True


def test_roles_file_refuses_an_unmigrated_database(empty_db_url: str, db_roles: Any) -> None:
    with pytest.raises(errors.RaiseException, match="runner db upgrade"):
        db_roles.apply(empty_db_url)
