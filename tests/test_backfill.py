"""Backfills: the plan's impact (dry run), creation that reuses runs, the lane (concurrency,
rate, priority below realtime, pauses, completion), the operator's commands, verification.

The lane's logic is driven directly (``backfill.run_once`` on a lock session, outcomes
recorded with ``ledger.finish_attempts``) where one process is enough; real ``runner start``
processes execute plans where concurrency, rate and lag are the point."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
import pytest

from runner import Runner
from runner.actions import backfill, operate
from runner.store import ledger
from runner.store.ledger import Outcome, Owner
from runner.worker import conditions
from tests.apps.backfill import app as bf_app
from tests.support import (
    RunnerProcess,
    assert_ledger_clean,
    backfill_app_tables,
    eventually,
    rows,
    run_cli,
    scalar,
)

APP = "tests/apps/backfill.py:app"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def at(hours: float) -> datetime:
    return T0 + hours * HOUR


def iso(t: datetime) -> str:
    return t.isoformat()


def cli(*args: str, url: str, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI with stdin given (never the developer's terminal)."""
    return run_cli(*args, url=url, stdin=stdin, env=env, timeout=120)


def ok_json(out: subprocess.CompletedProcess[str]) -> Any:
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture
def url(db_url: str) -> str:
    """A fresh database with the tables the test app's handlers write."""
    return backfill_app_tables(db_url)


@pytest.fixture
def conn(url: str) -> Any:
    """An autocommit session in the UTC zone, used as a runner's lock session."""
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SET TIME ZONE 'UTC'")
        yield c


OWNER = Owner(uuid4(), "test-host", 4242, 21077)


def make_run(conn: Any, job: str, slot: datetime, partition: str = "", *, status: str = "succeeded",
             attempt: int = 1) -> int:
    row = conn.execute(
        "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date, window_start,"
        " window_end, status, trigger, attempt, fence, idempotency_key, started_at, finished_at,"
        " next_attempt_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, 'schedule', %s, %s, 'k', now(), now(),"
        " CASE WHEN %s = 'failed' THEN now() + interval '1 hour' END) RETURNING id",
        (job, slot, partition, slot.date(), slot - HOUR, slot, status, attempt, attempt, status)).fetchone()
    return int(row[0])


def make_effect(conn: Any, run_id: int, key: str, status: str = "confirmed") -> None:
    conn.execute(
        "INSERT INTO runner.effects (effect_key, run_id, job_name, status, attempt, fence, send_count,"
        " confirmed_by, confirmed_at) VALUES (%s, %s, 'hourly', %s, 1, 1, 1,"
        " CASE WHEN %s = 'confirmed' THEN 'send' END, CASE WHEN %s = 'confirmed' THEN now() END)",
        (key, run_id, status, status, status))


def spec(job: str = "hourly", start: float = 0, end: float = 6, **kw: Any) -> backfill.Spec:
    return backfill.Spec(job_name=job, range_from=at(start), range_to=at(end), **kw)


def create(conn: Any, s: backfill.Spec, app: Runner = bf_app) -> dict[str, Any]:
    return backfill.create(conn, backfill.plan(conn, app.jobs[s.job_name], s), "test", "tester")


def finish(conn: Any, runs: list[ledger.ClaimedRun], status: str = "succeeded") -> None:
    ledger.finish_attempts(conn, [Outcome(r.id, r.fence, status, error_class="E",
                                          error_message="boom", retry_delay=0.0) for r in runs])
    ledger.unlock_runs(conn, OWNER.namespace, [r.id for r in runs])


def plan_row(conn: Any, plan_id: int) -> dict[str, Any]:
    cur = conn.execute("SELECT * FROM runner.backfills WHERE id = %s", (plan_id,))
    names = [d.name for d in cur.description]
    return dict(zip(names, cur.fetchone(), strict=True))


def mixed_ledger(conn: Any) -> dict[str, int]:
    """Runs of 'hourly' in every state over the slots at0..at4 (partitions a, b)."""
    return {
        "succeeded": make_run(conn, "hourly", at(0), "a", status="succeeded"),
        "failed": make_run(conn, "hourly", at(0), "b", status="failed", attempt=2),
        "dead": make_run(conn, "hourly", at(1), "a", status="dead", attempt=3),
        "running": make_run(conn, "hourly", at(1), "b", status="running"),
        "skipped": make_run(conn, "hourly", at(2), "a", status="skipped", attempt=0),
        "awaiting_approval": make_run(conn, "hourly", at(2), "b", status="awaiting_approval", attempt=0),
        "coalesced": make_run(conn, "hourly", at(3), "a", status="coalesced", attempt=0),
        "cancelled": make_run(conn, "hourly", at(3), "b", status="cancelled", attempt=0),
        "pending": make_run(conn, "hourly", at(4), "a", status="pending", attempt=0),
    }


def snapshot(url: str) -> tuple[Any, ...]:
    return (rows(url, "SELECT * FROM runner.job_runs ORDER BY id"),
            scalar(url, "SELECT count(*) FROM runner.backfills"),
            scalar(url, "SELECT count(*) FROM runner.requests"))


# -- the plan ----------------------------------------------------------------------------------


def test_dry_run_reports_the_impact_and_writes_nothing(url: str, conn: Any) -> None:
    ids = mixed_ledger(conn)
    make_effect(conn, ids["succeeded"], "mail-1")
    make_effect(conn, ids["dead"], "mail-2", status="unknown")
    before = snapshot(url)
    # no --reason needed for a dry run
    out = ok_json(cli("backfill", "hourly", "--from", iso(at(0)), "--to", iso(at(6)), "--dry-run", "--json",
                      "--app", APP, url=url))
    assert out["dry_run"] is True
    assert (out["slots"], out["partitions"], out["expected_runs"]) == (6, ["a", "b"], 12)
    assert out["already_succeeded"] == 1
    assert out["will_insert"] == 3  # at4 b, at5 a, at5 b
    assert out["will_requeue"] == 6  # failed, dead, skipped, awaiting_approval, coalesced, cancelled
    assert out["will_force"] == 0
    assert out["left_alone"] == {"running": 1, "pending": 1, "succeeded": 1}
    assert out["effects_recorded"] == {"confirmed": 1, "unknown": 1}
    assert [r["id"] for r in out["running"]] == [ids["running"]]
    assert snapshot(url) == before
    # the human form says the same, and so
    text = cli("backfill", "hourly", "--from", iso(at(0)), "--to", iso(at(6)), "--dry-run", "--app", APP, url=url)
    assert text.returncode == 0, text.stderr
    assert "12 runs" in text.stdout and "dry run: nothing written" in text.stdout
    assert snapshot(url) == before


