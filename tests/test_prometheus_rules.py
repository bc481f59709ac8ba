"""The shipped alert rules (deploy/prometheus/runner-alerts.yml) checked and unit-tested with
Debian's promtool, and the Grafana dashboard (deploy/grafana/runner.json): both name only
metrics the runner exports (runner/worker/metrics.py's registry and its ledger collector)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import psycopg
from prometheus_client.registry import CollectorRegistry

from runner.model.schedule import Schedule
from runner.worker.metrics import Metrics
from tests import promserver
from tests.support import ROOT

RULES = ROOT / "deploy" / "prometheus" / "runner-alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "runner-alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "runner.json"
ALERTS = ("RunnerNoSuccessBySlot", "RunnerRunSlow", "RunnerAttemptsAbandoned", "RunnerRunsDead",
          "RunnerEffectResent", "RunnerNoneAlive", "RunnerBackfillPaused")
METRIC = re.compile(r"\brunner_[a-z0-9_]+\b")


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    promserver.need(promserver.PROMTOOL)
    return subprocess.run([str(promserver.PROMTOOL), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)


def exported(db_url: str) -> set[str]:
    """Every sample name the runner's registry exports: the process's metrics, and the ledger
    collector's families (read from a migrated ledger, with one job so per-job ones show)."""
    metrics = Metrics(CollectorRegistry())
    collector = metrics.watch_ledger(lambda: psycopg.connect(db_url, autocommit=True),
                                     {"nightly": Schedule(kind="every", every="1h")})
    try:
        families = list(metrics.registry.collect())
    finally:
        collector.close()
    names: set[str] = set()
    for family in families:
        if family.type == "counter":
            names |= {family.name + "_total", family.name + "_created"}
        elif family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_count", "_sum", "_created")}
        else:
            names.add(family.name)
    return names


def test_the_rules_pass_promtool_check(tmp_path: Path) -> None:
    done = promtool("check", "rules", RULES.name, cwd=RULES.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in done.stdout


def test_the_rules_pass_their_unit_tests() -> None:
    done = promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def _with_every_expr(expr: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The unit tests run against a copy of the rules whose every expr is ``expr``."""
    text = RULES.read_text()
    blocks = re.split(r"(?m)^(?=      - alert: )", text)
    changed = [blocks[0]] + [
        re.sub(r"(?ms)^        expr: .*?(?=^        (?:for|labels):)", f"        expr: {expr}\n", b, count=1)
        for b in blocks[1:]]
    assert sum(1 for b in changed[1:] if f"expr: {expr}\n" in b) == len(ALERTS)
    (tmp_path / RULES.name).write_text("".join(changed))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    return promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)


def test_every_rule_has_a_firing_case_and_a_quiet_one(tmp_path: Path) -> None:
    """Rules that never fire fail each rule's firing case; rules that always fire fail each
    rule's quiet case: the unit tests hold every rule to both."""
    for expr, why in (("absent(vector(1))", "never"), ("vector(1)", "always")):
        out = tmp_path / why
        out.mkdir()
        done = _with_every_expr(expr, out)
        assert done.returncode != 0, (why, done.stdout)
        failed = set(re.findall(r"alertname: (\w+)", done.stdout + done.stderr))
        assert failed == set(ALERTS), (why, failed, done.stdout[-2000:])


def test_the_rules_and_the_dashboard_name_only_exported_metrics(db_url: str) -> None:
    names = exported(db_url)
    assert {"runner_attempts_started_total", "runner_run_duration_seconds_bucket",
            "runner_slot_after_last_success_timestamp_seconds", "runner_runs_dead",
            "runner_effects_resent", "runner_backfill_paused", "runner_inflight_runs"} <= names, names
    rules = RULES.read_text()
    assert set(METRIC.findall(rules)) <= names, set(METRIC.findall(rules)) - names
    for alert in ALERTS:
        assert f"- alert: {alert}\n" in rules

    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs and all(p.get("targets") for p in dashboard["panels"])
    for expr in exprs:
        used = set(METRIC.findall(expr))
        assert used, f"the dashboard's expr {expr!r} names no runner metric"
        assert used <= names, f"the dashboard's expr {expr!r} names {used - names}, not exported"
    # the same figures as the alerts: every metric a rule reads is on the dashboard
    assert set(METRIC.findall(rules)) <= {m for e in exprs for m in METRIC.findall(e)}
    assert not any(re.search(r"[{,(]\s*job\s*[=!~]|by \(job\b", e) for e in exprs)  # job_name, never job
