"""A backfill's pause condition is untrusted SQL (issue 12, point 1): each hostile condition
the review found, run by a real ``runner start``, must leave the runner's run locks, its
sessions, its loop and its memory alone, and pause the plan with a recorded reason where the
condition is refused.

The plans are written as the test's superuser with the condition set afterwards, so what is
tested is the runner's own evaluation (not the creation check, which would refuse most of
them first). The runner-level tests import nothing of runner/worker/conditions.py, so they can be
run against a runner without it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
import pytest

from runner.actions import backfill
from tests.apps.conditions import app as cond_app
from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, scalar

APP = "tests/apps/conditions.py:app"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
NAMESPACE = 21077


def make_plan(url: str, condition: str, slots: int = 200, every: int | None = 1) -> int:
    """A running plan of 'hourly' (one run at a time) whose pause condition is ``condition``,
    evaluated every ``every`` seconds (``--pause-every``: a test waits for evaluations in
    steps of it; None: the default), over ``slots`` slots no earlier plan covers."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        start = T0 + conn.execute("SELECT count(*) FROM runner.backfills").fetchone()[0] * 1000 * HOUR  # type: ignore[index]
        spec = backfill.Spec(job_name="hourly", range_from=start, range_to=start + slots * HOUR, concurrency=1,
                             max_failures=None)
        made = backfill.create(conn, backfill.plan(conn, cond_app.jobs["hourly"], spec), "security test", "t")
        plan_id = int(made["backfill"]["id"])
        conn.execute("UPDATE runner.backfills SET pause_when = %s, pause_every = coalesce(%s, pause_every)"
                     " WHERE id = %s", (condition, every, plan_id))
    return plan_id


def plan_state(url: str, plan_id: int) -> tuple[str, str | None, Any]:
    found = rows(url, "SELECT status, pause_reason, pause_checked_at FROM runner.backfills WHERE id = %s",
                 (plan_id,))
    return found[0]


def evaluated(url: str, plan_id: int, times: int, timeout: float = 60) -> tuple[str, str | None]:
    """Wait until the plan's condition was evaluated ``times`` times (or the plan paused)."""
    seen: set[Any] = set()

    def check() -> tuple[str, str | None] | None:
        status, reason, checked = plan_state(url, plan_id)
        if checked is not None:
            seen.add(checked)
        return (status, reason) if status != "running" or len(seen) >= times else None

    return eventually(check, timeout=timeout, interval=0.1, message=f"{times} evaluations of plan {plan_id}")


@contextmanager
def runner(url: str, tmp_path: Path, name: str = "runner") -> Iterator[RunnerProcess]:
    proc = RunnerProcess(APP, url, "--poll-interval", "0.2", "--workers", "4",
                         log=tmp_path / f"{name}.log")
    try:
        eventually(lambda: scalar(url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'tick'"
                                       " AND status = 'succeeded'") >= 3,
                   timeout=60, message="the runner is up")
        yield proc
    finally:
        code = proc.terminate()
        assert code == 0, proc.output()[-3000:]