def test_creation_reuses_each_run_and_never_makes_a_second_one(url: str, conn: Any) -> None:
    ids = mixed_ledger(conn)
    out = ok_json(cli("backfill", "hourly", "--from", iso(at(0)), "--to", iso(at(6)), "--reason", "fix 2026-01",
                      "--by", "alice", "--concurrency", "2", "--yes", "--json", "--app", APP, url=url))
    plan = out["backfill"]
    group = plan["replay_group_id"]
    assert (out["inserted"], out["requeued"], out["left_alone"]) == (3, 6, 3)
    # one run per slot x partition, and the existing ones kept their ids
    assert scalar(url, "SELECT count(*) FROM runner.job_runs") == 12
    assert scalar(url, "SELECT count(DISTINCT (schedule_slot, partition_key)) FROM runner.job_runs") == 12
    got = {r[0]: r[1:] for r in rows(url, "SELECT id, status, trigger, replay_group_id::text, attempt, fence,"
                                          " uncounted_attempts, next_attempt_at, lane FROM runner.job_runs")}
    for state in ("failed", "dead", "skipped", "awaiting_approval", "coalesced", "cancelled"):
        status, trigger, g, attempt, fence, uncounted, next_at, lane = got[ids[state]]
        assert (status, trigger, g, lane) == ("pending", "backfill", group, "bulk"), state
        assert uncounted == attempt and fence == attempt, state  # a full budget; fence moves at the claim
        assert next_at is None  # the lane decides when it starts
    for state in ("succeeded", "running", "pending"):
        assert got[ids[state]][2] is None, state  # left alone
        assert got[ids[state]][0] == state
    new = rows(url, "SELECT status, trigger, attempt, fence FROM runner.job_runs WHERE id <> ALL(%s)",
               (list(ids.values()),))
    assert new == [("pending", "backfill", 0, 0)] * 3
    # audited: who, why, what
    req = rows(url, "SELECT action, job_name, who, reason, touched FROM runner.requests")
    assert [(r[0], r[1], r[2], r[3]) for r in req] == [("backfill", "hourly", "alice", "fix 2026-01")]
    touched = req[0][4]
    assert touched["backfill"]["id"] == plan["id"] and touched["runs_inserted"] == 3
    assert sorted(r["before"]["status"] for r in touched["runs_requeued"]) == sorted(
        ["failed", "dead", "skipped", "awaiting_approval", "coalesced", "cancelled"])
    # a second, overlapping plan leaves the first one's runs alone
    again = create(conn, spec(start=0, end=7))
    assert (again["inserted"], len(again["requeued"])) == (2, 0)
    assert scalar(url, "SELECT count(*) FROM runner.job_runs") == 14


def test_force_gives_a_succeeded_run_a_new_attempt_of_the_same_run(url: str, conn: Any) -> None:
    run_id = make_run(conn, "hourly", at(0), "a", status="succeeded", attempt=1)
    without = create(conn, spec(start=0, end=1, partitions=("a",)))
    assert (without["inserted"], without["requeued"], without["left_alone"]) == (0, [], 1)
    assert plan_row(conn, without["backfill"]["id"])["expected_runs"] == 1
    forced = create(conn, spec(start=0, end=1, partitions=("a",), force=True))
    assert [r["id"] for r in forced["requeued"]] == [run_id]
    assert forced["requeued"][0]["before_status"] == "succeeded"
    claimed = backfill.run_once(conn, OWNER, bf_app.jobs, 10)
    assert [(r.id, r.attempt, r.fence, r.trigger, r.counted_attempts) for r in claimed] == [
        (run_id, 2, 2, "backfill", 1)]
    assert scalar(url, "SELECT count(*) FROM runner.job_runs") == 1
    finish(conn, claimed)
    assert scalar(url, "SELECT status FROM runner.job_runs WHERE id = %s", (run_id,)) == "succeeded"


def test_partitions_explicit_static_and_dynamic(conn: Any) -> None:
    dyn = Runner()
    dyn.job("dyn", every="1h", partitions=lambda slot: ["x", "y"] if slot.hour % 2 else ["x"])(lambda ctx: None)
    dyn.job("flat", every="1h")(lambda ctx: None)
    planned = backfill.plan(conn, dyn.jobs["dyn"], spec("dyn", 0, 4))
    assert list(zip(planned.expected.slots, planned.expected.partition_keys, strict=True)) == [
        (at(0), "x"), (at(1), "x"), (at(1), "y"), (at(2), "x"), (at(3), "x"), (at(3), "y")]
    assert planned.partitions is None
    only = backfill.plan(conn, dyn.jobs["dyn"], spec("dyn", 0, 2, partitions=("y",)))
    assert only.expected.partition_keys == ["y", "y"] and only.partitions == ["y"]
    assert backfill.plan(conn, dyn.jobs["flat"], spec("flat", 0, 3)).expected.partition_keys == ["", "", ""]
    with pytest.raises(operate.OperatorError, match="no partition 'zz'"):
        backfill.plan(conn, bf_app.jobs["hourly"], spec(partitions=("zz",)))
    with pytest.raises(operate.OperatorError, match="not partitioned"):
        backfill.plan(conn, dyn.jobs["flat"], spec("flat", partitions=("a",)))
    with pytest.raises(operate.OperatorError, match="no slot"):
        backfill.plan(conn, dyn.jobs["flat"], spec("flat", 0.25, 0.5))
    with pytest.raises(operate.OperatorError, match="must be before"):
        backfill.plan(conn, dyn.jobs["flat"], spec("flat", 3, 1))


def test_the_loop_claim_leaves_backfill_runs_to_the_lane(url: str, conn: Any) -> None:
    made = create(conn, spec(start=0, end=2))
    _, runs = ledger.claim_due_runs(conn, OWNER, ["hourly"], 100)
    assert runs == []
    claimed = backfill.run_once(conn, OWNER, bf_app.jobs, 10)
    assert len(claimed) == 1  # concurrency 1
    finish(conn, claimed, "failed")  # retry due at once, but still the lane's
    _, runs = ledger.claim_due_runs(conn, OWNER, ["hourly"], 100)
    assert runs == []
    # an operator's rerun of one of its runs is the loop's: trigger manual
    failed = rows(url, "SELECT schedule_slot, partition_key FROM runner.job_runs WHERE status = 'failed'")[0]
    rerun = operate.plan_rerun(conn, "hourly", failed[0], failed[1])
    operate.rerun(conn, rerun, "by hand", "bob")
    _, runs = ledger.claim_due_runs(conn, OWNER, ["hourly"], 100)
    assert [(r.slot, r.partition_key, r.trigger) for r in runs] == [(failed[0], failed[1], "manual")]
    assert made["backfill"]["status"] == "running"


# -- the lane -----------------------------------------------------------------------------------


def test_pauses_past_max_failures_and_resumes_with_a_higher_threshold(url: str, conn: Any) -> None:
    made = create(conn, spec("flaky", 0, 5, max_failures=1))
    plan_id = made["backfill"]["id"]
    for _ in range(2):
        finish(conn, backfill.run_once(conn, OWNER, bf_app.jobs, 10), "dead")
    assert backfill.run_once(conn, OWNER, bf_app.jobs, 10) == []
    row = plan_row(conn, plan_id)
    assert row["status"] == "paused" and "2 failed or dead run(s), more than max_failures=1" in row["pause_reason"]
    assert scalar(url, "SELECT count(*) FROM runner.job_runs WHERE status = 'pending'") == 3
    assert rows(url, "SELECT kind, job_name, detail FROM runner.alerts WHERE kind = 'backfill_paused'") == [
        ("backfill_paused", "flaky", f"backfill {plan_id} paused: {row['pause_reason']}")]
    # resumed as it is, it pauses again at once
    backfill.resume(conn, plan_id, "try again", "bob")
    assert backfill.run_once(conn, OWNER, bf_app.jobs, 10) == []
    assert plan_row(conn, plan_id)["status"] == "paused"
    backfill.resume(conn, plan_id, "tolerate them", "bob", max_failures=10, set_max_failures=True)
    assert len(backfill.run_once(conn, OWNER, bf_app.jobs, 10)) == 1
    assert plan_row(conn, plan_id)["status"] == "running"


