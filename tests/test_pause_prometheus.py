"""Backfill pause conditions given as Prometheus instant queries (runner/worker/conditions.py):
asked of the runner's configured Prometheus by HTTP GET, bounded in time and size, true
when a sample is non-zero. A tiny HTTP server in the test stands in for Prometheus's query
API; the ledger is the real PostgreSQL."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from runner.actions import backfill
from runner.worker import conditions
from tests import promserver
from tests.apps.conditions import app as cond_app
from tests.promserver import Exporter
from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, run_cli

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
NOW = 1_780_000_000.0


def vector(*values: str) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"job": "x"}, "value": [NOW, v]} for v in values]}}


ANSWERS: dict[str, tuple[int, Any]] = {
    "up == 0": (200, vector("1")),
    "firing_empty": (200, vector()),
    "zero": (200, vector("0", "0")),
    "one_of_many": (200, vector("0", "2.5")),
    "nan": (200, vector("NaN")),
    "scalar(1)": (200, {"status": "success", "data": {"resultType": "scalar", "result": [NOW, "1"]}}),
    "scalar(0)": (200, {"status": "success", "data": {"resultType": "scalar", "result": [NOW, "0"]}}),
    "rate(x[5m])[10m:]": (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}),
    "bad(": (400, {"status": "error", "errorType": "bad_data", "error": "parse error at char 5"}),
    "huge": (200, {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"pad": "x" * 1000}, "value": [NOW, "1"]} for _ in range(1000)]}}),
}


class Prometheus:
    """A stand-in for Prometheus's /api/v1/query on 127.0.0.1 (answers from ANSWERS; the
    query 'slow' answers after 3 s, 'slower' after 30 s; 'server_error' gets an HTML 502)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str]] = []  # method, path, query
        self.asked_at: list[tuple[float, str]] = []  # time.monotonic() of each query
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = parse_qs(parts.query).get("query", [""])[0]
                outer.asked.append(("GET", parts.path, query))
                outer.asked_at.append((time.monotonic(), query))
                if query == "slow":
                    time.sleep(3)  # an answer slower than any evaluation may take
                if query == "slower":
                    time.sleep(30)  # far slower than the runner's whole evaluation (3 s)
                status, body = ANSWERS.get(query, (200, vector()))
                data = json.dumps(body).encode()
                kind = "application/json"
                if query == "server_error":  # a proxy's error page, not the query API
                    status, data, kind = 502, b"<html><body>Bad Gateway</body></html>", "text/html"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def asked_for(self, query: str) -> int:
        return sum(1 for a in self.asked if a == ("GET", "/api/v1/query", query))


@pytest.fixture
def prometheus() -> Iterator[Prometheus]:
    prom = Prometheus()
    prom.thread.start()
    try:
        yield prom
    finally:
        prom.server.shutdown()
        prom.server.server_close()


@pytest.mark.parametrize(("query", "value"), [
    ("up == 0", True), ("firing_empty", False), ("zero", False), ("one_of_many", True), ("nan", False),
    ("scalar(1)", True), ("scalar(0)", False),
])
def test_an_instant_query_is_true_when_a_sample_is_not_zero(prometheus: Prometheus, query: str,
                                                             value: bool) -> None:
    assert conditions.evaluate_prometheus(prometheus.url, query) == conditions.Evaluation(value)
    assert prometheus.asked_for(query) == 1


@pytest.mark.parametrize(("query", "error"), [
    ("bad(", "Prometheus: bad_data: parse error at char 5"),
    ("rate(x[5m])[10m:]", "returned a matrix, not a vector or scalar"),
    ("huge", "the answer is over 262144 bytes"),
    ("slow", "timed out"),
])
def test_a_failing_or_unbounded_query_is_an_error(prometheus: Prometheus, query: str, error: str) -> None:
    began = time.monotonic()
    result = conditions.evaluate_prometheus(prometheus.url, query, timeout=0.5)
    assert result.value is None and error in (result.error or ""), result
    assert time.monotonic() - began < 2.0


def test_no_prometheus_configured_or_reachable_is_an_error() -> None:
    assert conditions.evaluate_prometheus(None, "up").error == (
        "no Prometheus to ask: this runner has no --prometheus-url (RUNNER_PROMETHEUS_URL)")
    closed = conditions.evaluate_prometheus("http://127.0.0.1:9", "up", timeout=0.5)
    assert closed.value is None and "Connection refused" in (closed.error or ""), closed


