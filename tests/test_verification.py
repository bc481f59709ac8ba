"""Verification kinds (runner/verification.py): declared on the job, checked at registration,
evaluated when a plan completes (by the real ``runner start`` process that completed it),
recorded kind by kind on the plan, shown by ``runner backfill show`` and ``runner status``;
their SQL runs as the condition role, read-only, timed, on a connection of its own."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner import JobDefinitionError, Runner
from runner.actions import backfill
from runner.verification import checksum, count, positional, residual, sample_keys
from tests.apps.verified import app as vf_app
from tests.support import RunnerProcess, eventually, rows, run_cli, scalar

APP = "tests/apps/verified.py:app"
T0 = datetime(2026, 3, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture
def url(db_url: str, db_roles: Any) -> str:
    """A fresh database with vf_src (18 rows over [T0, T0 + 3h), three with a negative
    amount, and one later), the jobs' output table, and a table nobody granted."""
    db_roles.apply(db_url)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE vf_src (id int PRIMARY KEY, at timestamptz NOT NULL, amount numeric NOT NULL)")
        c.execute("INSERT INTO vf_src SELECT i, %s + i * interval '10 minutes', (i - 3) * 1.25"
                  " FROM generate_series(0, 17) i", (T0,))
        c.execute("INSERT INTO vf_src VALUES (100, %s, 7)", (T0 + 5 * HOUR,))
        c.execute("CREATE TABLE vf_report (src_id int, at timestamptz, amount numeric, job text)")
        c.execute("CREATE TABLE vf_secret (x int)")
        c.execute("INSERT INTO vf_secret VALUES (1)")
        c.execute(f"GRANT SELECT ON vf_src, vf_report TO {db_roles.groups['condition']}")
    return db_url