def test_pause_when_true_or_failing_pauses_the_plan(url: str, conn: Any, db_roles: Any) -> None:
    db_roles.apply(url)
    conn.execute(f"GRANT SELECT ON bf_stop TO {db_roles.groups['condition']}")
    when_true = create(conn, spec(start=0, end=3, pause_when="SELECT exists (SELECT 1 FROM bf_stop)"))
    plan_id = when_true["backfill"]["id"]
    with conditions.connect(url) as cond:  # the condition duty's own session
        assert conditions.run_once(cond, OWNER.namespace, bf_app.jobs) == {plan_id: conditions.Evaluation(False)}
        assert len(backfill.run_once(conn, OWNER, bf_app.jobs, 10)) == 1
        conn.execute("INSERT INTO bf_stop VALUES (1)")
        assert conditions.run_once(cond, OWNER.namespace, bf_app.jobs) == {}  # checked at most every 5 s
        assert plan_row(conn, plan_id)["status"] == "running"
        later = scalar(url, "SELECT now() + interval '5 seconds'")
        assert conditions.run_once(cond, OWNER.namespace, bf_app.jobs, now=later) == {
            plan_id: conditions.Evaluation(True)}
        row = plan_row(conn, plan_id)
        assert (row["status"], row["pause_reason"]) == ("paused", "pause_when returned true")
        assert backfill.run_once(conn, OWNER, bf_app.jobs, 10) == []  # the lane sees it paused
        # an error in the condition pauses the plan, with the error as the reason
        failing = create(conn, spec(start=10, end=12,
                                    pause_when="SELECT 1 / (SELECT count(*) FROM bf_stop)::int = 1"))
        conn.execute("DELETE FROM bf_stop")
        conditions.run_once(cond, OWNER.namespace, bf_app.jobs, every=0)
        row = plan_row(conn, failing["backfill"]["id"])
        assert row["status"] == "paused"
        assert row["pause_reason"].startswith("pause_when failed: DivisionByZero: division by zero")


def test_pause_when_is_checked_at_creation_read_only_and_timed(url: str, conn: Any, db_roles: Any) -> None:
    db_roles.apply(url)
    conn.execute("INSERT INTO bf_stop VALUES (7)")
    before = snapshot(url)
    writes = "WITH d AS (DELETE FROM bf_stop RETURNING 1) SELECT count(*) > 100 FROM d"
    with pytest.raises(operate.OperatorError, match="read-only transaction"):
        backfill.plan(conn, bf_app.jobs["hourly"], spec(pause_when=writes))
    with pytest.raises(operate.OperatorError, match="statement timeout"):
        backfill.plan(conn, bf_app.jobs["hourly"], spec(pause_when="SELECT pg_sleep(3) IS NULL"))
    with pytest.raises(operate.OperatorError, match="boolean"):
        backfill.plan(conn, bf_app.jobs["hourly"], spec(pause_when="SELECT 1"))
    with pytest.raises(operate.OperatorError, match="SyntaxError"):  # one statement only
        backfill.plan(conn, bf_app.jobs["hourly"], spec(pause_when="SELECT true; DELETE FROM bf_stop"))
    assert scalar(url, "SELECT count(*) FROM bf_stop") == 1
    assert snapshot(url) == before
    out = cli("backfill", "hourly", "--from", iso(at(0)), "--to", iso(at(2)), "--reason", "r", "--yes",
              "--pause-when", writes, "--app", APP, url=url)
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert "--pause-when" in out.stderr and "nothing written" in out.stderr
    assert snapshot(url) == before


def test_completes_and_records_the_verify_outcome(url: str, conn: Any, db_roles: Any) -> None:
    # SQL check (hourly): passes when bf_done has one row per slot of the window and partition;
    # it runs as the condition role (runner/verification.py), which may read bf_done
    db_roles.apply(url)
    conn.execute(f"GRANT SELECT ON bf_done TO {db_roles.groups['condition']}")
    ok = create(conn, spec(start=0, end=2, concurrency=10))
    runs = backfill.run_once(conn, OWNER, bf_app.jobs, 10)
    assert len(runs) == 4
    for r in runs:
        conn.execute("INSERT INTO bf_done VALUES (%s, %s, %s, %s)", (r.slot, r.partition_key, r.id, r.fence))
    finish(conn, runs)
    assert backfill.run_once(conn, OWNER, bf_app.jobs, 10) == []
    plan_id = ok["backfill"]["id"]
    assert plan_row(conn, plan_id)["status"] == "completed"
    eventually(lambda: plan_row(conn, plan_id)["verify_status"], timeout=20)
    shown = ok_json(cli("backfill", "show", str(plan_id), "--json", url=url))
    assert (shown["status"], shown["verify_status"], shown["verified"]) == ("completed", "passed", True)
    assert [c["detail"] for c in shown["verify_detail"]["checks"]] == [
        "2 row(s) for partition a", "2 row(s) for partition b"]
    assert shown["verify_detail"]["window_start"] == iso(at(-1))
    assert shown["verify_detail"]["window_end"] == iso(at(1))
    # a missing row fails the check of its partition
    conn.execute("DELETE FROM bf_done WHERE partition_key = 'b' AND slot = %s", (at(1),))
    assert cli("backfill", "verify", str(plan_id), "--app", APP, "--yes", url=url).returncode == 2  # --reason
    again = ok_json(cli("backfill", "verify", str(plan_id), "--reason", "row deleted", "--app", APP, "--yes",
                        "--json", url=url))
    assert again["backfill"]["verify_status"] == "failed"
    assert rows(url, "SELECT action, reason, touched -> 'backfills' -> 0 -> 'after' FROM runner.requests"
                     " WHERE action = 'backfill_verify'") == [
        ("backfill_verify", "row deleted", {"verify_status": "failed"})]
    shown = ok_json(cli("backfill", "show", str(plan_id), "--json", url=url))
    assert (shown["verify_status"], shown["verified"]) == ("failed", False)
    assert [c["outcome"] for c in shown["verify_detail"]["checks"]] == ["passed", "failed"]
    text = cli("backfill", "show", str(plan_id), url=url)
    assert "NOT verified: failed ('b' failed: 1 row(s) for partition b)" in text.stdout
    # a callable check (checked): a string says what is wrong
    conn.execute("DELETE FROM bf_done")
    bad = create(conn, spec("checked", 100, 101))
    finish(conn, backfill.run_once(conn, OWNER, bf_app.jobs, 10))
    backfill.run_once(conn, OWNER, bf_app.jobs, 10)
    bad_id = bad["backfill"]["id"]
    eventually(lambda: plan_row(conn, bad_id)["verify_status"], timeout=20)
    row = plan_row(conn, bad_id)
    assert row["verify_status"] == "failed"
    assert row["verify_detail"]["checks"][0]["detail"].startswith("no rows in [")
    # a job with no check: completed, not verified
    none = create(conn, spec("flaky", 200, 201))
    finish(conn, backfill.run_once(conn, OWNER, bf_app.jobs, 10))
    backfill.run_once(conn, OWNER, bf_app.jobs, 10)
    assert plan_row(conn, none["backfill"]["id"])["verify_status"] == "not_configured"


