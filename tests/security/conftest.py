"""The security tests: what each database role of sql/roles.sql can and cannot do (the role
matrix of the README), each forbidden statement run as a real LOGIN of that role.

``logins`` applies sql/roles.sql to a fresh database (tests/dbroles.py: role names unique to
this test session) and seeds a small ledger in every state the statements aim at: a job, a
succeeded run, a running run (with its attempt), a dead run, a run awaiting approval, a
cancelled and a running backfill plan, the gap scan's watermark, a request row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql

T0 = "2026-01-01T00:00:00Z"

# every table of the runner schema, dumped in full: "nothing changed" is checked against it
LEDGER_TABLES = ("jobs", "job_schedules", "job_runs", "attempts", "effects", "requests", "backfills",
                 "gap_watermarks", "gap_holes", "job_pauses", "slot_fanouts", "instances", "job_retirements",
                 "misfire_ranges")


@dataclass(frozen=True)
class Logins:
    admin: str  # the test superuser (the schema owner's powers)
    worker: str
    operator: str
    readonly: str
    users: dict[str, str]  # kind -> LOGIN role name
    groups: dict[str, str]  # kind -> group role name
    ids: dict[str, int]  # the seeded rows: run ids by state, plan ids


def snapshot(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every ledger table, ordered: to show that a refused statement changed nothing."""
    out = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for table in LEDGER_TABLES:
            out[table] = conn.execute(sql.SQL("SELECT to_jsonb(t)::text FROM runner.{} t ORDER BY 1").format(
                sql.Identifier(table))).fetchall()
    return out


def refused(url: str, statement: str, params: Any = None) -> str:
    """Run one statement as the login of ``url``; it must be refused for lack of privilege
    (the message is returned). Anything else, success included, fails the test."""
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute(statement, params)
        except errors.InsufficientPrivilege as exc:
            return str(exc)
    raise AssertionError(f"allowed: {statement}")


def seed(url: str) -> dict[str, int]:
    ids: dict[str, int] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, track_from)"
                     " VALUES ('hello', 'every', '1 hour', %s::timestamptz - interval '24 hours')", (T0,))
        conn.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval,"
                     " timezone) SELECT job_name, track_from, schedule_kind, every_interval, timezone"
                     " FROM runner.jobs")

        def run(status: str, hours: int, attempt: int) -> int:
            row = conn.execute(
                "INSERT INTO runner.job_runs (job_name, schedule_slot, business_date, window_start,"
                " window_end, status, trigger, attempt, fence, idempotency_key, started_at, finished_at)"
                " VALUES ('hello', %(t)s::timestamptz + make_interval(hours => %(h)s), '2026-01-01',"
                " %(t)s::timestamptz, %(t)s::timestamptz, %(s)s, 'schedule', %(a)s, %(a)s, 'k',"
                " now(), CASE WHEN %(s)s IN ('succeeded', 'dead') THEN now() END) RETURNING id",
                {"t": T0, "h": hours, "s": status, "a": attempt}).fetchone()
            assert row is not None
            if attempt:
                conn.execute(
                    "INSERT INTO runner.attempts (run_id, attempt, fence, trigger, owner_host, owner_pid,"
                    " owner_instance, lock_key, status, finished_at) VALUES (%s, %s, %s, 'schedule', 'h', 1,"
                    " gen_random_uuid(), 1, %s, CASE WHEN %s <> 'running' THEN now() END)",
                    (row[0], attempt, attempt, status, status))
            return int(row[0])

        ids["succeeded"] = run("succeeded", 0, 1)
        ids["running"] = run("running", 1, 1)
        ids["dead"] = run("dead", 2, 3)
        ids["awaiting"] = run("awaiting_approval", 3, 0)
        for status in ("cancelled", "running"):
            row = conn.execute(
                "INSERT INTO runner.backfills (job_name, range_from, range_to, status, requested_by, reason)"
                " VALUES ('hello', %s::timestamptz, %s::timestamptz + interval '1 hour', %s, 'seed', 'seed')"
                " RETURNING id", (T0, T0, status)).fetchone()
            assert row is not None
            ids[f"plan_{status}"] = int(row[0])
        conn.execute("SELECT runner.advance_watermarks_v1()")
        conn.execute("INSERT INTO runner.requests (action, job_name, who, reason)"
                     " VALUES ('pause', 'hello', 'dba@test', 'seed row')")
    return ids


def make_logins(db_url: str, db_roles: Any, seeded: bool) -> Logins:
    db_roles.apply(db_url)
    return Logins(admin=db_url, worker=db_roles.url(db_url, "worker"),
                  operator=db_roles.url(db_url, "operator"), readonly=db_roles.url(db_url, "readonly"),
                  users=dict(db_roles.users), groups=dict(db_roles.groups),
                  ids=seed(db_url) if seeded else {})


@pytest.fixture
def logins(db_url: str, db_roles: Any) -> Logins:
    """The roles applied, a LOGIN of each, and the seeded ledger."""
    return make_logins(db_url, db_roles, seeded=True)


@pytest.fixture
def bare_logins(db_url: str, db_roles: Any) -> Logins:
    """The roles applied and a LOGIN of each, on an empty ledger (for real runners)."""
    return make_logins(db_url, db_roles, seeded=False)