class LockWatch:
    """Watches, from a session of its own, that every running run's advisory lock is held
    (by anyone) and that no session holds ACCESS EXCLUSIVE on runner.job_runs."""

    UNLOCKED = """
        SELECT r.id FROM runner.job_runs r
        WHERE r.status = 'running'
          AND NOT EXISTS (SELECT 1 FROM pg_locks l
                          WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                            AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                            AND ((l.classid::bigint << 32) | l.objid::bigint) = runner.lock_key_v1(%s, r.id))"""
    EXCLUSIVE = """
        SELECT count(*) FROM pg_locks
        WHERE relation = 'runner.job_runs'::regclass AND mode = 'AccessExclusiveLock' AND granted
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"""

    def __init__(self, url: str) -> None:
        self.url = url
        self.unlocked: set[int] = set()
        self.exclusive = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> LockWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _watch(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '50ms'")
            while not self._stop.is_set():
                try:
                    self.exclusive += conn.execute(self.EXCLUSIVE).fetchone()[0]  # type: ignore[index]
                    first = {r[0] for r in conn.execute(self.UNLOCKED, (NAMESPACE,))}
                    if first:  # still running and still unlocked: not a run finishing meanwhile
                        again = {r[0] for r in conn.execute(self.UNLOCKED, (NAMESPACE,))}
                        self.unlocked |= first & again
                except psycopg.errors.LockNotAvailable:
                    self.exclusive += 1  # job_runs is locked against a read: someone holds it exclusively
                self._stop.wait(0.02)  # the watch's sampling period


def assert_runs_owned_once(url: str) -> None:
    """No run was taken over (a lost lock makes the runner recover its own runs) and the
    ledger audits clean."""
    taken = rows(url, "SELECT id, job_name, fence FROM runner.job_runs WHERE fence > 1 ORDER BY id LIMIT 5")
    assert taken == [], f"runs taken over (their lock was lost): {taken}"
    refused = scalar(url, "SELECT count(*) FROM runner.attempts WHERE status NOT IN"
                          " ('running', 'succeeded', 'failed', 'dead', 'released')")
    assert refused == 0, rows(url, "SELECT status, count(*) FROM runner.attempts GROUP BY 1")
    assert_ledger_clean(url)


def runner_pids(url: str) -> set[int]:
    return {r[0] for r in rows(url, "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                                    " AND application_name IN ('runner', 'runner-control', 'runner-worker')")}


def max_tick_lag(url: str, since: Any) -> float:
    return float(scalar(url, "SELECT coalesce(max(extract(epoch FROM started_at - schedule_slot)), 0)::float8"
                             " FROM runner.job_runs WHERE job_name = 'tick' AND schedule_slot >= %s", (since,)))


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.fixture
def url(db_url: str, db_roles: Any) -> str:
    """A fresh database with sql/roles.sql applied (the condition role exists)."""
    db_roles.apply(db_url)
    return db_url


# -- point 1, one hostile condition at a time, against a real runner -------------------------


def test_unlock_all_leaves_the_runners_run_locks_alone(url: str, tmp_path: Path) -> None:
    with runner(url, tmp_path), LockWatch(url) as watch:
        plan_id = make_plan(url, "SELECT pg_advisory_unlock_all() IS NULL")
        status, reason = evaluated(url, plan_id, times=3)
    assert (status, reason) == ("running", None)  # a legal condition: false
    assert watch.unlocked == set(), f"running runs whose lock was gone: {sorted(watch.unlocked)[:5]}"
    assert_runs_owned_once(url)


def test_terminating_the_runners_sessions_is_refused(db_url: str, db_roles: Any, tmp_path: Path) -> None:
    db_roles.apply(db_url)
    worker = db_roles.url(db_url, "worker")  # the runner logs in as a worker: same login as its sessions
    with runner(worker, tmp_path):
        before = runner_pids(db_url)
        plan_id = make_plan(db_url, "SELECT bool_or(pg_terminate_backend(pid)) FROM pg_stat_activity"
                                    " WHERE usename = session_user AND pid <> pg_backend_pid()")
        status, reason = evaluated(db_url, plan_id, times=2)
        after = runner_pids(db_url)
    assert status == "paused" and "InsufficientPrivilege" in (reason or ""), reason
    assert "terminate" in (reason or ""), reason
    assert before <= after, f"runner sessions ended: {sorted(before - after)}"
    assert_runs_owned_once(db_url)


def test_a_run_key_taken_by_a_condition_is_released_and_pauses_the_plan(url: str, tmp_path: Path) -> None:
    condition = ("SELECT pg_try_advisory_lock(runner.lock_key_v1(21077, (SELECT max(id) FROM runner.job_runs"
                 " WHERE status = 'pending'))) IS NULL")
    with runner(url, tmp_path):
        plan_id = make_plan(url, condition)
        status, reason = evaluated(url, plan_id, times=2)
        # the condition's lock is released: only the runner's own lock session holds run keys.
        # Not "only keys of running runs": the owner takes a key in its claim's transaction
        # (the run still reads pending to others) and releases it after the outcome commits
        # (succeeded), both legal. And the condition session releases its locks just after
        # the pause commits, so the test waits for that. A key never released fails here
        # (unless the takeover duty ends the condition session as a squatter, which it does
        # within a pass: the second guard, so both must fail for this to).
        eventually(lambda: not squatted_runs(url), timeout=10,
                   message=f"run keys held outside the runner: {squatted_runs(url)}")
    assert status == "paused" and "advisory lock" in (reason or ""), reason
    assert_runs_owned_once(url)


def squatted_runs(url: str) -> list[tuple[Any, ...]]:
    """Runs whose key a session holds that is not a registered runner lock session (the
    product's own rule for a squatter, runner.runner_sessions_v1), with the holder."""
    return rows(url, """
        SELECT r.id, r.status, l.pid, a.application_name FROM pg_locks l
        JOIN runner.job_runs r ON runner.lock_key_v1(%s, r.id) = ((l.classid::bigint << 32) | l.objid::bigint)
        LEFT JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.pid NOT IN (SELECT runner.runner_sessions_v1())""", (NAMESPACE,))


def test_a_do_block_locking_the_ledger_never_runs(url: str, tmp_path: Path) -> None:
    condition = ("DO $$ BEGIN LOCK TABLE runner.job_runs IN ACCESS EXCLUSIVE MODE; PERFORM pg_sleep(0.9); "
                 "END $$")
    with runner(url, tmp_path), LockWatch(url) as watch:
        since = scalar(url, "SELECT now()")
        plan_id = make_plan(url, condition)
        status, reason = evaluated(url, plan_id, times=2)
        eventually(lambda: scalar(url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'tick'"
                                       " AND schedule_slot > now() - interval '0.5 s'") > 0, timeout=10)
    assert watch.exclusive == 0, "runner.job_runs was locked ACCESS EXCLUSIVE"
    assert max_tick_lag(url, since) < 0.5
    assert status == "paused" and "returns no rows" in (reason or ""), reason
    assert_runs_owned_once(url)


def test_a_slow_condition_does_not_stall_the_loop(url: str, tmp_path: Path) -> None:
    with runner(url, tmp_path):
        since = scalar(url, "SELECT now()")
        plan_id = make_plan(url, "SELECT pg_sleep(0.9) IS NULL", every=None)  # (at 1 s it would sleep 90 % of the time: lag 1.09 s once under load 12)
        status, reason = evaluated(url, plan_id, times=3)
        until = scalar(url, "SELECT now()")
        eventually(lambda: scalar(url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'tick'"
                                       " AND schedule_slot >= %s", (until,)) > 0, timeout=10)
    assert (status, reason) == ("running", None)
    lag = max_tick_lag(url, since)
    assert lag < 0.5, f"a 200 ms job started up to {lag:.2f}s late while the condition slept"
    assert_runs_owned_once(url)


def test_a_huge_result_is_never_read(url: str, tmp_path: Path) -> None:
    with runner(url, tmp_path) as proc:
        before = peak_rss_mb(proc.proc.pid)
        wide = make_plan(url, "SELECT true, repeat('x', 100000000)")
        tall = make_plan(url, "SELECT true FROM pg_class a, pg_class b, pg_class c")  # millions, streamed
        wide_state = evaluated(url, wide, times=2)
        tall_state = evaluated(url, tall, times=2)
        after = peak_rss_mb(proc.proc.pid)
    assert after - before < 40, f"the runner's peak RSS grew from {before:.0f} to {after:.0f} MB"
    assert wide_state[0] == "paused" and "2 columns" in (wide_state[1] or ""), wide_state
    assert tall_state[0] == "paused" and "more than one row" in (tall_state[1] or ""), tall_state


def test_a_superuser_runner_runs_no_program_and_reads_no_file(url: str, tmp_path: Path) -> None:
    """The test's runner logs in as the server's superuser (as on the embedded server)."""
    assert scalar(url, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
    trace = f"/tmp/runner-condition-{uuid4().hex}"  # a file the server's OS user would create
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS dblink")
        conn.execute("CREATE TABLE cond_target (id int)")
    dsn = psycopg.conninfo.make_conninfo(url)
    with runner(url, tmp_path):
        program = make_plan(url, f"COPY (SELECT 1) TO PROGRAM 'touch {trace}'")
        read = make_plan(url, "SELECT length(pg_read_file('/etc/passwd')) > 0")
        write = make_plan(url, f"SELECT dblink_exec('{dsn}', 'INSERT INTO cond_target VALUES (1)') IS NOT NULL")
        states = {name: evaluated(url, plan_id, times=2)
                  for name, plan_id in (("program", program), ("read", read), ("write", write))}
    assert scalar(url, "SELECT pg_stat_file(%s, true)", (trace,)) is None, "the program ran"
    assert scalar(url, "SELECT count(*) FROM cond_target") == 0, "the dblink write landed"
    assert states["program"] == ("paused", "pause_when failed: it returns no rows (it must be a query "
                                           "returning one boolean)")
    assert states["read"] == ("paused", "pause_when failed: InsufficientPrivilege: permission denied for "
                                        "function pg_read_file")
    assert states["write"][0] == "paused" and "password is required" in (states["write"][1] or ""), states
    assert_runs_owned_once(url)


def test_without_the_condition_role_a_superuser_runner_refuses_to_evaluate(
        db_url: str, tmp_path: Path) -> None:
    """sql/roles.sql not applied: the evaluation would run with the schema owner's (here a
    superuser's) privileges, so it is refused and the plan pauses saying why."""
    with runner(db_url, tmp_path):
        plan_id = make_plan(db_url, "SELECT false")
        status, reason = evaluated(db_url, plan_id, times=2)
    assert status == "paused", (status, reason)
    assert "too powerful" in (reason or "") and "sql/roles.sql" in (reason or ""), reason


# -- the evaluation's own limits (runner/worker/conditions.py driven directly) ------------------------


def test_one_runner_at_a_time_evaluates_a_plan(url: str) -> None:
    from runner.worker import conditions

    plan_id = make_plan(url, "SELECT false", slots=2, every=None)
    with psycopg.connect(url, autocommit=True) as other, conditions.connect(url) as cond:
        with other.transaction():  # another runner evaluating this plan: it holds the condition lock
            other.execute("SELECT pg_advisory_xact_lock(%s, -%s::int)", (NAMESPACE, plan_id))
            assert conditions.run_once(cond, NAMESPACE, ["hourly"]) == {}
            assert plan_state(url, plan_id)[2] is None  # not checked
        assert conditions.run_once(cond, NAMESPACE, ["hourly"]) == {plan_id: conditions.Evaluation(False)}
        checked = plan_state(url, plan_id)[2]
        assert checked is not None
        # checked now: the next runner to look leaves it until its pause_every (5 s) has passed
        assert conditions.run_once(cond, NAMESPACE, ["hourly"]) == {}
        assert plan_state(url, plan_id)[2] == checked


def test_the_whole_evaluation_is_timed_and_the_session_reset(url: str) -> None:
    from runner.worker import conditions

    plan_id = make_plan(url, "SELECT pg_sleep(0.8) IS NULL", slots=2)
    with conditions.connect(url) as cond:
        cond.execute("SET application_name = 'changed'")
        began = time.monotonic()
        result = conditions.evaluate_plan(cond, NAMESPACE, plan_id, timeout=0.3)
        took = time.monotonic() - began
        assert result == conditions.Evaluation(None, "the evaluation took longer than 0.3s")
        assert took < 0.7, took
        assert plan_state(url, plan_id)[:2] == ("paused", "pause_when failed: the evaluation took longer than 0.3s")
        # the session is as new: settings reset (DISCARD ALL), no advisory lock left
        assert cond.execute("SHOW application_name").fetchone() == ("runner-condition",)
        assert cond.execute("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()"
                            " AND locktype = 'advisory'").fetchone() == (0,)


@pytest.mark.parametrize(("condition", "error"), [
    ("SELECT true; SELECT false", "SyntaxError"),  # one statement only
    ("SELECT 1", "not a boolean"),
    ("SELECT 'true'::text", "not a boolean"),
    ("SELECT true, false", "2 columns"),
    ("SET ROLE NONE", "returns no rows"),
    ("SELECT set_config('role', 'none', false) IS NULL", "security-definer"),
    ("SELECT count(*) > 0 FROM pg_authid", "permission denied"),
    ("SELECT true WHERE false", "no rows"),
    ("SELECT true\x00; SELECT pg_sleep(5) IS NULL", "NUL character"),
])
def test_the_creation_check_refuses_what_the_runner_would(url: str, condition: str, error: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        spec = backfill.Spec(job_name="hourly", range_from=T0, range_to=T0 + HOUR, pause_when=condition)
        with pytest.raises(backfill.OperatorError, match=error):
            backfill.plan(conn, cond_app.jobs["hourly"], spec)


@pytest.mark.parametrize(("statement", "error"), [
    ("SELECT set_config('role', 'none', false) IS NULL", "security-definer"),
    ("SELECT set_config('session_authorization', 'postgres', false) IS NULL", "security-definer"),
    ("SELECT bool_or(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid <> pg_backend_pid()",
     "to terminate"),
    ("SELECT pg_read_file('/etc/passwd') IS NULL", "permission denied for function pg_read_file"),
    ("SELECT lo_export(0, '/tmp/runner-condition-lo') = 1", "permission denied for function lo_export"),
    ("SELECT count(*) > 0 FROM pg_authid", "permission denied for table pg_authid"),
    ("SELECT count(*) > 0 FROM (SELECT 1 FROM runner.jobs FOR UPDATE) AS x", "read-only|permission denied"),
    ("DO $$ BEGIN LOCK TABLE runner.job_runs IN ACCESS EXCLUSIVE MODE; END $$", "cannot open DO query"),
    ("COPY (SELECT 1) TO PROGRAM 'true'", "cannot open COPY query"),
    ("SELECT true; SELECT false", "multi-query|cannot open"),
])
def test_the_condition_role_itself_cannot(url: str, statement: str, error: str) -> None:
    """Behind the describe check, the function and its role: runner.pause_condition_v1 called
    straight, by a superuser, with what the check would refuse or let through."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction(force_rollback=True):
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (True,)
        with pytest.raises(psycopg.Error, match=error):
            conn.execute("SELECT runner.pause_condition_v1(%s)", (statement,))