@pytest.mark.parametrize(("value", "outcome", "detail"), [
    (True, "passed", None), (False, "failed", None), ("3 rows missing", "failed", "3 rows missing"),
    ((True, "42 rows"), "passed", "42 rows"), ((False, "sum differs"), "failed", "sum differs"),
    (1, "error", "verify returned int; expected bool, str or (bool, str)"),
])
def test_verify_callable_outcomes(value: Any, outcome: str, detail: str | None) -> None:
    assert backfill._outcome("p", value) == backfill.Check("p", outcome, detail)


def test_a_verify_check_that_raises_is_an_error(url: str, conn: Any, db_roles: Any) -> None:
    app = Runner()
    db_roles.apply(url)

    def broken(conn: Any, start: datetime, end: datetime, partition: str) -> bool:
        conn.execute("SELECT * FROM no_such_table")
        return True

    app.job("broken", every="1h", verify=broken)(lambda ctx: None)
    app.job("broken-sql", every="1h", verify="SELECT 'yes', 'no'")(lambda ctx: None)
    made = create(conn, spec("broken", 0, 1), app)
    out = backfill.verify(conn, made["backfill"]["id"], app.jobs["broken"])
    assert out["verify_status"] == "error"
    assert out["verify_detail"]["checks"][0]["detail"].startswith("UndefinedTable")
    made = create(conn, spec("broken-sql", 0, 1), app)
    out = backfill.verify(conn, made["backfill"]["id"], app.jobs["broken-sql"])
    assert out["verify_status"] == "error"
    assert "not a boolean" in out["verify_detail"]["checks"][0]["detail"]


# -- the operator's commands -------------------------------------------------------------------------


def test_list_show_pause_resume_cancel(url: str, conn: Any) -> None:
    made = ok_json(cli("backfill", "create", "hourly", "--from", iso(at(0)), "--to", iso(at(3)), "--reason",
                       "explicit create", "--yes", "--json", "--app", APP, url=url))
    plan_id = made["backfill"]["id"]
    listed = ok_json(cli("backfill", "list", "--json", url=url))
    assert [(p["id"], p["status"], p["queued"], p["expected_runs"]) for p in listed] == [(plan_id, "running", 6, 6)]
    # every change needs a reason: without one, usage error and nothing written
    before = snapshot(url)
    assert cli("backfill", "pause", str(plan_id), "--yes", url=url).returncode == 2
    assert cli("backfill", "pause", str(plan_id), "--reason", "r", url=url).returncode == 1  # no terminal
    assert snapshot(url) == before
    paused = ok_json(cli("backfill", "pause", str(plan_id), "--reason", "db busy", "--by", "carol", "--yes",
                         "--json", url=url))
    assert paused["plan"]["status"] == "paused"
    assert paused["plan"]["pause_reason"] == "paused by carol: db busy"
    assert backfill.run_once(conn, OWNER, bf_app.jobs, 10) == []
    assert cli("backfill", "pause", str(plan_id), "--reason", "again", "--yes", url=url).returncode == 1
    ok_json(cli("backfill", "resume", str(plan_id), "--reason", "quiet now", "--yes", "--json", url=url))
    running = backfill.run_once(conn, OWNER, bf_app.jobs, 10)
    assert len(running) == 1
    cancelled = ok_json(cli("backfill", "cancel", str(plan_id), "--reason", "wrong range", "--by", "carol",
                            "--yes", "--json", url=url))
    assert cancelled["runs_cancelled"] == 5 and cancelled["plan"]["status"] == "cancelled"
    statuses = rows(url, "SELECT status, count(*), min(status_reason) FROM runner.job_runs GROUP BY 1 ORDER BY 1")
    assert statuses == [("cancelled", 5, f"backfill {plan_id} cancelled by carol: wrong range"),
                        ("running", 1, f"backfill {plan_id}: explicit create")]
    req = rows(url, "SELECT action, who, reason, touched FROM runner.requests ORDER BY id")
    assert [(r[0], r[2]) for r in req] == [("backfill", "explicit create"), ("backfill_pause", "db busy"),
                                           ("backfill_resume", "quiet now"), ("backfill_cancel", "wrong range")]
    assert req[1][1] == req[3][1] == "carol" and "@" in req[2][1]  # --by, else user@host
    assert len(req[3][3]["runs"]) == 5 and req[3][3]["backfills"][0]["before"] == {"status": "running"}
    assert cli("backfill", "show", "999", url=url).stderr.startswith("runner: error: no backfill 999")
    assert cli("backfill", "list", "--status", "bogus", url=url).returncode == 2


def test_show_follow_ends_when_the_plan_does(url: str, conn: Any) -> None:
    made = create(conn, spec(start=0, end=1))
    backfill.cancel(conn, made["backfill"]["id"], "not needed", "dave")
    out = cli("backfill", "show", str(made["backfill"]["id"]), "--follow", url=url)
    assert out.returncode == 0, out.stderr
    assert "cancelled" in out.stdout


# -- real runners --------------------------------------------------------------------------------------


def test_runners_execute_a_plan_within_its_concurrency(url: str, tmp_path: Path, db_roles: Any) -> None:
    db_roles.apply(url)  # the SQL verify check runs as the condition role
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f"GRANT SELECT ON bf_done TO {db_roles.groups['condition']}")
    made = ok_json(cli("backfill", "hourly", "--from", iso(at(0)), "--to", iso(at(12)), "--reason", "replay",
                       "--concurrency", "3", "--yes", "--json", "--app", APP, url=url))
    plan_id, group = made["backfill"]["id"], made["backfill"]["replay_group_id"]
    env = {"BF_WORK_SECONDS": "0.2"}
    procs = [RunnerProcess(APP, url, "--poll-interval", "0.1", env=env, log=tmp_path / f"{i}.log") for i in range(2)]
    try:
        eventually(lambda: scalar(url, "SELECT status FROM runner.backfills WHERE id = %s", (plan_id,)) == "completed",
                   timeout=60)
        eventually(lambda: scalar(url, "SELECT verify_status FROM runner.backfills WHERE id = %s", (plan_id,)),
                   timeout=20)
    finally:
        for p in procs:
            assert p.terminate() == 0, p.output()
    assert 2 <= scalar(url, "SELECT peak FROM bf_gauge") <= 3
    got = rows(url, "SELECT trigger, status, replay_group_id::text, attempt, count(*) FROM runner.job_runs"
                    " WHERE job_name = 'hourly' AND schedule_slot < %s GROUP BY 1, 2, 3, 4", (at(12),))
    assert got == [("backfill", "succeeded", group, 1, 24)]
    # each slot's work committed exactly once, with the run's success
    assert rows(url, "SELECT count(*), count(DISTINCT (slot, partition_key)) FROM bf_done"
                     " WHERE slot < %s", (at(12),)) == [(24, 24)]
    assert scalar(url, "SELECT verify_status FROM runner.backfills WHERE id = %s", (plan_id,)) == "passed"


