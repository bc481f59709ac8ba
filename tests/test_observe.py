"""Metrics and structured logs of a real `runner start` process."""

from __future__ import annotations

import json
import re
import socket
import urllib.request
from pathlib import Path

import psycopg

from tests import promserver
from tests.support import RunnerProcess, eventually, scalar


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def test_metrics_and_json_logs(db_url: str, tmp_path: Path) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE sink (job_name text, slot timestamptz, partition_key text, fence bigint,"
                     " idempotency_key text)")
    port = free_port()
    proc = RunnerProcess("tests/apps/three_partitions.py:app", db_url, "--metrics-port", str(port),
                         "--log-format", "json", log=tmp_path / "r.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 6,
                   timeout=20)
        done = 'runner_attempts_completed_total{job_name="tick",status="succeeded"}'
        text = eventually(lambda: (t := scrape(port)) and done in t and t)
    finally:
        assert proc.terminate() == 0, proc.output()
    assert 'runner_attempts_started_total{job_name="tick",trigger="schedule"}' in text
    assert "runner_schedule_lag_seconds_bucket" in text and "runner_run_duration_seconds_bucket" in text
    assert 'runner_last_success_timestamp_seconds{job_name="tick"}' in text
    # bounded labels: no partition, slot or run id ever becomes a label
    for label in ("partition", "slot", "run_id"):
        assert f"{label}=" not in text
    # the job is job_name: Prometheus owns `job` (a scraped `job` label arrives as exported_job)
    assert not re.search(r'[{,]job="', text)
    assert 'runner_slot_after_last_success_timestamp_seconds{job_name="tick"}' in text
    # counters start at 0 for every job (a rule's increase() then sees the first takeover)
    assert 'runner_takeovers_total{job_name="tick"} 0.0' in text
    assert 'runner_attempts_completed_total{job_name="tick",status="dead"} 0.0' in text
    events = [json.loads(line) for line in proc.output().splitlines() if line.strip()]
    claimed = [e for e in events if e["event"] == "job_claimed"]
    assert claimed and {"job", "slot", "partition", "run_id", "attempt", "fence", "trigger"} <= set(claimed[0])
    assert claimed[0]["job"] == "tick" and claimed[0]["partition"] in ("a", "b", "c")
    succeeded = [e for e in events if e["event"] == "attempt_succeeded"]
    assert {e["run_id"] for e in succeeded} >= {e["run_id"] for e in claimed[:3]}
    assert any(e["event"] == "runner_stopped" for e in events)


def test_no_output_shows_the_password(tmp_path: Path) -> None:
    from tests.support import run_cli

    url = "postgresql://someone:hunter2-secret@127.0.0.1:5432/nope"
    for args in (["start", "--app", "tests/apps/hello.py:app"], ["runs"], ["db", "current"], ["db", "upgrade"]):
        out = run_cli(*args, url=url)
        assert out.returncode == 1
        assert "hunter2" not in out.stdout + out.stderr
        assert "***" in out.stderr or "someone" in out.stderr or "connect" in out.stderr


def test_a_real_prometheus_scrapes_job_name_and_no_exported_job(db_url: str, tmp_path: Path) -> None:
    """Debian's Prometheus (tests/promserver.py) under default scrape settings scrapes a real
    runner's --metrics-port: its series keep the runner's `job_name` label beside
    Prometheus's own `job`, and nothing arrives renamed `exported_job`."""
    port = free_port()
    proc = RunnerProcess("tests/apps/conditions.py:app", db_url, "--metrics-port", str(port),
                         log=tmp_path / "r.log")  # tick: every 200 ms
    try:
        with promserver.prometheus(tmp_path, {"runner": [f"127.0.0.1:{port}"]}) as prom:
            found = eventually(lambda: prom.query('runner_attempts_completed_total{status="succeeded"} > 0'),
                               timeout=60, interval=0.5, message="runner series scraped")
            labels = found[0]["metric"]
            assert labels["job_name"] == "tick" and labels["job"] == "runner", labels
            assert "exported_job" not in labels
            for family in ("runner_attempts_started_total", "runner_run_duration_seconds_count",
                           "runner_last_success_timestamp_seconds",
                           "runner_slot_after_last_success_timestamp_seconds"):
                series = prom.query(family)
                assert series and all(s["metric"].get("job_name") in ("tick", "hourly") for s in series), (
                    family, series)
            assert prom.query('{exported_job!=""}') == []
            assert prom.query('{__name__=~"runner_.+", job!="runner"}') == []
    finally:
        assert proc.terminate() == 0, proc.output()


def test_a_claims_lags_observed_at_once() -> None:
    """A claim's runs' start lags go in at once (runner/worker/claims.py): each job's
    histogram counts its own runs, and only live slots (trigger schedule) feed the window
    behind runner_backfill_live_lag_seconds."""
    from runner.worker.metrics import Metrics

    m = Metrics()
    m.observe_lags([("a", 0.2, "schedule"), ("a", 0.4, "schedule"), ("b", 9.0, "backfill"),
                    ("a", 0.3, "retry"), ("b", 0.1, "schedule")])
    assert m.registry.get_sample_value("runner_schedule_lag_seconds_count", {"job_name": "a"}) == 3
    assert m.registry.get_sample_value("runner_schedule_lag_seconds_sum", {"job_name": "b"}) == 9.1
    assert m.live_lag_p99() == 0.4  # of 0.1, 0.2, 0.4: the backfill's 9 s and the retry are not live
    m.observe_lag("c", 0.5, "schedule")
    assert m.registry.get_sample_value("runner_schedule_lag_seconds_count", {"job_name": "c"}) == 1
    assert m.live_lag_p99() == 0.5

