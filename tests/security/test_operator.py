"""Issue 12, point 4: runner_operator bypasses the audit no more. It holds no INSERT or
UPDATE on any ledger table: the review's statements (and their neighbours) are refused as an
operator login and change nothing; its actions are database functions that check the
transition and write the change with its runner.requests row, as its login. (That every CLI
action works as an operator login: test_logins_at_work.py.)"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
from psycopg import errors

from tests.security.conftest import Logins, refused, snapshot
from tests.support import rows, scalar

FORBIDDEN = {
    # the review's statements
    "succeeded_back_to_running": "UPDATE runner.job_runs SET status = 'running' WHERE id = {succeeded}",
    "pause_a_job": "UPDATE runner.jobs SET paused = true",
    # their neighbours: no direct write of a run, a job, a plan or a request
    "requeue_a_run": "UPDATE runner.job_runs SET status = 'pending', next_attempt_at = now() WHERE id = {dead}",
    "skip_a_run": "UPDATE runner.job_runs SET status = 'skipped', status_reason = 'x' WHERE id = {awaiting}",
    "uncount_attempts": "UPDATE runner.job_runs SET uncounted_attempts = attempt",
    "fence": "UPDATE runner.job_runs SET fence = fence + 1",
    "insert_a_run": "INSERT INTO runner.job_runs (job_name, schedule_slot, business_date, window_start,"
                    " window_end, status, trigger, idempotency_key) VALUES ('hello', now(), current_date,"
                    " now(), now(), 'succeeded', 'manual', 'k')",
    "resume_a_plan": "UPDATE runner.backfills SET status = 'running' WHERE id = {plan_cancelled}",
    "plan_state": "UPDATE runner.backfills SET max_failures = NULL, tokens = 1000",
    "write_a_request": "INSERT INTO runner.requests (action, job_name, who, reason)"
                       " VALUES ('pause', 'hello', 'o', 'r')",
    "forge_db_user": "INSERT INTO runner.requests (action, who, reason, db_user) VALUES ('pause', 'x', 'y', 'z')",
    # the actions' shared parts run with the caller's privileges: a request row, or a requeue,
    # with no action's checks around it is refused
    "request_through_the_helper": "SELECT runner.operator_request_v1('pause', 'hello', 'o', 'r', '{{}}')",
    "requeue_through_the_helper": "SELECT * FROM runner.requeue_manual_v1(ARRAY[{succeeded}]::bigint[], 1, 'r',"
                                  " now(), false)",
    # the identity changes only through runner.adopt_ledger_v1, audited (issue 29, point 6)
    "forge_the_identity": "UPDATE runner.ledger_identity SET database_oid = 1",
    "rewrite_a_request": "UPDATE runner.requests SET reason = 'nothing happened'",
    "delete_requests": "DELETE FROM runner.requests",
    "watermarks": "UPDATE runner.gap_watermarks SET complete_through = now()",
    # the runner's own functions are not the operator's
    "start_an_attempt": "SELECT * FROM runner.start_attempts_v1(ARRAY[{dead}]::bigint[], ARRAY[NULL]::bigint[],"
                        " false, 'h', 1, gen_random_uuid(), 21077)",
    "record_an_outcome": "SELECT * FROM runner.finish_attempts_v1('[[{running}, 1, \"dead\", null, \"E\", \"m\","
                         " 0, null, null]]')",
    "replay_plan": "SELECT runner.record_replay_plan_v1('hello', now(), now() + interval '1 hour', 1, 'r')",
}

PLANS_BEHIND_THE_AUDIT = {
    # issue 12, point 2: a plan in any state, with any condition, and no request row
    "insert_a_plan": "INSERT INTO runner.backfills (job_name, range_from, range_to, status, pause_when,"
                     " requested_by, reason) VALUES ('hello', now(), now() + interval '1 hour', 'paused',"
                     " 'SELECT pg_advisory_unlock_all() IS NULL', 'o', 'r')",
    "change_a_condition": "UPDATE runner.backfills SET pause_when = 'SELECT true'",
}


@pytest.mark.parametrize("name", list(FORBIDDEN))
def test_the_operator_cannot(logins: Logins, name: str) -> None:
    before = snapshot(logins.admin)
    refused(logins.operator, FORBIDDEN[name].format(**logins.ids))
    assert snapshot(logins.admin) == before


@pytest.mark.parametrize("name", list(PLANS_BEHIND_THE_AUDIT))
@pytest.mark.parametrize("kind", ["operator", "worker"])
def test_no_plan_is_created_or_changed_behind_the_audit(logins: Logins, kind: str, name: str) -> None:
    before = snapshot(logins.admin)
    refused(getattr(logins, kind), PLANS_BEHIND_THE_AUDIT[name])
    assert snapshot(logins.admin) == before


def call(url: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(statement, params).fetchall()


RERUN = "SELECT request_id, id, status FROM runner.rerun_v1(%s, %s, %s, %s, 'alice', 'because')"


@pytest.mark.parametrize(("run", "seen", "force", "message"), [
    ("running", ("running", 1), True, "is running (attempt 1, fence 1)"),
    ("succeeded", ("succeeded", 1), False, "already succeeded: pass --force"),
    ("dead", ("failed", 3), False, "changed since it was shown (now dead, fence 3)"),
    ("dead", ("dead", 2), False, "changed since it was shown"),
])
def test_rerun_checks_the_transition(logins: Logins, run: str, seen: tuple[str, int], force: bool,
                                     message: str) -> None:
    before = snapshot(logins.admin)
    with pytest.raises(errors.RaiseException, match=re.escape(message)):
        call(logins.operator, RERUN, (logins.ids[run], seen[0], seen[1], force))
    assert snapshot(logins.admin) == before


def test_actions_record_the_login_not_the_functions_owner(logins: Logins) -> None:
    ids = logins.ids
    [(request_id, run_id, status)] = call(logins.operator, RERUN, (ids["dead"], "dead", 3, False))
    assert (run_id, status) == (ids["dead"], "pending")
    call(logins.operator, "SELECT * FROM runner.set_job_paused_v1('hello', true, 'bob', 'maintenance')")
    assert rows(logins.admin, "SELECT action, who, db_user FROM runner.requests WHERE id >= %s ORDER BY id",
                (request_id,)) == [("rerun", "alice", logins.users["operator"]),
                                   ("pause", "bob", logins.users["operator"])]
    # the run changed with its request, in the same transaction
    assert scalar(logins.admin, "SELECT status_reason FROM runner.job_runs WHERE id = %s", (ids["dead"],)) == (
        f"manual rerun (request {request_id}): because")


def test_approvals_touch_only_held_runs_of_the_named_job(logins: Logins) -> None:
    ids = logins.ids
    before = snapshot(logins.admin)
    decide = "SELECT * FROM runner.decide_runs_v1(%s, %s, %s::bigint[], '{}', 'o', 'r')"
    with pytest.raises(errors.RaiseException, match="none of the 2 run"):
        call(logins.operator, decide, ("skip", "hello", [ids["dead"], ids["succeeded"]]))
    with pytest.raises(errors.RaiseException, match="none of the 1 run"):
        call(logins.operator, decide, ("approve", "another-job", [ids["awaiting"]]))
    with pytest.raises(errors.RaiseException, match="approve or skip"):
        call(logins.operator, decide, ("delete", "hello", [ids["awaiting"]]))
    assert snapshot(logins.admin) == before


def test_a_plan_is_created_only_running_and_audited(logins: Logins) -> None:
    create = ("SELECT backfill_id, request_id FROM runner.create_backfill_v1('hello', %(f)s, %(t)s, NULL,"
              " 'backfill', 1, NULL, 10, NULL, false, %(slots)s::timestamptz[], %(parts)s, %(dates)s::date[],"
              " %(slots)s::timestamptz[], %(slots)s::timestamptz[], %(keys)s, 'carol', 'refill')")
    params = {"f": "2026-01-01T00:00:00Z", "t": "2026-01-01T02:00:00Z",
              "slots": ["2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"], "parts": ["", ""],
              "dates": ["2026-01-01", "2026-01-01"], "keys": ["k1", "k2"]}
    before = snapshot(logins.admin)
    outside = {**params, "slots": ["2026-01-01T00:00:00Z", "2026-01-01T05:00:00Z"]}
    with pytest.raises(errors.RaiseException, match="outside the plan"):
        call(logins.operator, create, outside)
    with pytest.raises(errors.RaiseException, match="differ in length"):
        call(logins.operator, create, {**params, "keys": ["k1"]})
    with pytest.raises(errors.CheckViolation):
        call(logins.operator, create.replace("'backfill', 1,", "'backfill', 0,"), params)
    assert snapshot(logins.admin) == before
    [(plan_id, request_id)] = call(logins.operator, create, params)
    assert rows(logins.admin, "SELECT status, requested_by, expected_runs, tokens FROM runner.backfills"
                              " WHERE id = %s", (plan_id,)) == [("running", "carol", 2, 1.0)]
    assert rows(logins.admin, "SELECT action, who, db_user, touched -> 'backfill' ->> 'id' FROM runner.requests"
                              " WHERE id = %s", (request_id,)) == [
        ("backfill", "carol", logins.users["operator"], str(plan_id))]


@pytest.mark.parametrize(("statement", "plan", "message"), [
    ("SELECT runner.resume_backfill_v1(%s, 'o', 'r')", "plan_running", "is running: it cannot be resumed"),
    ("SELECT runner.pause_backfill_v1(%s, 'o', 'r')", "plan_cancelled", "is cancelled: it cannot be paused"),
    ("SELECT * FROM runner.cancel_backfill_v1(%s, 'o', 'r')", "plan_cancelled", "cannot be cancelled"),
    ("SELECT runner.record_backfill_verify_v1(%s, 'passed', '{}', 'o', 'r')", "plan_running",
     "cannot be verified"),
    ("SELECT runner.pause_backfill_v1(%s, 'o', '  ')", "plan_running", "must not be empty"),
])
def test_plan_actions_check_the_transition(logins: Logins, statement: str, plan: str, message: str) -> None:
    before = snapshot(logins.admin)
    with pytest.raises(errors.RaiseException, match=re.escape(message)):
        call(logins.operator, statement, (logins.ids[plan],))
    assert snapshot(logins.admin) == before
