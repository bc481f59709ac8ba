"""Issue 12, point 3: runner_worker cannot rewrite the ledger. Every statement the review ran
as a worker login (and its neighbours) is refused, and changes nothing; the transitions a
runner does make go through fence-checked functions that refuse the rest. (That `runner
start` works as a worker login: test_logins_at_work.py.)"""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import errors

from tests.security.conftest import Logins, refused, snapshot
from tests.support import scalar

# {name} is a seeded id (conftest.seed): a run by its state, or a plan
FORBIDDEN = {
    # the review's statements
    "fence_and_status": "UPDATE runner.job_runs SET fence = fence + 100, status = 'dead'",
    "attempt_succeeded": "UPDATE runner.attempts SET status = 'succeeded'",
    "pause_a_job": "UPDATE runner.jobs SET paused = true",
    "forge_a_watermark": "UPDATE runner.gap_watermarks SET complete_through = now(), track_from = now()",
    "insert_a_watermark": "INSERT INTO runner.gap_watermarks (job_name, complete_through) VALUES ('x', now())",
    "track_from_later": "UPDATE runner.jobs SET track_from = now()",
    # their neighbours
    "run_status": "UPDATE runner.job_runs SET status = 'succeeded' WHERE id = {dead}",
    "run_attempt": "UPDATE runner.job_runs SET attempt = 0",
    "run_trigger": "UPDATE runner.job_runs SET trigger = 'manual'",
    "run_next_attempt": "UPDATE runner.job_runs SET next_attempt_at = now() WHERE id = {dead}",
    "attempt_fence": "UPDATE runner.attempts SET fence = fence + 1",
    "attempt_finished": "UPDATE runner.attempts SET finished_at = now()",
    # a run's checkpoint only through runner.checkpoint_v1, at the run's fence (issue 33)
    "run_checkpoint": "UPDATE runner.job_runs SET checkpoint = '{{}}', checkpoint_fence = fence",
    "attempt_checkpoints_before": "UPDATE runner.attempts SET checkpoints_before = 0",
    "forge_a_hole": "INSERT INTO runner.gap_holes (job_name, schedule_slot, whole_slot, partition_key)"
                    " VALUES ('hello', now(), false, '')",
    "drop_holes": "DELETE FROM runner.gap_holes",
    "pause_history": "INSERT INTO runner.job_pauses (job_name, paused_from) VALUES ('hello', now())",
    "end_a_pause": "UPDATE runner.job_pauses SET paused_until = now()",
    "delete_runs": "DELETE FROM runner.job_runs",
    "truncate_attempts": "TRUNCATE runner.attempts",
    "write_a_request": "INSERT INTO runner.requests (action, who, reason) VALUES ('rerun', 'w', 'r')",
    # a copied ledger's hold is the operator's to end (issue 29, point 6): a runner cannot
    # adopt the copy, nor record its identity as this database's
    "adopt_a_copy": "SELECT * FROM runner.adopt_ledger_v1('w', 'r')",
    "record_the_identity": "UPDATE runner.ledger_identity SET database_oid = 1",
    "replace_the_identity": "DELETE FROM runner.ledger_identity",
    "rewrite_a_request": "UPDATE runner.requests SET reason = 'rewritten'",
    "alembic_version": "UPDATE runner.alembic_version SET version_num = 'x'",
    # an operator's function is not the worker's
    "rerun_function": "SELECT * FROM runner.rerun_v1({dead}, 'dead', 3, false, 'w', 'r')",
    "pause_function": "SELECT * FROM runner.set_job_paused_v1('hello', true, 'w', 'r')",
    "rerun_many_function": "SELECT * FROM runner.rerun_runs_v1('hello', ARRAY[{dead}]::bigint[], ARRAY['dead'],"
                           " ARRAY[3]::bigint[], '{{}}', 'w', 'r')",
    "approve_function": "SELECT * FROM runner.decide_runs_v1('approve', 'hello', ARRAY[{awaiting}]::bigint[],"
                        " '{{}}', 'w', 'r')",
    "cancel_function": "SELECT * FROM runner.cancel_backfill_v1({plan_running}, 'w', 'r')",
}


# the gap scan as of a fixed instant (a day after the seeded slots), so the count cannot move
GAPS = "SELECT count(*) FROM runner.missing_slots_v1('2026-01-02T00:00:00Z', NULL, NULL)"


@pytest.mark.parametrize("name", list(FORBIDDEN))
def test_the_worker_cannot(logins: Logins, name: str) -> None:
    before = snapshot(logins.admin)
    refused(logins.worker, FORBIDDEN[name].format(**logins.ids))
    assert snapshot(logins.admin) == before


def test_a_worker_cannot_hide_gaps_by_moving_track_from_or_the_watermark(logins: Logins) -> None:
    missing = scalar(logins.admin, GAPS)
    assert missing > 20  # hourly since a day before the seeded runs: most slots never ran
    assert "may only move earlier" in refused(logins.worker, "UPDATE runner.jobs SET track_from = now()")
    refused(logins.worker, "UPDATE runner.gap_watermarks SET complete_through = now()")
    assert scalar(logins.admin, GAPS) == missing
    # earlier is allowed (more is tracked, nothing hidden): what a job's code may ask for
    with psycopg.connect(logins.worker, autocommit=True) as conn:
        conn.execute("UPDATE runner.jobs SET track_from = track_from - interval '1 hour'")
    assert scalar(logins.admin, GAPS) == missing + 1