def test_a_runner_pauses_a_plan_on_its_prometheus_condition(db_url: str, prometheus: Prometheus,
                                                            tmp_path: Path) -> None:
    app = "tests/apps/conditions.py:app"
    made = run_cli("backfill", "hourly", "--from", T0.isoformat(), "--to", (T0 + 200 * HOUR).isoformat(),
                   "--reason", "replay", "--yes", "--json", "--pause-when-prometheus", "firing_empty",
                   "--prometheus-url", prometheus.url, "--app", app, url=db_url)
    assert made.returncode == 0, made.stderr
    plan = json.loads(made.stdout)
    assert plan["pause_when"] == "prometheus:firing_empty" and plan["pause_when_now"] is False
    assert prometheus.asked_for("firing_empty") == 1  # the creation check
    # a query Prometheus refuses refuses the plan, writing nothing
    refused = run_cli("backfill", "hourly", "--from", T0.isoformat(), "--to", (T0 + HOUR).isoformat(),
                      "--reason", "r", "--yes", "--pause-when-prometheus", "bad(", "--prometheus-url",
                      prometheus.url, "--app", app, url=db_url)
    assert refused.returncode == 1 and "bad_data" in refused.stderr and "nothing written" in refused.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE runner.backfills SET pause_when = 'prometheus:up == 0'")  # now it fires
    proc = RunnerProcess(app, db_url, "--poll-interval", "0.2", "--prometheus-url", prometheus.url,
                         log=tmp_path / "runner.log")
    try:
        eventually(lambda: rows(db_url, "SELECT status, pause_reason FROM runner.backfills") == [
            ("paused", "pause_when returned true")], timeout=30)
    finally:
        assert proc.terminate() == 0, proc.output()
    assert prometheus.asked_for("up == 0") >= 1


