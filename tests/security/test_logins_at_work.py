"""The role matrix's "can" column, with real processes: `runner start` works as a worker
login (its realtime slots, reruns, approvals, a backfill's lane with its pause condition and
its verification), and every ledger-changing CLI command works as an operator login, each
audited as that login. The scenario ends with the ledger audit."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.security.conftest import Logins
from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, run_cli, scalar

APP = "tests/apps/backfill.py:app"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def app_tables(logins: Logins) -> None:
    """The tables the test app's handlers write (as the worker) and its verify check reads
    (as the condition role: verification SQL runs as it, runner/verification.py)."""
    with psycopg.connect(logins.admin, autocommit=True) as conn:
        conn.execute("CREATE TABLE bf_gauge (running int NOT NULL DEFAULT 0, peak int NOT NULL DEFAULT 0)")
        conn.execute("INSERT INTO bf_gauge VALUES (0, 0)")
        conn.execute("CREATE TABLE bf_done (slot timestamptz, partition_key text, run_id bigint, fence bigint)")
        worker, operator = (sql.Identifier(logins.groups[k]) for k in ("worker", "operator"))
        conn.execute(sql.SQL("GRANT SELECT, UPDATE ON bf_gauge TO {}").format(worker))
        conn.execute(sql.SQL("GRANT SELECT, INSERT ON bf_done TO {}").format(worker))
        conn.execute(sql.SQL("GRANT SELECT ON bf_done TO {}").format(operator))
        conn.execute(sql.SQL("GRANT SELECT ON bf_done TO {}").format(sql.Identifier(logins.groups["condition"])))


def held_and_dead_runs(logins: Logins) -> None:
    """What an operator acts on: two runs of 'held' awaiting approval, a dead run of 'hourly'."""
    with psycopg.connect(logins.admin, autocommit=True) as conn:
        for job, slot, part, status, attempt in [("held", T0, "", "awaiting_approval", 0),
                                                 ("held", T0 + HOUR, "", "awaiting_approval", 0),
                                                 ("hourly", T0, "a", "dead", 2)]:
            conn.execute(
                "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date,"
                " window_start, window_end, status, trigger, attempt, fence, idempotency_key, status_reason,"
                " finished_at, last_error)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, 'catch_up', %s, %s, %s, 'seeded', now(), 'E: seeded')",
                (job, slot, part, slot.date(), slot - HOUR, slot, status, attempt, attempt, f"k-{job}-{slot}"))


def as_operator(logins: Logins, *args: str) -> dict[str, Any]:
    out = run_cli(*args, "--by", "oncall", "--yes", "--json", url=logins.operator, timeout=120)
    assert out.returncode == 0, (args, out.stderr)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def run_status(logins: Logins, job: str, slot: datetime, part: str = "") -> str:
    return str(scalar(logins.admin, "SELECT status FROM runner.job_runs WHERE job_name = %s AND schedule_slot = %s"
                                    " AND partition_key = %s", (job, slot, part)))


def plan_status(logins: Logins, plan_id: int) -> tuple[Any, ...]:
    return rows(logins.admin, "SELECT status, verify_status FROM runner.backfills WHERE id = %s", (plan_id,))[0]


@pytest.mark.slow
def test_runner_start_as_a_worker_and_every_cli_action_as_an_operator(bare_logins: Logins,
                                                                     tmp_path: Path) -> None:
    logins = bare_logins
    app_tables(logins)
    held_and_dead_runs(logins)
    proc = RunnerProcess(APP, logins.worker, "--poll-interval", "0.2", log=tmp_path / "worker.log")
    try:
        eventually(lambda: scalar(logins.admin, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'live'"
                                                " AND status = 'succeeded'") >= 2,
                   timeout=30, message="realtime runs succeeded as the worker")
        # pause and resume
        as_operator(logins, "pause", "live", "--reason", "maintenance")
        assert scalar(logins.admin, "SELECT paused FROM runner.jobs WHERE job_name = 'live'") is True
        as_operator(logins, "resume", "live", "--reason", "done")
        # rerun a dead run: the worker runs its new attempt
        as_operator(logins, "rerun", "hourly", "--slot", T0.isoformat(), "--partition", "a", "--reason", "fixed")
        # approve one held run, skip the other
        as_operator(logins, "approve", "held", "--slot", T0.isoformat(), "--reason", "go")
        as_operator(logins, "skip", "held", "--slot", (T0 + HOUR).isoformat(), "--reason", "not needed")
        eventually(lambda: run_status(logins, "hourly", T0, "a") == "succeeded"
                   and run_status(logins, "held", T0) == "succeeded",
                   timeout=30, message="the rerun and the approved run succeeded")
        # two backfills while the job is paused (their runs wait for the lane): one paused and
        # resumed, then run by the worker's lane and verified by it (and by the operator again),
        # one cancelled before it ran
        as_operator(logins, "pause", "hourly", "--reason", "hold the lane")
        made = as_operator(logins, "backfill", "hourly", "--from", (T0 + HOUR).isoformat(),
                           "--to", (T0 + 3 * HOUR).isoformat(), "--pause-when", "SELECT false",
                           "--concurrency", "2", "--reason", "refill", "--app", APP)
        plan_id = made["backfill"]["id"]
        as_operator(logins, "backfill", "pause", str(plan_id), "--reason", "hold on")
        as_operator(logins, "backfill", "resume", str(plan_id), "--reason", "go on", "--max-failures", "3")
        other = as_operator(logins, "backfill", "hourly", "--from", (T0 + 10 * HOUR).isoformat(),
                            "--to", (T0 + 12 * HOUR).isoformat(), "--reason", "second", "--app", APP)
        cancelled = as_operator(logins, "backfill", "cancel", str(other["backfill"]["id"]), "--reason", "no")
        assert cancelled["runs_cancelled"] == 4
        as_operator(logins, "resume", "hourly", "--reason", "lane again")
        eventually(lambda: plan_status(logins, plan_id) == ("completed", "passed"),
                   timeout=60, message="the backfill completed and was verified by the worker")
        as_operator(logins, "backfill", "verify", str(plan_id), "--reason", "once more", "--app", APP)
    finally:
        code = proc.terminate()
    assert code == 0, proc.output()
    assert "rror" not in proc.output() and "privileged_login" not in proc.output(), proc.output()
    actions = rows(logins.admin, "SELECT action, db_user FROM runner.requests ORDER BY id")
    assert [a for a, _ in actions] == [
        "pause", "resume", "rerun", "approve", "skip", "pause", "backfill", "backfill_pause", "backfill_resume",
        "backfill", "backfill_cancel", "resume", "backfill_verify"]
    assert {u for _, u in actions} == {logins.users["operator"]}
    assert run_status(logins, "held", T0 + HOUR) == "skipped"
    assert_ledger_clean(logins.admin)
