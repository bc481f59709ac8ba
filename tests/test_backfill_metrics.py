"""Prometheus metrics of backfill plans (runner/worker/metrics.py, LedgerCollector): scraped from a
real ``runner start --metrics-port`` process while plans run, pause and finish; read from
the ledger, so pauses are counted by cause whichever path paused a plan (a trigger of
revision 0013_verify); finished plans leave the endpoint."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runner.actions import backfill
from runner.model.schedule import Schedule
from runner.worker import metrics
from runner.worker.metrics import LedgerCollector
from tests.apps.verified import app as vf_app
from tests.support import RunnerProcess, eventually, rows, run_cli
from tests.test_gap_scan import make_run
from tests.test_observe import free_port

APP = "tests/apps/verified.py:app"
T0 = datetime(2026, 3, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture
def url(db_url: str) -> str:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE vf_src (id int PRIMARY KEY, at timestamptz NOT NULL, amount numeric NOT NULL)")
        c.execute("CREATE TABLE vf_report (src_id int, at timestamptz, amount numeric, job text)")
    return db_url


def create_plan(url: str, job: str, slots: int, **kw: Any) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        spec = backfill.Spec(job_name=job, range_from=T0 + HOUR, range_to=T0 + (slots + 1) * HOUR, **kw)
        made = backfill.create(conn, backfill.plan(conn, vf_app.jobs[job], spec), "metrics", "tester")
        return int(made["backfill"]["id"])


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: Any) -> float | None:
    return found.get((name, frozenset((k, str(v)) for k, v in labels.items())))


def names_of(found: Iterable[tuple[str, Any]]) -> set[str]:
    return {name for name, _ in found}


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The endpoint's samples ({} while the process is not listening yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return samples(resp.read().decode())
    except ConnectionRefusedError:
        return {}
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return {}
        raise


@pytest.mark.slow
def test_metrics_of_running_paused_and_finished_plans_from_a_real_runner(url: str, tmp_path: Path) -> None:
    plan = create_plan(url, "good", 150, rate=10.0, concurrency=2)  # 15 s at 10/s: still running when it is paused below, even on a loaded machine
    stuck = create_plan(url, "failing", 3, max_failures=0)
    port = free_port()
    proc = RunnerProcess(APP, url, "--poll-interval", "0.1", "--metrics-port", str(port),
                         log=tmp_path / "runner.log")
    try:
        # while the plan runs: remaining, a rate, an estimated time left, the live lane's lag
        def running() -> Any:
            m = scrape(port)
            left = value(m, "runner_backfill_remaining_runs", plan=plan, job_name="good")
            return (left is not None and 0 < left < 150
                    and (value(m, "runner_backfill_runs_per_second", plan=plan, job_name="good") or 0) > 0
                    and value(m, "runner_backfill_eta_seconds", plan=plan, job_name="good") is not None
                    and value(m, "runner_backfill_live_lag_seconds", plan=plan, job_name="good") is not None
                    and m)
        m = eventually(running, timeout=30)
        assert value(m, "runner_backfill_expected_runs", plan=plan, job_name="good") == 150
        assert value(m, "runner_backfill_status", plan=plan, job_name="good", status="running") == 1
        assert value(m, "runner_ledger_metrics_up") == 1
        rate = value(m, "runner_backfill_runs_per_second", plan=plan, job_name="good")
        left = value(m, "runner_backfill_remaining_runs", plan=plan, job_name="good")
        assert rate is not None and left is not None and rate <= 12  # --rate 10
        assert value(m, "runner_backfill_eta_seconds", plan=plan, job_name="good") == pytest.approx(left / rate)
        # the failing plan paused itself past max_failures=0: failures, the pause and its cause
        m = eventually(lambda: (m := scrape(port)) and value(
            m, "runner_backfill_paused", plan=stuck, job_name="failing", cause="max_failures") == 1 and m, timeout=30)
        assert value(m, "runner_backfill_pauses_total", plan=stuck, job_name="failing", cause="max_failures") == 1
        assert (value(m, "runner_backfill_failures", plan=stuck, job_name="failing") or 0) >= 1
        assert value(m, "runner_backfill_eta_seconds", plan=stuck, job_name="failing") is None  # paused: no estimate
        # an operator pauses the running plan, then resumes it
        paused = run_cli("backfill", "pause", str(plan), "--reason", "look", "--yes", url=url)
        assert paused.returncode == 0, paused.stderr
        m = eventually(lambda: (m := scrape(port)) and value(
            m, "runner_backfill_paused", plan=plan, job_name="good", cause="operator") == 1 and m, timeout=10)
        assert value(m, "runner_backfill_pauses_total", plan=plan, job_name="good", cause="operator") == 1
        assert value(m, "runner_backfill_live_lag_seconds", plan=plan, job_name="good") is None  # not running
        resumed = run_cli("backfill", "resume", str(plan), "--reason", "fine", "--yes", url=url)
        assert resumed.returncode == 0, resumed.stderr
        # finished: nothing remains, the estimate is 0, the verification is reported
        m = eventually(lambda: (m := scrape(port)) and value(
            m, "runner_backfill_verified", plan=plan, job_name="good") is not None and m, timeout=60)
        assert value(m, "runner_backfill_status", plan=plan, job_name="good", status="completed") == 1
        assert value(m, "runner_backfill_remaining_runs", plan=plan, job_name="good") == 0
        assert value(m, "runner_backfill_eta_seconds", plan=plan, job_name="good") == 0
        assert value(m, "runner_backfill_pauses_total", plan=plan, job_name="good", cause="operator") == 1
        assert value(m, "runner_backfill_paused", plan=plan, job_name="good", cause="operator") is None
    finally:
        assert proc.terminate() == 0, proc.output()
    # bounded labels: plan and job (and cause, status), never a slot, run or partition
    labels = {k for (_, ls) in m for k, _ in ls}
    assert not labels & {"slot", "run_id", "partition"}


def test_pauses_by_cause_finished_plans_leave_and_a_lost_ledger_says_so(url: str) -> None:
    plan = create_plan(url, "good", 2)
    with psycopg.connect(url, autocommit=True) as conn:
        for reason in ("pause_when failed: DivisionByZero", "pause_when returned true",
                       "4 failed or dead run(s), more than max_failures=3: look", "paused by ann: why"):
            conn.execute("UPDATE runner.backfills SET status = 'paused', pause_reason = %s WHERE id = %s",
                         (reason, plan))
            conn.execute("UPDATE runner.backfills SET status = 'running', pause_reason = NULL WHERE id = %s",
                         (plan,))
        conn.execute("UPDATE runner.backfills SET status = 'paused', pause_reason = 'paused by bob: again'"
                     " WHERE id = %s", (plan,))
        conn.execute("UPDATE runner.backfills SET pause_reason = 'paused by bob: reworded' WHERE id = %s", (plan,))
    assert rows(url, "SELECT pauses, pause_cause FROM runner.backfills WHERE id = %s", (plan,)) == [(
        {"condition_error": 1, "condition": 1, "max_failures": 1, "operator": 2}, "operator")]
    registry = CollectorRegistry()
    collector = LedgerCollector(lambda: psycopg.connect(url, autocommit=True), min_interval=0, keep=3600)
    registry.register(collector)
    try:
        m = samples(generate_latest(registry).decode())
        assert value(m, "runner_backfill_pauses_total", plan=plan, job_name="good", cause="operator") == 2
        assert value(m, "runner_backfill_paused", plan=plan, job_name="good", cause="operator") == 1
        with psycopg.connect(url, autocommit=True) as conn:  # the plan finishes
            conn.execute("UPDATE runner.backfills SET status = 'running' WHERE id = %s", (plan,))
            conn.execute("UPDATE runner.backfills SET status = 'completed', finished_at = now() - interval '2 hours'"
                         " WHERE id = %s", (plan,))
        m = samples(generate_latest(registry).decode())
        assert "runner_backfill_remaining_runs" not in names_of(m)  # finished over `keep` ago: gone
        assert value(m, "runner_ledger_metrics_up") == 1
        # the ledger goes away: the scrape still answers, saying so
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
                         " AND pid <> pg_backend_pid()")
            conn.execute("ALTER TABLE runner.backfills RENAME TO backfills_away")
        m = samples(generate_latest(registry).decode())
        assert value(m, "runner_ledger_metrics_up") == 0
    finally:
        collector.close()


def test_the_ledger_read_job_metrics_behind_the_alert_rules(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """runner_slot_after_last_success_timestamp_seconds (the slot after the newest succeeded
    slot of any partition, a failed newer one or another job's not counted; for a job with no
    success among its newest SUCCESS_WINDOW runs, the oldest of those), runner_runs_dead and
    runner_effects_resent, read from the ledger for every process alike."""
    monkeypatch.setattr(metrics, "SUCCESS_WINDOW", 3)
    hour = timedelta(hours=1)
    t = datetime(2026, 3, 1, 10, tzinfo=UTC)
    with psycopg.connect(db_url, autocommit=True) as conn:
        make_run(conn, "hourly", t - 3 * hour, "a")
        newest = make_run(conn, "hourly", t - 2 * hour, "b")
        make_run(conn, "hourly", t - hour, "a", status="dead")
        make_run(conn, "hourly", t - hour, "b", status="failed")
        make_run(conn, "other", t, status="succeeded")
        make_run(conn, "other", t - hour, status="dead")
        make_run(conn, "other", t - 2 * hour, status="dead")
        make_run(conn, "failing", t - 4 * hour)  # beyond the window of 3 runs
        for back in (3, 2, 1, 0):
            make_run(conn, "failing", t - back * hour, status="failed")
        make_run(conn, "never", t - hour, status="dead")
        for key, sends in (("once", 1), ("twice", 2), ("thrice", 3)):
            conn.execute("INSERT INTO runner.effects (job_name, run_id, effect_key, status, attempt, fence,"
                         " send_count) VALUES ('hourly', %s, %s, 'unknown', 1, 1, %s)", (newest, key, sends))
    registry = CollectorRegistry()
    collector = LedgerCollector(lambda: psycopg.connect(db_url, autocommit=True), min_interval=0,
                                schedules={"hourly": Schedule(kind="every", every="1h"),
                                           "idle": Schedule(kind="every", every="1d"),
                                           "failing": Schedule(kind="every", every="1h"),
                                           "never": Schedule(kind="every", every="1h")})
    registry.register(collector)
    try:
        m = samples(generate_latest(registry).decode())
    finally:
        collector.close()
    # the slot after 08:00, the newest success: 09:00 (its runs dead and failed)
    assert value(m, "runner_slot_after_last_success_timestamp_seconds", job_name="hourly") == (
        (t - hour).timestamp())
    assert value(m, "runner_slot_after_last_success_timestamp_seconds", job_name="idle") is None  # no run
    # no success among the newest 3 runs: no success since at least the oldest of them
    assert value(m, "runner_slot_after_last_success_timestamp_seconds", job_name="failing") == (
        (t - 2 * hour).timestamp())
    assert value(m, "runner_slot_after_last_success_timestamp_seconds", job_name="never") == (
        (t - hour).timestamp())
    assert value(m, "runner_slot_after_last_success_timestamp_seconds", job_name="other") is None  # not served
    assert value(m, "runner_runs_dead", job_name="hourly") == 1
    assert value(m, "runner_runs_dead", job_name="other") == 2
    assert value(m, "runner_runs_dead", job_name="idle") == 0
    assert value(m, "runner_effects_resent", job_name="hourly") == 2
    assert value(m, "runner_ledger_metrics_up") == 1