def test_a_runner_without_prometheus_pauses_the_plan_saying_so(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        spec = backfill.Spec(job_name="hourly", range_from=T0, range_to=T0 + HOUR)
        made = backfill.create(conn, backfill.plan(conn, cond_app.jobs["hourly"], spec), "r", "t")
        conn.execute("UPDATE runner.backfills SET pause_when = 'prometheus:up == 0'")
        with conditions.connect(db_url) as cond:
            conditions.run_once(cond, 21077, ["hourly"])
        assert rows(db_url, "SELECT status, pause_reason FROM runner.backfills WHERE id = %s",
                    (made["backfill"]["id"],)) == [
            ("paused", "pause_when failed: no Prometheus to ask: this runner has no --prometheus-url "
                       "(RUNNER_PROMETHEUS_URL)")]


@pytest.mark.parametrize("condition", ["prometheus:firing_empty", "SELECT false"])
def test_the_condition_session_evaluates_pass_after_pass(db_url: str, prometheus: Prometheus,
                                                         condition: str, db_roles: Any) -> None:
    """Every pass resets the condition session (DISCARD ALL): a session that let psycopg
    prepare its statements (after five runs) failed every pass after the first reset."""
    db_roles.apply(db_url)  # the condition role, which SQL conditions run as
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        spec = backfill.Spec(job_name="hourly", range_from=T0, range_to=T0 + HOUR)
        plan_id = backfill.create(conn, backfill.plan(conn, cond_app.jobs["hourly"], spec), "r", "t")[
            "backfill"]["id"]
        conn.execute("UPDATE runner.backfills SET pause_when = %s", (condition,))
    with conditions.connect(db_url) as cond:
        for _ in range(12):
            assert conditions.run_once(cond, 21077, ["hourly"], every=0, prometheus_url=prometheus.url) == {
                plan_id: conditions.Evaluation(False)}
    with psycopg.connect(db_url, autocommit=True) as conn, pytest.raises(ValueError, match="prepare_threshold"):
        conditions.reset_session(conn)


def test_a_slow_prometheus_refuses_the_plan_at_creation_within_the_timeout(db_url: str,
                                                                         prometheus: Prometheus) -> None:
    began = time.monotonic()
    refused = run_cli("backfill", "hourly", "--from", T0.isoformat(), "--to", (T0 + HOUR).isoformat(),
                      "--reason", "r", "--yes", "--pause-when-prometheus", "slower", "--prometheus-url",
                      prometheus.url, "--app", "tests/apps/conditions.py:app", url=db_url)
    assert refused.returncode == 1 and "timed out" in refused.stderr and "nothing written" in refused.stderr, (
        refused.stderr)
    # the 3 s evaluation bound (plus the CLI's start-up on a loaded machine), not the 30 s answer
    assert time.monotonic() - began < 20
    assert rows(db_url, "SELECT count(*) FROM runner.backfills") == [(0,)]
    assert rows(db_url, "SELECT count(*) FROM runner.job_runs") == [(0,)]


def test_a_runner_pauses_plans_whose_prometheus_fails_or_is_too_slow(db_url: str, prometheus: Prometheus,
                                                                     tmp_path: Path) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        made = {}
        for query, start in (("server_error", 0), ("slower", 500)):
            spec = backfill.Spec(job_name="hourly", range_from=T0 + start * HOUR, range_to=T0 + (start + 300) * HOUR)
            made[query] = backfill.create(conn, backfill.plan(conn, cond_app.jobs["hourly"], spec), "r", "t")[
                "backfill"]["id"]
            conn.execute("UPDATE runner.backfills SET pause_when = %s WHERE id = %s",
                         (f"prometheus:{query}", made[query]))
    proc = RunnerProcess("tests/apps/conditions.py:app", db_url, "--poll-interval", "0.2", "--prometheus-url",
                         prometheus.url, log=tmp_path / "runner.log")
    try:
        def reasons() -> dict[int, str] | None:
            found = dict(rows(db_url, "SELECT id, pause_reason FROM runner.backfills WHERE status = 'paused'"))
            return found if len(found) == 2 else None
        paused = eventually(reasons, timeout=40)
        # the loop kept serving live slots while an evaluation waited on Prometheus
        ticks = rows(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'tick' AND status = 'succeeded'")
        assert ticks[0][0] >= 5
        assert proc.proc.poll() is None
    finally:
        assert proc.terminate() == 0, proc.output()
    assert paused[made["server_error"]].startswith("pause_when failed: Prometheus at 127.0.0.1:")
    assert "JSONDecodeError" in paused[made["server_error"]]
    assert paused[made["slower"]].startswith("pause_when failed: ")
    assert ("timed out" in paused[made["slower"]] or "took longer than 3s" in paused[made["slower"]]
            or "too long" in paused[made["slower"]]), paused[made["slower"]]
    assert rows(db_url, "SELECT pauses FROM runner.backfills ORDER BY id") == [
        ({"condition_error": 1},), ({"condition_error": 1},)]


@pytest.mark.slow
def test_a_real_prometheus_condition_pauses_the_plan_every_time_it_holds(db_url: str, tmp_path: Path) -> None:
    """A real Prometheus (tests/promserver.py) scrapes a series the test flips; a real runner
    evaluates the plan's condition against it for as long as it runs, not once: it pauses on
    true, runs on after a resume while false, and pauses again — three times — without a
    failing condition duty (psycopg's prepared statements against the session reset)."""
    exporter = Exporter()
    exporter.values["pause_flag"] = 0
    try:
        with promserver.prometheus(tmp_path, {"flags": [exporter.address]}) as prom:
            def seen(value: int) -> bool:
                return [s["value"][1] for s in prom.query("pause_flag")] == [str(value)]
            eventually(lambda: seen(0), timeout=30, interval=0.2, message="pause_flag 0 scraped")
            app = "tests/apps/conditions.py:app"
            made = run_cli("backfill", "hourly", "--from", T0.isoformat(), "--to",
                           (T0 + 5000 * HOUR).isoformat(), "--reason", "replay", "--yes", "--json",
                           "--pause-when-prometheus", "pause_flag == 1", "--pause-every", "1",
                           "--prometheus-url", prom.url, "--app", app, url=db_url)
            assert made.returncode == 0, made.stderr
            assert json.loads(made.stdout)["pause_when_now"] is False
            plan = rows(db_url, "SELECT id FROM runner.backfills")[0][0]
            proc = RunnerProcess(app, db_url, "--poll-interval", "0.2", "--prometheus-url", prom.url,
                                 log=tmp_path / "runner.log")

            def status() -> tuple[str, str | None]:
                return rows(db_url, "SELECT status::text, pause_reason FROM runner.backfills WHERE id = %s",
                            (plan,))[0]

            def done_runs() -> int:
                return int(rows(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'hourly' "
                                "AND trigger = 'backfill' AND status = 'succeeded'")[0][0])

            try:
                for cycle in range(3):
                    exporter.values["pause_flag"] = 1
                    eventually(lambda: status() == ("paused", "pause_when returned true"), timeout=30,
                               interval=0.2, message=f"cycle {cycle}: paused on true")
                    exporter.values["pause_flag"] = 0
                    eventually(lambda: seen(0), timeout=30, interval=0.2, message="pause_flag 0 scraped")
                    resumed_at = rows(db_url, "SELECT now()")[0][0]
                    out = run_cli("backfill", "resume", str(plan), "--reason", f"cycle {cycle}", "--yes",
                                  url=db_url)
                    assert out.returncode == 0, out.stderr
                    runs = done_runs()

                    def ran_on(resumed_at: Any = resumed_at, runs: int = runs) -> bool:
                        checked = rows(db_url, "SELECT pause_checked_at FROM runner.backfills WHERE id = %s",
                                       (plan,))[0][0]
                        # a check after the resume found the condition false: the plan runs on
                        return (checked is not None and checked > resumed_at and status()[0] == "running"
                                and done_runs() > runs)
                    eventually(ran_on, timeout=30, interval=0.2, message=f"cycle {cycle}: runs on after resume")
                assert proc.proc.poll() is None
            finally:
                assert proc.terminate() == 0, proc.output()
    finally:
        exporter.close()
    log = proc.output()
    assert "duty conditions failed" not in log, log[-3000:]
    assert rows(db_url, "SELECT pauses FROM runner.backfills WHERE id = %s", (plan,)) == [({"condition": 3},)]
    assert_ledger_clean(db_url)