def outcome(run_id: int, fence: int, status: str, attempt_status: str | None = None) -> str:
    return json.dumps([[run_id, fence, status, attempt_status, "E", "m", 0, None, None]])


def test_outcomes_land_only_on_a_running_run_at_its_fence(logins: Logins) -> None:
    ids = logins.ids
    finish = "SELECT run_id, fence, recorded FROM runner.finish_attempts_v1(%s::jsonb)"
    before = snapshot(logins.admin)
    with psycopg.connect(logins.worker, autocommit=True) as conn:
        # a finished run is history: no outcome changes it, whatever fence is claimed
        for run, fence in ((ids["succeeded"], 1), (ids["dead"], 3), (ids["dead"], 4)):
            assert conn.execute(finish, (outcome(run, fence, "succeeded"),)).fetchall() == [(run, fence, False)]
        # a running run, at another fence than its own
        assert conn.execute(finish, (outcome(ids["running"], 2, "dead"),)).fetchall() == [
            (ids["running"], 2, False)]
        # statuses the function does not write
        for status, attempt_status in (("running", None), ("pending", None), ("succeeded", "abandoned")):
            with pytest.raises(errors.InvalidParameterValue):
                conn.execute(finish, (outcome(ids["running"], 1, status, attempt_status),))
    assert snapshot(logins.admin) == before
    with psycopg.connect(logins.worker, autocommit=True) as conn:  # the owner's own outcome lands
        assert conn.execute(finish, (outcome(ids["running"], 1, "succeeded"),)).fetchall() == [
            (ids["running"], 1, True)]
    assert scalar(logins.admin, "SELECT status FROM runner.job_runs WHERE id = %s", (ids["running"],)) == (
        "succeeded")


def test_a_new_attempt_needs_a_queued_run(logins: Logins) -> None:
    """runner.start_attempts_v1 (SECURITY DEFINER) moves a fence only for a pending or failed
    run, or as a recovery of a running run whose lock nobody holds."""
    ids = logins.ids
    start = ("SELECT id, outcome FROM runner.start_attempts_v1(%s::bigint[], %s::bigint[], false, 'h', 1,"
             " gen_random_uuid(), 21077)")
    before = snapshot(logins.admin)
    with psycopg.connect(logins.worker, autocommit=True) as conn:
        for run in ("succeeded", "dead", "running"):
            assert conn.execute(start, ([ids[run]], [None])).fetchall() == []
    assert snapshot(logins.admin) == before


def test_plan_transitions_of_the_lane_only(logins: Logins) -> None:
    ids = logins.ids
    before = snapshot(logins.admin)
    assert "operator's action" in refused(
        logins.worker, "UPDATE runner.backfills SET status = 'running' WHERE id = %s", (ids["plan_cancelled"],))
    refused(logins.worker, "UPDATE runner.backfills SET status = 'cancelled' WHERE id = %s", (ids["plan_running"],))
    assert snapshot(logins.admin) == before
    with psycopg.connect(logins.worker, autocommit=True) as conn:  # the lane pauses a running plan
        conn.execute("UPDATE runner.backfills SET status = 'paused', pause_reason = 'pause_when returned true'"
                     " WHERE id = %s", (ids["plan_running"],))
    assert scalar(logins.admin, "SELECT status FROM runner.backfills WHERE id = %s", (ids["plan_running"],)) == (
        "paused")


def test_the_worker_heartbeats_and_records_progress(logins: Logins) -> None:
    """What column grants still allow: progress counts and heartbeats, nothing else of a run."""
    ids = logins.ids
    with psycopg.connect(logins.worker, autocommit=True) as conn:
        conn.execute("UPDATE runner.job_runs SET processed_count = 5 WHERE id = %s", (ids["running"],))
        conn.execute("UPDATE runner.attempts SET heartbeat_at = now() WHERE run_id = %s", (ids["running"],))
    assert scalar(logins.admin, "SELECT processed_count FROM runner.job_runs WHERE id = %s",
                  (ids["running"],)) == 5


def test_operator_functions_are_not_granted_to_the_worker(logins: Logins) -> None:
    worker = logins.groups["worker"]
    for fn in ("rerun_v1", "rerun_runs_v1", "set_job_paused_v1", "decide_runs_v1", "create_backfill_v1",
               "create_backfill_v2", "create_backfill_v3", "pause_backfill_v1",
               "resume_backfill_v1", "cancel_backfill_v1", "record_backfill_verify_v1"):
        allowed = scalar(logins.admin, "SELECT bool_or(has_function_privilege(%s, p.oid, 'EXECUTE'))"
                                       " FROM pg_proc p WHERE p.proname = %s", (worker, fn))
        assert allowed is False, fn

