"""Issue 16 in the role matrix: retiring is an operator's audited action (runner.retire_job_v1 /
unretire_job_v1), refused to the worker and the readonly role and never a direct write;
pruning is runner.prune_v1, granted to the worker (the background duty, proven here with a
real `runner start` as a worker login) and to the operator (`runner prune`), while neither
holds DELETE on the ledger."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from tests.security.conftest import Logins, refused, snapshot
from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, run_cli, scalar

RETIRE = "SELECT * FROM runner.retire_job_v1('hello', 'w', 'r')"
FORBIDDEN = {
    "worker": {
        "retire": RETIRE,
        "unretire": "SELECT * FROM runner.unretire_job_v1('hello', 'w', 'r')",
        "retired_at": "UPDATE runner.jobs SET retired_at = now()",
        "retirement_row": "INSERT INTO runner.job_retirements (job_name, retired_from) VALUES ('hello', now())",
        "delete_runs": "DELETE FROM runner.job_runs WHERE status = 'succeeded'",
        "delete_attempts": "DELETE FROM runner.attempts",
        "pruned_through": "UPDATE runner.gap_watermarks SET pruned_through = now()",
    },
    "operator": {
        "retired_at": "UPDATE runner.jobs SET retired_at = now()",
        "end_a_retirement": "UPDATE runner.job_retirements SET retired_until = now()",
        "delete_runs": "DELETE FROM runner.job_runs WHERE status = 'succeeded'",
        "delete_effects": "DELETE FROM runner.effects",
        "pruned_through": "UPDATE runner.gap_watermarks SET pruned_through = now()",
    },
    "readonly": {
        "retire": RETIRE,
        "prune": "SELECT * FROM runner.prune_v1(10)",
    },
}
CASES = [(role, name) for role, statements in FORBIDDEN.items() for name in statements]


@pytest.mark.parametrize("role, name", CASES, ids=[f"{r}-{n}" for r, n in CASES])
def test_retention_and_retirement_refused(logins: Logins, role: str, name: str) -> None:
    before = snapshot(logins.admin)
    refused(getattr(logins, role), FORBIDDEN[role][name])
    assert snapshot(logins.admin) == before


def test_an_operator_retires_and_unretires_as_its_login(logins: Logins) -> None:
    for command in ("retire", "unretire"):
        out = run_cli(command, "hello", "--reason", "moved", "--by", "oncall", "--yes", "--json",
                      url=logins.operator)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["request"]["db_user"] == logins.users["operator"]
    assert rows(logins.admin, "SELECT action, db_user FROM runner.requests WHERE action LIKE '%%retire'"
                              " ORDER BY id") == [("retire", logins.users["operator"]),
                                                  ("unretire", logins.users["operator"])]


def test_an_operator_prunes_with_runner_prune(logins: Logins) -> None:
    with psycopg.connect(logins.admin, autocommit=True) as conn:
        conn.execute("""UPDATE runner.jobs SET options = '{"retention": {"succeeded_seconds": 3600,"""
                     """ "failed_seconds": 3600}}'""")
        conn.execute("UPDATE runner.job_runs SET finished_at = now() - interval '2 hours'"
                     " WHERE id = %s", (logins.ids["succeeded"],))
    out = run_cli("prune", "--json", url=logins.operator)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["runs"] == 1
    assert scalar(logins.admin, "SELECT count(*) FROM runner.job_runs WHERE id = %s", (logins.ids["succeeded"],)) == 0
    assert scalar(logins.admin, "SELECT count(*) FROM runner.requests") == 1


APP = "tests/apps/retention.py:app"


def test_the_background_duty_prunes_as_a_worker_login(bare_logins: Logins, tmp_path: Path) -> None:
    """Two days of `hourly` runs, watermark advanced: a runner started as a worker login prunes
    every run older than the job's hour (retention={"succeeded": "1h", ...}) in the background,
    the gap scan lists the same before and after, and the audit is clean."""
    admin = bare_logins.admin
    with psycopg.connect(admin, autocommit=True) as conn:
        now = conn.execute("SELECT date_trunc('hour', now(), 'UTC')").fetchone()[0]
        start = now - timedelta(days=2)
        conn.execute("INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, track_from,"
                     " first_registered_at) VALUES ('hourly', 'every', '1 hour', %s, %s)", (start, start))
        conn.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval,"
                     " timezone) VALUES ('hourly', %s, 'every', '1 hour', 'UTC')", (start,))
        conn.execute(
            "INSERT INTO runner.job_runs (job_name, schedule_slot, business_date, window_start, window_end,"
            " status, trigger, attempt, fence, idempotency_key, started_at, finished_at)"
            " SELECT 'hourly', s, s::date, s - interval '1 hour', s, 'succeeded', 'schedule', 1, 1,"
            " 'k-' || s, s, s + interval '1 second' FROM generate_series(%s::timestamptz, %s, '1 hour') s",
            (start, now))
        conn.execute("INSERT INTO runner.attempts (run_id, attempt, fence, trigger, owner_host, owner_pid,"
                     " owner_instance, lock_key, status, started_at, finished_at) SELECT id, 1, 1, 'schedule',"
                     " 'h', 1, gen_random_uuid(), 1, 'succeeded', started_at, finished_at FROM runner.job_runs")
        conn.execute("SELECT runner.advance_watermarks_v1()")
        gaps_before = conn.execute("SELECT schedule_slot, state FROM runner.missing_slots"
                                   " WHERE job_name = 'hourly' ORDER BY 1").fetchall()
    proc = RunnerProcess(APP, bare_logins.worker, "--poll-interval", "0.2", "--prune-interval", "0.2",
                         "--retention-default", "2h", log=tmp_path / "runner.log")
    try:
        eventually(lambda: scalar(admin, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'hourly'"
                                         " AND finished_at < now() - interval '1 hour'") == 0,
                   timeout=60, message="the old runs are pruned")
        # the job's own policy, and the runner's default for the job without one
        policies = dict(rows(admin, "SELECT job_name, options -> 'retention' FROM runner.jobs"))
        assert policies["hourly"] == {"succeeded_seconds": 3600.0, "failed_seconds": 7200.0}
        assert policies["second"] == {"succeeded_seconds": 7200.0}  # failed: not set (6 x, dead runs kept)
        assert scalar(admin, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'hourly'") >= 1
        assert scalar(admin, "SELECT count(*) FROM runner.attempts a WHERE NOT EXISTS"
                             " (SELECT 1 FROM runner.job_runs r WHERE r.id = a.run_id)") == 0
    finally:
        assert proc.terminate() == 0, proc.output()
    assert "retention pass failed" not in proc.output()
    gaps_after = rows(admin, "SELECT schedule_slot, state FROM runner.missing_slots WHERE job_name = 'hourly'"
                             " ORDER BY 1")
    assert gaps_after == gaps_before
    assert_ledger_clean(admin)