def test_rate_limit_spreads_the_starts(url: str, tmp_path: Path) -> None:
    rate, n = 4.0, 10
    made = ok_json(cli("backfill", "hourly", "--from", iso(at(0)), "--to", iso(at(n // 2)), "--reason", "slowly",
                       "--concurrency", "10", "--rate", str(rate), "--yes", "--json", "--app", APP, url=url))
    plan_id = made["backfill"]["id"]
    proc = RunnerProcess(APP, url, "--poll-interval", "0.05", env={"BF_WORK_SECONDS": "0.01"},
                         log=tmp_path / "r.log")
    try:
        eventually(lambda: scalar(url, "SELECT status FROM runner.backfills WHERE id = %s", (plan_id,)) == "completed",
                   timeout=60)
    finally:
        assert proc.terminate() == 0, proc.output()
    first, last, created = rows(url, """
        SELECT min(a.started_at), max(a.started_at), b.created_at
        FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id
        JOIN runner.backfills b ON b.replay_group_id = r.replay_group_id
        WHERE b.id = %s GROUP BY b.created_at""", (plan_id,))[0]
    # the bucket starts with one token and refills at `rate`: the n-th start is at least
    # (n - 1) / rate after the plan was made; from the first start, at most max(1, rate)
    # tokens could have piled up
    assert (last - created).total_seconds() >= (n - 1) / rate
    assert (last - first).total_seconds() >= (n - max(1.0, rate)) / rate
    assert (last - created).total_seconds() < (n - 1) / rate + 10  # and it does run at about that rate


def test_realtime_slots_keep_time_while_a_big_plan_runs(url: str, tmp_path: Path) -> None:
    made = ok_json(cli("backfill", "hourly", "--from", iso(at(0)), "--to", iso(at(400)), "--reason", "big",
                       "--concurrency", "6", "--yes", "--json", "--app", APP, url=url))
    plan_id = made["backfill"]["id"]
    proc = RunnerProcess(APP, url, "--poll-interval", "0.2", env={"BF_WORK_SECONDS": "0.02"},
                         log=tmp_path / "r.log")
    try:
        eventually(lambda: scalar(url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'hourly'"
                                       " AND status = 'succeeded'") >= 100, timeout=60)
        start = scalar(url, "SELECT now()")
        # a few realtime slots while the plan is still running
        eventually(lambda: scalar(url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'live'"
                                       " AND schedule_slot > %s", (start,)) >= 4, timeout=30)
        still = scalar(url, "SELECT status FROM runner.backfills WHERE id = %s", (plan_id,))
    finally:
        assert proc.terminate() == 0, proc.output()
    assert still == "running", "the plan ended too early for this test to mean anything"
    lags = [r[0] for r in rows(url, "SELECT extract(epoch FROM started_at - schedule_slot)::float8"
                                    " FROM runner.job_runs WHERE job_name = 'live' AND schedule_slot > %s", (start,))]
    assert max(lags) < 1.0, lags


def test_the_operator_role_can_backfill_but_not_forge_fences(url: str, conn: Any, db_roles: Any) -> None:
    db_roles.apply(url)
    operator = db_roles.url(url, "operator")
    make_run(conn, "hourly", at(0), "a", status="dead", attempt=3)
    made = ok_json(cli("backfill", "hourly", "--from", iso(at(0)), "--to", iso(at(2)), "--reason", "as on-call",
                       "--pause-when", "SELECT false", "--yes", "--json", "--app", APP, url=operator))
    plan_id = made["backfill"]["id"]
    assert (made["inserted"], made["requeued"]) == (3, 1)
    for verb in ("pause", "resume", "cancel"):
        out = cli("backfill", verb, str(plan_id), "--reason", verb, "--yes", url=operator)
        assert out.returncode == 0, out.stderr
    assert rows(url, "SELECT action, db_user FROM runner.requests ORDER BY id") == [
        (a, db_roles.users["operator"]) for a in ("backfill", "backfill_pause", "backfill_resume", "backfill_cancel")]
    with psycopg.connect(operator, autocommit=True) as c:
        for statement in ("INSERT INTO runner.job_runs (job_name, schedule_slot, business_date, window_start,"
                          " window_end, status, trigger, idempotency_key, fence) VALUES ('hourly', now(),"
                          " current_date, now(), now(), 'pending', 'backfill', 'k', 99)",
                          "UPDATE runner.backfills SET job_name = 'other'",
                          "UPDATE runner.backfills SET verify_status = 'passed'"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(statement)


# -- backfills against the clock and the ledger's coverage (issue 26) -----------------------------

DUE = "tests/apps/due.py:app"
SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)


def when(value: str) -> datetime:
    return datetime.fromisoformat(value)


def early_attempts(url: str) -> int:
    """Attempts that started before their run's slot instant."""
    return int(scalar(url, "SELECT count(*) FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id"
                           " WHERE a.started_at < r.schedule_slot"))


def test_a_backfill_reaching_past_now_is_clamped_and_no_slot_runs_before_its_time(url: str, tmp_path: Path) -> None:
    """Defect 1: `runner backfill --to <the future>` queued slots whose instant had not come;
    the runners ran them at once, and the live claim then found the slot taken."""
    now = scalar(url, "SELECT now()")
    out = cli("backfill", "ticks", "--from", iso(now - 20 * SECOND), "--to", iso(now + 30 * SECOND),
              "--reason", "replay the last minute", "--yes", "--json", "--app", DUE, url=url)
    after = scalar(url, "SELECT now()")
    assert out.returncode == 0, out.stderr
    # nothing queued for a slot that is not due
    assert scalar(url, "SELECT count(*) FROM runner.job_runs WHERE schedule_slot > %s", (after,)) == 0
    made = json.loads(out.stdout)
    # said in one line (stderr: stdout stays JSON), and recorded on the plan as clamped
    assert out.stderr.strip().count("\n") == 0 and "is after now: the range is clamped" in out.stderr
    assert made["clamped"] == out.stderr.strip()
    plan = made["backfill"]
    assert now <= when(plan["range_to"]) <= after
    # every 2 s over what was due: [now - 20 s, the CLI's clock), some 20 s (more on a slow machine)
    lo, hi = when(plan["range_from"]).timestamp(), when(plan["range_to"]).timestamp()
    assert made["expected_runs"] == len([t for t in range(int(lo) - 2, int(hi) + 2) if t % 2 == 0 and lo <= t < hi])
    assert made["expected_runs"] >= 10
    plan_id = plan["id"]
    proc = RunnerProcess(DUE, url, "--poll-interval", "0.1", log=tmp_path / "r.log")
    try:
        eventually(lambda: scalar(url, "SELECT status FROM runner.backfills WHERE id = %s", (plan_id,)) == "completed",
                   timeout=60)
        # the later slots run at their time, claimed live (trigger schedule), not by the plan
        eventually(lambda: scalar(url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'ticks'"
                                       " AND trigger = 'schedule' AND status = 'succeeded' AND schedule_slot > %s",
                                  (after,)) >= 3, timeout=30)
    finally:
        assert proc.terminate() == 0, proc.output()
    assert early_attempts(url) == 0
    assert scalar(url, "SELECT count(*) FROM runner.job_runs r JOIN runner.backfills b"
                       " ON b.replay_group_id = r.replay_group_id WHERE r.schedule_slot > b.range_to") == 0
    assert_ledger_clean(url)


def test_a_range_entirely_in_the_future_is_refused_in_one_line(url: str) -> None:
    now = scalar(url, "SELECT now()")
    before = snapshot(url)
    out = cli("backfill", "ticks", "--from", iso(now + MINUTE), "--to", iso(now + 2 * MINUTE), "--reason", "early",
              "--yes", "--app", DUE, url=url)
    assert out.returncode == 1
    assert out.stderr.strip().count("\n") == 0 and "no slot of the range is due yet" in out.stderr, out.stderr
    assert snapshot(url) == before


def test_the_database_refuses_a_plan_with_a_slot_not_yet_due(url: str, conn: Any) -> None:
    """runner.create_backfill_v1 itself (an older runner, or any caller): no range past now."""
    now = ledger.db_now(conn)
    slot = now + MINUTE
    with pytest.raises(psycopg.errors.RaiseException, match="reaches past now"):
        conn.execute(
            "SELECT * FROM runner.create_backfill_v1('ticks', %s, %s, NULL, 'bulk', 1, NULL, NULL, NULL, false,"
            " ARRAY[%s]::timestamptz[], ARRAY['']::text[], ARRAY[%s]::date[], ARRAY[%s]::timestamptz[],"
            " ARRAY[%s]::timestamptz[], ARRAY['k']::text[], 'me', 'early', NULL)",
            (now - MINUTE, slot + SECOND, slot, slot.date(), slot - 2 * SECOND, slot))
    assert scalar(url, "SELECT count(*) FROM runner.backfills") == 0
    assert scalar(url, "SELECT count(*) FROM runner.job_runs") == 0


def test_the_lane_and_start_attempts_never_start_a_slot_before_its_instant(url: str, conn: Any) -> None:
    made = create(conn, spec(start=0, end=2, partitions=("a",)))
    future = conn.execute("UPDATE runner.job_runs SET schedule_slot = now() + interval '1 hour'"
                          " WHERE schedule_slot = %s RETURNING id", (at(1),)).fetchone()[0]
    claimed = backfill.run_once(conn, OWNER, bf_app.jobs, 10)
    assert [r.slot for r in claimed] == [at(0)]
    finish(conn, claimed)
    assert backfill.run_once(conn, OWNER, bf_app.jobs, 10) == []
    assert conn.execute("SELECT count(*) FROM runner.start_attempts_v1(ARRAY[%s]::bigint[], ARRAY[NULL]::bigint[],"
                        " false, 'h', 1, gen_random_uuid(), 1)", (future,)).fetchone()[0] == 0
    assert scalar(url, "SELECT status FROM runner.job_runs WHERE id = %s", (future,)) == "pending"
    assert plan_row(conn, made["backfill"]["id"])["status"] == "running"  # its slot is still to come


def plant_coalesced(conn: Any, job: Any, slots: list[datetime]) -> int:
    """What the misfire duty writes for coalesce: the last slot's run covers the others
    (succeeded, with its attempt); returns the covering run's id."""
    cover = slots[-1]
    ids = []
    for slot in slots:
        start, end = job.window_for(slot)
        covering = slot == cover
        ids.append(conn.execute(
            "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date, window_start,"
            " window_end, status, trigger, attempt, fence, idempotency_key, status_reason, coalesced_into_slot,"
            " started_at, finished_at) VALUES (%s, %s, '', %s, %s, %s, %s, 'catch_up', %s, %s, %s, %s, %s,"
            " CASE WHEN %s THEN now() END, now()) RETURNING id",
            (job.name, slot, slot.date(), start, end, "succeeded" if covering else "coalesced",
             int(covering), int(covering), f"{job.name}|{slot.isoformat()}",
             None if covering else f"coalesced into the run of {cover.isoformat()}",
             None if covering else cover, covering)).fetchone()[0])
    conn.execute("INSERT INTO runner.attempts (run_id, attempt, fence, trigger, owner_host, owner_pid,"
                 " owner_instance, lock_key, status, started_at, heartbeat_at, finished_at)"
                 " VALUES (%s, 1, 1, 'catch_up', 'h', 1, gen_random_uuid(), 1, 'succeeded', now(), now(), now())",
                 (ids[-1],))
    return int(ids[-1])


def test_a_forced_backfill_cancelled_before_it_starts_leaves_the_covered_slots_covered(url: str, conn: Any) -> None:
    """Defect 6: the covering run of 5 coalesced slots, requeued by `backfill --force` and
    cancelled before it started, became cancelled: the 5 slots were covered by nothing, and
    the gap scan did not list them."""
    from tests.apps.due import app as due_app

    now = ledger.db_now(conn)
    job = due_app.jobs["coal"]
    slots = job.schedule.slots_between(now - 6 * MINUTE, now)[-6:]
    tracked = Runner()
    tracked.job("coal", every="1m", misfire="coalesce", track_from=slots[0])(lambda ctx: None)
    ledger.sync_jobs(conn, list(tracked.jobs.values()))
    cover = plant_coalesced(conn, job, slots)
    assert cli("check", url=url).returncode == 0
    made = ok_json(cli("backfill", "coal", "--from", iso(slots[-1]), "--to", iso(slots[-1] + MINUTE), "--force",
                       "--reason", "run the catch-up again", "--yes", "--json", "--app", DUE, url=url))
    assert [made["inserted"], made["requeued"]] == [0, 1]
    out = ok_json(cli("backfill", "cancel", str(made["backfill"]["id"]), "--reason", "not now", "--yes", "--json",
                      url=url))
    assert out["plan"]["status"] == "cancelled"
    # the success the plan displaced is back, as it was
    assert rows(url, "SELECT status, trigger, attempt, fence, replay_group_id FROM runner.job_runs WHERE id = %s",
                (cover,)) == [("succeeded", "catch_up", 1, 1, None)]
    assert rows(url, "SELECT status, count(*) FROM runner.job_runs GROUP BY 1 ORDER BY 1") == [
        ("coalesced", 5), ("succeeded", 1)]
    restored = scalar(url, "SELECT touched -> 'runs_restored' FROM runner.requests WHERE action = 'backfill_cancel'")
    assert restored == [{"run_id": cover, "before": {"status": "pending"}, "after": {"status": "succeeded"}}]
    assert scalar(url, "SELECT count(*) FROM runner.missing_slots_v1(now()) WHERE schedule_slot <= %s",
                  (slots[-1],)) == 0
    check = cli("check", url=url)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_forced_run_that_failed_then_cancelled_is_dead_and_listed_with_what_it_covered(
        url: str, conn: Any) -> None:
    """Defect 6, the other order: the plan did start the covering run, its attempt failed,
    then the plan was cancelled. The success is gone (the run was run over): the run is dead,
    not cancelled, and the gap scan lists it and the 5 slots coalesced into it."""
    from tests.apps.due import app as due_app

    now = ledger.db_now(conn)
    job = due_app.jobs["coal"]
    slots = job.schedule.slots_between(now - 6 * MINUTE, now)[-6:]
    tracked = Runner()
    tracked.job("coal", every="1m", misfire="coalesce", track_from=slots[0])(lambda ctx: None)
    ledger.sync_jobs(conn, list(tracked.jobs.values()))
    cover = plant_coalesced(conn, job, slots)
    made = ok_json(cli("backfill", "coal", "--from", iso(slots[-1]), "--to", iso(slots[-1] + SECOND), "--force",
                       "--reason", "run the catch-up again", "--yes", "--json", "--app", DUE, url=url))
    [claimed] = backfill.run_once(conn, OWNER, due_app.jobs, 10)
    assert claimed.id == cover
    finish(conn, [claimed], "failed")
    ok_json(cli("backfill", "cancel", str(made["backfill"]["id"]), "--reason", "not now", "--yes", "--json", url=url))
    assert rows(url, "SELECT status, fence FROM runner.job_runs WHERE id = %s", (cover,)) == [("dead", 2)]
    listed = rows(url, "SELECT schedule_slot, state FROM runner.missing_slots_v1(now()) WHERE schedule_slot <= %s"
                       " ORDER BY 1", (slots[-1],))
    assert listed == [(slot, "dead") for slot in slots]
    check = cli("check", url=url)
    assert check.returncode == 0, check.stdout + check.stderr


def test_an_overlapping_plan_completes_only_when_every_run_of_its_range_is_done(url: str, tmp_path: Path) -> None:
    """Defect 7: plan 2 left 15 runs of its range to plan 1; plan 1 was cancelled (and those
    15 with it); plan 2 said completed, 15/15 done, over a range of 30."""
    first = ok_json(cli("backfill", "hourly", "--from", iso(at(0)), "--to", iso(at(15)), "--partition", "a",
                        "--reason", "first", "--yes", "--json", "--app", APP, url=url))
    second = ok_json(cli("backfill", "hourly", "--from", iso(at(0)), "--to", iso(at(30)), "--partition", "a",
                         "--reason", "second", "--yes", "--json", "--app", APP, url=url))
    assert (second["inserted"], second["left_alone"], second["expected_runs"]) == (15, 15, 30)
    cancelled = ok_json(cli("backfill", "cancel", str(first["backfill"]["id"]), "--reason", "superseded", "--yes",
                            "--json", url=url))
    assert cancelled["runs_cancelled"] == 15
    plan_id = second["backfill"]["id"]
    proc = RunnerProcess(APP, url, "--poll-interval", "0.1", env={"BF_WORK_SECONDS": "0.01"},
                         log=tmp_path / "r.log")
    try:
        eventually(lambda: scalar(url, "SELECT status FROM runner.backfills WHERE id = %s", (plan_id,)) == "completed",
                   timeout=60)
    finally:
        assert proc.terminate() == 0, proc.output()
    shown = ok_json(cli("backfill", "show", str(plan_id), "--json", url=url))
    assert (shown["expected_runs"], shown["runs"], shown["done"]) == (30, 30, 30)
    assert shown["runs_by_status"] == {"succeeded": 30}
    assert rows(url, "SELECT status, count(*) FROM runner.job_runs WHERE job_name = 'hourly' AND partition_key = 'a'"
                     " AND schedule_slot >= %s AND schedule_slot < %s GROUP BY 1", (at(0), at(30))) == [("succeeded", 30)]
    assert_ledger_clean(url)


def test_a_plan_whose_runs_died_pauses_instead_of_completing(url: str, conn: Any) -> None:
    """`completed` means every run of the range is done: a dead run (within max_failures)
    pauses the plan, saying so; rerun and resume, and it completes."""
    made = create(conn, spec("flaky", 0, 2, max_failures=5, concurrency=2))
    plan_id = made["backfill"]["id"]
    claimed = backfill.run_once(conn, OWNER, bf_app.jobs, 10)
    finish(conn, [r for r in claimed if r.slot == at(0)])
    finish(conn, [r for r in claimed if r.slot == at(1)], "dead")
    assert backfill.run_once(conn, OWNER, bf_app.jobs, 10) == []
    row = plan_row(conn, plan_id)
    assert row["status"] == "paused"
    assert row["pause_reason"].startswith("its runs are finished but 1 run(s) of its range are not done (1 dead)")
    dead = scalar(url, "SELECT id FROM runner.job_runs WHERE status = 'dead'")
    operate.rerun(conn, operate.plan_rerun(conn, "flaky", at(1)), "try again", "tester")
    backfill.resume(conn, plan_id, "rerun done", "tester")
    again = backfill.run_once(conn, OWNER, bf_app.jobs, 10)
    assert [r.id for r in again] == [dead]
    finish(conn, again)
    backfill.run_once(conn, OWNER, bf_app.jobs, 10)
    assert plan_row(conn, plan_id)["status"] == "completed"


def test_a_failed_backfill_run_before_track_from_is_listed_by_the_gap_scan(url: str, conn: Any) -> None:
    """Suspicion: a backfill of history before the job was registered whose run dies was
    outside the gap scan (bounded by track_from) and the audit (same bound): invisible."""
    ledger.sync_jobs(conn, [bf_app.jobs["flaky"]])  # tracked from now
    made = create(conn, spec("flaky", 0, 1))
    claimed = backfill.run_once(conn, OWNER, bf_app.jobs, 10)
    finish(conn, claimed, "dead")
    [run_id] = [r.id for r in claimed]
    listed = rows(url, "SELECT run_id, state FROM runner.missing_slots_v1(now()) WHERE job_name = 'flaky'")
    assert listed == [(run_id, "dead")]
    assert made["backfill"]["range_to"] < ledger.db_now(conn)
    assert_ledger_clean(url)


def _blocked_on_a_lock(url: str, pid: int) -> bool:
    return bool(scalar(url, "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)))


def test_a_forced_backfill_racing_a_prune_pass_still_queues_the_slot(db_url: str) -> None:
    """Suspicion: `backfill --force` and a prune pass on the same slot, either first: the slot
    ends with a run of the plan (inserted when the prune deleted the old one first, queued
    again when the plan locked it first), never neither; and the gap scan lists it."""
    import threading

    from psycopg.types.json import Jsonb

    from tests.test_prune import POLICY, H, seed

    hourly = Runner()
    for name in ("j", "k"):
        hourly.job(name, every="1h")(lambda ctx: None)
    job = hourly.jobs["j"]
    with psycopg.connect(db_url, autocommit=True) as a, psycopg.connect(db_url, autocommit=True) as b:
        for c in (a, b):
            c.execute("SET TIME ZONE 'UTC'")
        start = seed(a)["start"]
        seed(a, "k", policy=None)  # kept whole until the second leg
        made: dict[str, Any] = {}

        # the prune pass first: it has deleted the slot's run, not committed, when the plan comes
        first = start + 2 * H
        with a.transaction():
            assert a.execute("SELECT count(*) FROM runner.prune_v1(10000)").fetchone()[0] > 0
            planned = backfill.plan(b, job, backfill.Spec("j", first, first + H, force=True))
            assert planned.states == {"succeeded": 1}  # the deletion is not committed yet
            worker = threading.Thread(target=lambda: made.update(one=backfill.create(b, planned, "race", "t")))
            worker.start()
            eventually(lambda: _blocked_on_a_lock(db_url, b.info.backend_pid), message="the plan waits for the prune")
        worker.join(30)
        assert (made["one"]["inserted"], made["one"]["requeued"]) == (1, [])
        group = made["one"]["backfill"]["replay_group_id"]
        assert rows(db_url, "SELECT status, trigger, replay_group_id FROM runner.job_runs"
                            " WHERE job_name = 'j' AND schedule_slot = %s", (first,)) == [("pending", "backfill", group)]

        # the plan first: it has queued the slot's run again, not committed, when the prune comes
        second = start + 5 * H
        conn_id = scalar(db_url, "SELECT id FROM runner.job_runs WHERE job_name = 'k' AND schedule_slot = %s",
                         (second,))
        a.execute("UPDATE runner.jobs SET options = %s WHERE job_name = 'k'", (Jsonb({"retention": POLICY}),))
        pruned: list[Any] = []
        with b.transaction():
            made["two"] = backfill.create(b, backfill.plan(b, hourly.jobs["k"], backfill.Spec(
                "k", second, second + H, force=True)), "race", "t")
            worker = threading.Thread(target=lambda: pruned.extend(
                a.execute("SELECT run_id FROM runner.prune_v1(10000)").fetchall()))
            worker.start()
            eventually(lambda: not worker.is_alive() or _blocked_on_a_lock(db_url, a.info.backend_pid),
                       message="the prune passes or waits")
        worker.join(30)
        assert [r["id"] for r in made["two"]["requeued"]] == [conn_id]
        assert (conn_id,) not in pruned
        group = made["two"]["backfill"]["replay_group_id"]
        assert len(pruned) > 0  # the others of k went
        assert rows(db_url, "SELECT id, status, replay_group_id FROM runner.job_runs"
                            " WHERE job_name = 'k' AND schedule_slot = %s", (second,)) == [(conn_id, "pending", group)]
        listed = {r[0] for r in rows(db_url, "SELECT run_id FROM runner.missing_slots_v1(now())")}
        assert {conn_id, *[r[0] for r in rows(db_url, "SELECT id FROM runner.job_runs WHERE job_name = 'j'"
                                               " AND schedule_slot = %s", (first,))]} <= listed


def test_a_backfill_across_a_schedule_change_runs_the_slots_the_history_expects(url: str, conn: Any) -> None:
    """Where the ledger tracks the job, a backfill plans the slots its schedule history
    expects (runner.expected_slots_v1), not the current definition's: the job ran every
    30 minutes before it became hourly, so [T0, T0+4h) owes 30-minute slots until T0+2h; before
    track_from the current definition's slots. Before, the plan ran hourly slots there and,
    once completed, the gap scan still listed the half hours nobody ran."""
    conn.execute("INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, timezone, track_from,"
                 " first_registered_at, synced_at, max_attempts, version, options, partitions)"
                 " VALUES ('hourly', 'every', '1 hour', 'UTC', %s, %s, %s, 2, 'v', '{}', '{a,b}')",
                 (at(0), at(0), at(0)))
    conn.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval, timezone,"
                 " partitions) VALUES ('hourly', %s, 'every', '30 minutes', 'UTC', '{a,b}'),"
                 " ('hourly', %s, 'every', '1 hour', 'UTC', '{a,b}')", (at(0), at(2)))
    planned = backfill.plan(conn, bf_app.jobs["hourly"], spec(start=-2, end=4))
    slots = sorted(set(planned.expected.slots))
    assert slots == [at(-2), at(-1), *(at(h / 2) for h in range(0, 5)), at(3)]
    created = create(conn, spec(start=-2, end=4))
    assert created["backfill"]["expected_runs"] == 2 * len(slots)
    # every owed slot of the range has a run now: the gap scan lists none of them as never started
    assert scalar(url, "SELECT count(*) FROM runner.missing_slots WHERE job_name = 'hourly'"
                       " AND state = 'never_started' AND schedule_slot < %s", (at(4),)) == 0


def test_a_backfill_across_a_partition_change_runs_the_partitions_each_slot_had(url: str, conn: Any) -> None:
    """Issue 26 (long model tier, seed 1916206567 example 6): the job had partition a alone
    until T0+2h, then a and b. A backfill of [T0, T0+4h) without --partition plans each slot
    with the partitions its schedule history expects there: a before T0+2h, a and b after.
    Before, the current definition's a and b ran at every slot: runs of b at slots nobody
    expected b at. The plan's partitions are the ones it planned, so it adopts and forces
    the runs of each."""
    conn.execute("INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, timezone, track_from,"
                 " first_registered_at, synced_at, max_attempts, version, options, partitions)"
                 " VALUES ('hourly', 'every', '1 hour', 'UTC', %s, %s, %s, 2, 'v', '{}', '{a,b}')",
                 (at(0), at(0), at(0)))
    conn.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval, timezone,"
                 " partitions) VALUES ('hourly', %s, 'every', '1 hour', 'UTC', '{a}'),"
                 " ('hourly', %s, 'every', '1 hour', 'UTC', '{a,b}')", (at(0), at(2)))
    planned = backfill.plan(conn, bf_app.jobs["hourly"], spec(start=0, end=4))
    assert sorted(zip(planned.expected.slots, planned.expected.partition_keys, strict=True)) == [
        (at(0), "a"), (at(1), "a"), (at(2), "a"), (at(2), "b"), (at(3), "a"), (at(3), "b")]
    created = create(conn, spec(start=0, end=4))
    assert created["backfill"]["expected_runs"] == 6
    assert scalar(url, "SELECT partitions FROM runner.backfills") == ["a", "b"]
    assert scalar(url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'hourly' AND partition_key = 'b'"
                       " AND schedule_slot < %s", (at(2),)) == 0
    assert scalar(url, "SELECT count(*) FROM runner.missing_slots WHERE job_name = 'hourly'"
                       " AND state = 'never_started' AND schedule_slot < %s", (at(4),)) == 0


def test_a_backfill_of_a_job_whose_partitions_are_all_gone_is_one_line(url: str, conn: Any) -> None:
    """Long model tier (seed 1336258255, example 18): a dynamic job whose partitions callable
    now returns none, backfilled over a range reaching past now, raised an IndexError
    traceback from the clamping message. Now one line, nothing written."""
    app = Runner()

    @app.job("emptied", every="1h", partitions=lambda slot: [])
    def emptied(ctx: Any) -> None:  # pragma: no cover - never runs
        raise AssertionError("no partition, no run")

    s = backfill.Spec(job_name="emptied", range_from=datetime.now(UTC) - timedelta(hours=3),
                      range_to=datetime.now(UTC) + timedelta(hours=1))
    with pytest.raises(operate.OperatorError, match="has no partition at any slot"):
        backfill.plan(conn, app.jobs["emptied"], s)
    assert scalar(url, "SELECT count(*) FROM runner.backfills") == 0