def create_plan(url: str, job: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        spec = backfill.Spec(job_name=job, range_from=T0 + HOUR, range_to=T0 + 4 * HOUR, concurrency=3)
        made = backfill.create(conn, backfill.plan(conn, vf_app.jobs[job], spec), "verify it", "tester")
        return int(made["backfill"]["id"])


def verified(url: str, plan_id: int) -> dict[str, Any]:
    """The plan once its verification is recorded."""
    def recorded() -> tuple[str, Any] | None:
        found = rows(url, "SELECT verify_status, verify_detail FROM runner.backfills WHERE id = %s", (plan_id,))
        return found[0] if found and found[0][0] is not None else None
    status, detail = eventually(recorded, timeout=60)
    return {"status": status, **detail}


def kinds(detail: dict[str, Any]) -> dict[str, tuple[str, Any, Any]]:
    return {k["name"]: (k["outcome"], k["expected"], k["observed"]) for k in detail["kinds"]}


# -- declarations ----------------------------------------------------------------------------------


def declare(**kw: Any) -> Any:
    app = Runner()
    app.job("j", every="1h", **kw)(lambda ctx: None)
    return app.jobs["j"]


GOOD_COUNT = count("SELECT count(*) FROM t WHERE at >= %(window_start)s", expect=3)
GOOD_RESIDUAL = residual("SELECT id FROM t WHERE done IS NULL AND part = %(partition)s")


@pytest.mark.parametrize(("kw", "message"), [
    ({"verify": [GOOD_COUNT]}, "1 kind(s) declared but min_passing is 2 (the default: a backfill is "
                               "verified by at least two kinds)"),
    ({"verify": [GOOD_COUNT, GOOD_RESIDUAL], "min_passing": 3}, "2 kind(s) declared but min_passing is 3"),
    ({"verify": [GOOD_COUNT, GOOD_RESIDUAL], "min_passing": 0}, "min_passing must be an integer >= 1"),
    ({"verify": [GOOD_COUNT, "SELECT true"]}, "'SELECT true' is not a verification kind"),
    ({"verify": []}, "give a list of kinds"),
    ({"verify": [GOOD_COUNT, count("SELECT 1", expect=1)]}, "two kinds named 'count': give each a name="),
    ({"verify": [GOOD_COUNT, residual("SELECT 1 WHERE x = %(window)s")]},
     "residual: the query: unknown parameter %(window)s"),
    ({"verify": [GOOD_COUNT, residual("SELECT 1 WHERE name LIKE 'a%'")]},
     "write %% for a literal %"),
    ({"verify": [GOOD_COUNT, residual("   ")]}, "residual: the query is an empty query"),
    ({"verify": [GOOD_COUNT, residual(42)]}, "must be a SQL string or a callable, got int"),  # type: ignore[arg-type]
    ({"verify": [count("SELECT 1", expect=True), GOOD_RESIDUAL]}, "expect must be an integer"),
    ({"verify": [count("SELECT 1", expect=1, tolerance=-1), GOOD_RESIDUAL]}, "tolerance must be an integer >= 0"),
    ({"verify": [checksum("SELECT 1", expect=None), GOOD_RESIDUAL]}, "checksum: expect is required"),
    ({"verify": [sample_keys("SELECT 1", present=None), GOOD_RESIDUAL]},  # type: ignore[arg-type]
     "sample_keys: present is required"),
    ({"verify": [sample_keys("SELECT 1", present="SELECT 1", size=0), GOOD_RESIDUAL]}, "size must be"),
    ({"verify": [GOOD_COUNT, residual("SELECT 1", timeout=0)]}, "timeout must be a number of seconds"),
    ({"verify": [GOOD_COUNT, residual("SELECT %(keys)s")]}, "unknown parameter %(keys)s"),
    ({"verify": "SELECT true", "min_passing": 1}, "min_passing: applies to a list of verification kinds"),
    ({"verify": "SELECT 100% = 1"}, "write %% for a literal %"),
])
def test_declarations_are_checked_at_registration(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(JobDefinitionError) as caught:
        declare(**kw)
    text = str(caught.value)
    assert text.startswith("job 'j': ") and message in text and "\n" not in text, text


def test_a_good_declaration_is_kept_ready_to_run() -> None:
    job = declare(verify=[GOOD_COUNT, GOOD_RESIDUAL,
                          sample_keys("SELECT id FROM t", present="SELECT id FROM u WHERE id = ANY(%(keys)s)")])
    assert [k.kind for k in job.verify] == ["count", "residual", "sample_keys"]
    assert job.min_passing == 2
    assert job.verify[0].source.positional == "SELECT count(*) FROM t WHERE at >= $1"
    assert declare(verify=GOOD_RESIDUAL, min_passing=1).min_passing == 1
    assert positional("SELECT 1 WHERE a LIKE 'x%%' AND p = %(partition)s AND e < %(window_end)s",
                      ("window_end", "partition")) == "SELECT 1 WHERE a LIKE 'x%' AND p = $3 AND e < $2"


# -- real runners --------------------------------------------------------------------------------------


def test_runners_verify_plans_by_their_kinds(url: str, tmp_path: Path) -> None:
    plans = {job: create_plan(url, job) for job in ("good", "lossy", "lenient", "raising")}
    proc = RunnerProcess(APP, url, "--poll-interval", "0.1", log=tmp_path / "runner.log")
    try:
        results = {job: verified(url, plan_id) for job, plan_id in plans.items()}
        # the live job kept running through every verification (a raising verifier included)
        eventually(lambda: scalar(url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'live'"
                                       " AND status = 'succeeded'") >= 2, timeout=30)
        assert proc.proc.poll() is None, proc.output()
    finally:
        assert proc.terminate() == 0, proc.output()
    # every run of every plan succeeded
    assert rows(url, "SELECT DISTINCT status FROM runner.job_runs WHERE trigger = 'backfill'") == [("succeeded",)]
    # right results: the four kinds pass (the window is [T0, T0 + 3h): 18 source rows)
    good = results["good"]
    assert (good["status"], good["passing"], good["min_passing"]) == ("passed", 4, 2)
    assert kinds(good) == {"count": ("passed", 18, 18), "checksum": ("passed", "123.75", "123.75"),
                           "sample_keys": ("passed", 5, 5), "residual": ("passed", 0, 0)}
    assert good["window_start"] == T0.isoformat() and good["window_end"] == (T0 + 3 * HOUR).isoformat()
    # every run succeeded and the count of work done agrees, yet three rows were never copied
    lossy = results["lossy"]
    assert (lossy["status"], lossy["passing"], lossy["min_passing"]) == ("failed", 1, 2)
    assert kinds(lossy) == {"runs": ("passed", 3, 3), "residual": ("failed", 0, 3)}
    residual_kind = next(k for k in lossy["kinds"] if k["name"] == "residual")
    assert residual_kind["detail"].startswith('3 row(s) left unprocessed, e.g. [0, "-3.75"]; [1, "-2.50"]')
    # the same outcome with min_passing=1 passes: the minimum is what decides
    lenient = results["lenient"]
    assert (lenient["status"], lenient["passing"], lenient["min_passing"]) == ("passed", 1, 1)
    assert kinds(lenient) == {"runs": ("passed", 3, 3), "residual": ("failed", 0, 3)}
    # a raising verifier is a kind that did not pass, with its error: never a pass
    raising = results["raising"]
    assert (raising["status"], raising["passing"]) == ("error", 1)
    broken = next(k for k in raising["kinds"] if k["name"] == "broken")
    assert (broken["passed"], broken["outcome"], broken["detail"]) == (
        False, "error", "RuntimeError: the verifier itself is broken")
    # shown: runner backfill show (text and JSON) and runner status (its backfills table, JSON)
    shown = run_cli("backfill", "show", str(plans["lossy"]), url=url)
    assert shown.returncode == 0, shown.stderr
    assert ("NOT verified: failed (1 of 2 kinds passed, at least 2 required; residual failed: 3 row(s) "
            "left unprocessed") in shown.stdout
    assert "verification kinds" in shown.stdout and "runs" in shown.stdout
    shown = json.loads(run_cli("backfill", "show", str(plans["good"]), "--json", url=url).stdout)
    assert shown["verified"] is True and [k["kind"] for k in shown["verify_detail"]["kinds"]] == [
        "count", "checksum", "sample_keys", "residual"]
    status = run_cli("status", "--json", url=url)
    assert status.returncode == 0, status.stderr
    by_plan = {b["id"]: b for b in json.loads(status.stdout)["backfills"]}
    assert {job: (by_plan[p]["verify_status"], by_plan[p]["verify_passing"], by_plan[p]["verify_min_passing"])
            for job, p in plans.items()} == {
        "good": ("passed", 4, 2), "lossy": ("failed", 1, 2), "lenient": ("passed", 1, 1),
        "raising": ("error", 1, 2)}
    text = run_cli("status", url=url).stdout
    assert "failed: 1/2 kinds passed (min 2); not passed: residual" in text
    # the data fixed, `runner backfill verify` runs the kinds again (as the operator would)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO vf_report SELECT id, at, amount, 'lossy' FROM vf_src WHERE amount < 0")
    again = run_cli("backfill", "verify", str(plans["lossy"]), "--reason", "rows fixed", "--app", APP, "--yes",
                    "--json", url=url)
    assert again.returncode == 0, again.stderr
    redone = json.loads(again.stdout)["backfill"]
    assert (redone["verify_status"], redone["verify_detail"]["passing"]) == ("passed", 2)
    # the plan view, from psql
    assert rows(url, "SELECT job_name, done, remaining, verify_status FROM runner.backfill_plans"
                     " WHERE job_name = 'good'") == [("good", 3, 0, "passed")]


def test_hostile_verification_sql_is_refused_or_timed_out_without_harm(url: str, tmp_path: Path) -> None:
    plan_id = create_plan(url, "hostile")
    proc = RunnerProcess(APP, url, "--poll-interval", "0.1", log=tmp_path / "runner.log")
    try:
        outcome = verified(url, plan_id)
        assert proc.proc.poll() is None, proc.output()
        # nothing of the verification's stays: no session, no advisory lock
        eventually(lambda: scalar(url, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                       " AND application_name = 'runner-verify-sql'") == 0, timeout=10)
        assert scalar(url, "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
                           " WHERE d.datname = current_database() AND l.locktype = 'advisory'"
                           " AND l.objid = 4242") == 0
    finally:
        assert proc.terminate() == 0, proc.output()
    assert (outcome["status"], outcome["passing"]) == ("error", 0)
    details = {k["name"]: k["detail"] for k in outcome["kinds"]}
    assert all(not k["passed"] and k["outcome"] == "error" for k in outcome["kinds"]), outcome["kinds"]
    assert "read-only transaction" in details["delete"]
    assert "cannot open UPDATE query as cursor" in details["update"] or "read-only" in details["update"]
    assert details["slow"] == "QueryCanceled: canceling statement due to statement timeout"
    assert details["lock"].startswith("the query took 1 advisory lock(s) (released)")
    assert details["secret"].startswith("InsufficientPrivilege: permission denied for table vf_secret")
    assert "permission denied" in details["terminate"] or "must be a" in details["terminate"], details
    # the output the plan wrote is whole: 18 rows, their amounts untouched
    assert rows(url, "SELECT count(*), sum(amount) FROM vf_report WHERE job = 'hostile'") == [(18, 123.75)]
    assert scalar(url, "SELECT count(*) FROM vf_secret") == 1


def test_verification_sql_before_roles_sql_is_an_error_saying_so(db_url: str) -> None:
    """Without sql/roles.sql, runner.verify_query_v1 belongs to the schema owner and refuses:
    SQL kinds are errors naming the fix; the Python kind still runs."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        conn.execute("CREATE TABLE vf_src (id int PRIMARY KEY, at timestamptz NOT NULL, amount numeric NOT NULL)")
        conn.execute("CREATE TABLE vf_report (src_id int, at timestamptz, amount numeric, job text)")
        plan_id = create_plan(db_url, "lossy")
        status, detail = backfill.run_checks(conn, plan_id, vf_app.jobs["lossy"])
    assert status == "failed"  # a kind failed on the data (no run succeeded yet), the other could not run
    by_name = {k["name"]: k for k in detail["kinds"]}
    assert (by_name["runs"]["outcome"], by_name["runs"]["observed"]) == ("failed", 0)  # Python: it ran
    assert by_name["residual"]["outcome"] == "error"
    assert "apply sql/roles.sql" in by_name["residual"]["detail"]


def test_a_python_kind_that_hangs_is_an_error_saying_timeout_and_the_runner_goes_on(
        url: str, tmp_path: Path) -> None:
    """A Python kind blocks 30 s against its 0.5 s limit: the plan is verified anyway (the
    other kind passed, min_passing 1), the hanging kind recorded as a timeout, the live job
    runs on, and no session of the abandoned call stays in its transaction."""
    plan_id = create_plan(url, "hanging")
    proc = RunnerProcess(APP, url, "--poll-interval", "0.1", log=tmp_path / "runner.log")
    try:
        outcome = verified(url, plan_id)
        # the abandoned call's session idles in its transaction: the server ends it
        eventually(lambda: scalar(url, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                       " AND application_name = 'runner-verify-python'") == 0, timeout=10,
                   message="no session of the Python kinds left")
        before = scalar(url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'live' AND status = 'succeeded'")
        eventually(lambda: scalar(url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'live'"
                                       " AND status = 'succeeded'") > before, timeout=15)
        assert proc.proc.poll() is None, proc.output()
    finally:
        assert proc.terminate() == 0, proc.output()
    assert (outcome["status"], outcome["passing"], outcome["min_passing"]) == ("passed", 1, 1)
    by_name = {k["name"]: k for k in outcome["kinds"]}
    assert (by_name["slots"]["outcome"], by_name["slots"]["observed"]) == ("passed", 3)
    assert (by_name["hangs"]["passed"], by_name["hangs"]["outcome"]) == (False, "error")
    assert by_name["hangs"]["detail"] == ("timeout: the Python callable hangs did not return within 0.5s "
                                         "(its wall-clock limit); abandoned")


def test_an_abandoned_python_call_closes_its_connection_when_it_returns(url: str) -> None:
    """In process: the call blocks on an event past its 0.3 s limit (a timeout, recorded at
    once), then is let go: its thread closes the abandoned connection."""
    import threading

    from runner import verification

    gate = threading.Event()

    def blocked(conn: Any, start: datetime, end: datetime, partition: str) -> int:
        gate.wait(20)
        return 3

    def fine(conn: Any, start: datetime, end: datetime, partition: str) -> int:
        return int(conn.execute("SELECT 3").fetchone()[0])

    kinds_ = verification.check([count(blocked, expect=3, name="blocked", timeout=0.3),
                                 count(fine, expect=3, name="fine")], 1)[0]
    with psycopg.connect(url, autocommit=True) as conn:
        status, detail = verification.run(conn, 1, kinds_, 1, T0, T0 + HOUR, [""])
        assert status == "passed"
        assert {k["name"]: k["outcome"] for k in detail["kinds"]} == {"blocked": "error", "fine": "passed"}
        assert detail["kinds"][0]["detail"].startswith("timeout: the Python callable")
        gate.set()
        eventually(lambda: scalar(url, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                       " AND application_name = 'runner-verify-python'") == 0, timeout=10)
