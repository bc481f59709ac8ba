"""Issue 12, point 12: the schema owner is exempt from the audit trigger (and runs every
SECURITY DEFINER function), so the README's deployment migrates as an owner role and runs
`runner start` as a worker login; `runner start` warns when it is connected as the schema
owner or as a superuser, and starts anyway."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import conninfo_to_dict

from tests.support import ROOT, RunnerProcess, eventually, run_cli, scalar

WARNING = "privileged_login"


def succeeded(url: str) -> int:
    return int(scalar(url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'"))


def start_and_stop(url: str, check_url: str, log: Path) -> str:
    """`runner start` of the hello app until one more run succeeded; its output."""
    before = succeeded(check_url)
    proc = RunnerProcess("tests/apps/hello.py:app", url, "--poll-interval", "0.2", log=log)
    try:
        eventually(lambda: succeeded(check_url) > before, timeout=30, message="a run succeeded")
    finally:
        code = proc.terminate()
    assert code == 0, proc.output()
    return proc.output()


def test_runner_start_as_a_superuser_warns_and_runs(db_url: str, tmp_path: Path) -> None:
    output = start_and_stop(db_url, db_url, tmp_path / "super.log")
    [line] = [line for line in output.splitlines() if WARNING in line]
    assert "WARNING" in line and "a superuser" in line and "worker role" in line


@pytest.fixture
def owner_url(empty_db_url: str) -> Iterator[str]:
    """A LOGIN role that is no superuser and owns the runner schema: it runs the migrations
    (`runner db upgrade`) of an empty database, as the README's deployment does."""
    name = f"rt_owner_{os.getpid()}_{secrets.token_hex(3)}"
    password = secrets.token_hex(8)
    params = conninfo_to_dict(empty_db_url)
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER PASSWORD {}").format(
            sql.Identifier(name), sql.Literal(password)))
        conn.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
            sql.Identifier(str(params["dbname"])), sql.Identifier(name)))
    host, port = params.get("host") or "127.0.0.1", params.get("port") or 5432
    url = f"postgresql://{name}:{password}@{host}:{port}/{quote(str(params['dbname']))}"
    try:
        yield url
    finally:
        with psycopg.connect(empty_db_url, autocommit=True) as conn:
            # the schema holds a function the condition role owns: drop it with its contents
            conn.execute("DROP SCHEMA IF EXISTS runner CASCADE")
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_the_deployment_of_the_readme(owner_url: str, empty_db_url: str, db_url: str, db_roles: Any,
                                      tmp_path: Path) -> None:
    db_roles.apply(db_url)  # the DBA's part: the session's group roles and logins exist
    out = run_cli("db", "upgrade", url=owner_url, timeout=300)
    assert out.returncode == 0, out.stderr
    assert scalar(empty_db_url, "SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'runner'") == (
        conninfo_to_dict(owner_url)["user"])
    owner = conninfo_to_dict(owner_url)["user"]
    with psycopg.connect(owner_url, autocommit=True) as conn:  # without it: a clear refusal
        conn.execute(db_roles.settings())
        with pytest.raises(errors.InsufficientPrivilege, match="must be a member of the condition role"):
            conn.execute((ROOT / "sql" / "roles.sql").read_text())
    with psycopg.connect(empty_db_url, autocommit=True) as conn:  # ... so the DBA grants it once
        conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(db_roles.groups["condition"]),
                                                      sql.Identifier(str(owner))))
    with psycopg.connect(owner_url, autocommit=True) as conn:  # sql/roles.sql, as the owner
        conn.execute(db_roles.settings())
        conn.execute((ROOT / "sql" / "roles.sql").read_text())
    worker = db_roles.url(empty_db_url, "worker")
    output = start_and_stop(worker, empty_db_url, tmp_path / "worker.log")
    assert WARNING not in output and "rror" not in output, output
    # the worker cannot rewrite the audit; the owner could, which is why nothing runs as it
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO runner.requests (action, who, reason) VALUES ('pause', 'dba', 'seed')")
    with psycopg.connect(worker, autocommit=True) as conn, pytest.raises(errors.InsufficientPrivilege):
        conn.execute("DELETE FROM runner.requests")
    with psycopg.connect(owner_url, autocommit=True) as conn:
        conn.execute("UPDATE runner.requests SET reason = 'rewritten by the owner'")
    output = start_and_stop(owner_url, empty_db_url, tmp_path / "owner.log")
    [line] = [line for line in output.splitlines() if WARNING in line]
    assert "the owner of the runner schema" in line, line
