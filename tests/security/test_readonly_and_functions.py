"""The rest of the role matrix: runner_readonly writes nothing of the ledger and calls no
function that does (it may end a console session: runner.end_web_session_v1); every function that runs as the schema owner (SECURITY DEFINER) has a fixed
search_path, is not callable by PUBLIC, and is granted to exactly the role whose action it
is."""

from __future__ import annotations

import pytest

from tests.security.conftest import Logins, refused, snapshot
from tests.support import rows, scalar

WORKER_FUNCTIONS = {"start_attempts_v1", "finish_attempts_v1", "checkpoint_v1", "record_replay_plan_v1", "advance_watermarks_v1",
                    "advance_watermarks_v2",  # bounded per call (revision 0020)
                    "advance_watermarks_v3",  # crons parsed once a call, unmoved rows kept (issue 32)
                    "tier_backfill_v1", "lane_budget_v1", "lane_spend_v1",
                    "prune_instances_v1",  # the retention duty's instance rows (revision 0016)
                    "sync_schedule_v1",  # the schedule history's one writer (0003_history)
                    "plan_range_v1"}  # a plan's range accounted for before it completes (issue 26)
OPERATOR_FUNCTIONS = {"rerun_v1", "rerun_v2", "set_job_paused_v1", "decide_runs_v1", "create_backfill_v1",
                      "create_backfill_v2",  # with --resume (issue 33)
                      "create_backfill_v3",  # with --pause-every (0012_pauseevery)
                      "pause_backfill_v1", "resume_backfill_v1", "cancel_backfill_v1",
                      "record_backfill_verify_v1", "retire_job_v1", "unretire_job_v1", "set_lane_v1",
                      "adopt_ledger_v1",  # a copied ledger adopted (issue 29, point 6)
                      "rerun_runs_v1"}  # the bulk rerun (issue 30)
# retention (revision 0009): the runners' background duty and `runner prune`
SHARED_FUNCTIONS = {"prune_v1"}
# the console's logout (0006_websessions): ends one `runner web` session by the hash of its
# random id, to the operator and the readonly role (a console of viewers); no ledger history
CONSOLE_FUNCTIONS = {"end_web_session_v1"}
# called only by the functions above, or by a trigger, as the owner
INTERNAL = {"lock_backfill_for_action", "record_pause_v1"}
# owned by the condition role, not the schema owner: it runs the caller's condition as that
# powerless role, so it fixes no search_path (names resolve as the caller's) and its own
# owner check names the catalogs with their schema; runners evaluate, operators check at
# creation (and the same for verify_query_v1: a job's verification SQL)
CONDITION_FUNCTIONS = {"pause_condition_v1", "verify_query_v1"}

READONLY_FORBIDDEN = {
    "rerun": "SELECT * FROM runner.rerun_v1({dead}, 'dead', 3, false, 'r', 'r')",
    "pause": "SELECT * FROM runner.set_job_paused_v1('hello', true, 'r', 'r')",
    "rerun_many": "SELECT * FROM runner.rerun_runs_v1('hello', ARRAY[{dead}]::bigint[], ARRAY['dead'],"
                  " ARRAY[3]::bigint[], '{{}}', 'r', 'r')",
    "backfill_pause": "SELECT runner.pause_backfill_v1({plan_running}, 'r', 'r')",
    "advance_watermarks": "SELECT runner.advance_watermarks_v1()",
    "advance_watermarks_bounded": "SELECT * FROM runner.advance_watermarks_v2(NULL, interval '1 hour', 1000)",
    "advance_watermarks_v3": "SELECT * FROM runner.advance_watermarks_v3(NULL, interval '1 hour', 1000)",
    "finish": "SELECT * FROM runner.finish_attempts_v1('[]')",
    "lock_a_plan": "SELECT * FROM runner.lock_backfill_for_action({plan_running}, 'x', ARRAY['running'], 'r', 'r')",
    "update_a_run": "UPDATE runner.job_runs SET status = 'dead'",
    "insert_a_plan": "INSERT INTO runner.backfills (job_name, range_from, range_to, requested_by, reason)"
                     " VALUES ('hello', now(), now() + interval '1 hour', 'r', 'r')",
    "lock_runs": "SELECT * FROM runner.job_runs FOR UPDATE",
    "adopt_a_copy": "SELECT * FROM runner.adopt_ledger_v1('r', 'r')",
    # the actions' shared parts run with the caller's privileges: no request row, no requeue
    "forge_a_request": "SELECT runner.operator_request_v1('rerun', 'hello', 'r', 'r', '{{}}')",
    "requeue_a_run": "SELECT * FROM runner.requeue_manual_v1(ARRAY[{dead}]::bigint[], 1, 'r', now(), false)",
    "forge_the_identity": "UPDATE runner.ledger_identity SET database_oid = 1",
}


@pytest.mark.parametrize("name", list(READONLY_FORBIDDEN))
def test_readonly_cannot(logins: Logins, name: str) -> None:
    before = snapshot(logins.admin)
    refused(logins.readonly, READONLY_FORBIDDEN[name].format(**logins.ids))
    assert snapshot(logins.admin) == before


def definer_functions(url: str) -> list[tuple[str, list[str] | None, str]]:
    return rows(url, "SELECT p.proname, p.proconfig, p.oid::regprocedure::text FROM pg_proc p"
                     " JOIN pg_namespace n ON n.oid = p.pronamespace"
                     " WHERE n.nspname = 'runner' AND p.prosecdef ORDER BY 1")


def test_every_definer_function_is_fenced_and_granted_to_its_role_only(logins: Logins) -> None:
    found = definer_functions(logins.admin)
    assert {name for name, _, _ in found} == (WORKER_FUNCTIONS | OPERATOR_FUNCTIONS | SHARED_FUNCTIONS | INTERNAL
                                             | CONDITION_FUNCTIONS | CONSOLE_FUNCTIONS)
    for name, config, signature in found:
        if name in CONDITION_FUNCTIONS:
            assert scalar(logins.admin, "SELECT pg_get_userbyid(proowner) FROM pg_proc WHERE oid = %s::regprocedure",
                          (signature,)) == logins.groups["condition"], signature
        else:
            assert config is not None and "search_path=pg_catalog, pg_temp" in config, signature
        grantees = {r[0] for r in rows(
            logins.admin,
            "SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END"
            " FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a"
            " WHERE p.oid = %s::regprocedure AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner",
            (signature,))}
        expected = ({logins.groups["worker"]} if name in WORKER_FUNCTIONS
                    else {logins.groups["operator"]} if name in OPERATOR_FUNCTIONS
                    else {logins.groups["worker"], logins.groups["operator"]}
                    if name in CONDITION_FUNCTIONS | SHARED_FUNCTIONS
                    else {logins.groups["operator"], logins.groups["readonly"]} if name in CONSOLE_FUNCTIONS
                    else set())
        assert grantees == expected, signature
