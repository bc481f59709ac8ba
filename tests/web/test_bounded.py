"""What the Jobs page and `runner status` ask the database is bounded by what is live, not by
the ledger's history (revisions 0014_webperf, 0016_health):

- every statement they issue, and every statement the SQL functions they call run inside
  (runner.job_health_v1, runner.missing_slots_v1: read through auto_explain's nested plans,
  an EXPLAIN of the caller shows only a function scan), is planned with an index wherever it
  reads a table that grows with history (runs, attempts, effects, requests): with sequential
  scans priced out, a relation still read sequentially is one no index matches;
- runner.job_health runs the gap scan once for all jobs (not once per job), reaches a job's
  unfinished runs through the index of unfinished runs (the index of unaccounted runs also
  holds every dead run the job kept; the retry queue holds every job's), and runner.alerts'
  slow branch reads durations from the index alone;
- the Jobs page is three statements (the clock, runner.job_health_v1 with the missing counts
  from the same pass, the alert counts), and its alert counts are runner.alerts' rows per job,
  exactly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from runner.sqlfiles import queries
from tests.support import executed_plans
from tests.support import plan_nodes as nodes
from tests.web.conftest import HOSTILE_JOB, Ledger
from tests.web.test_api import VIEW, console

HISTORY = {"job_runs", "attempts", "effects", "requests"}
QO = queries("operate")
QW = queries("web")


def plan_of(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every plan node of the statement and of the statements its functions ran."""
    return [n for p in executed_plans(conn, statement, params) for n in nodes(p["Plan"])]


def gap_scans(plans: list[dict[str, Any]]) -> int:
    """How many times runner.missing_slots_v1's body ran."""
    return sum(1 for p in plans if "WITH jobs AS MATERIALIZED" in p.get("Query Text", ""))


@pytest.fixture
def planner(ledger: Ledger) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        conn.execute("ANALYZE")
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET jit = off")
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_min_duration = 0")
        conn.execute("SET auto_explain.log_format = 'json'")
        yield conn


STATEMENTS = {
    "job_health": (QO["job_health"], {"job_name": None}),
    "job_health (one job)": (QO["job_health"], {"job_name": HOSTILE_JOB}),
    "alerts (runner status)": (QO["alerts"], {"job_name": None}),
    "alert counts (Jobs page)": (QW["alert_counts"], {}),
    "alerts (Alerts page)": (QW["alerts"], {"job_name": None, "limit": 501}),
}


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_no_status_statement_reads_a_history_table_sequentially(planner: psycopg.Connection[Any],
                                                                 name: str) -> None:
    statement, params = STATEMENTS[name]
    scans = [(n["Node Type"], n.get("Relation Name")) for n in plan_of(planner, statement, params)
             if n["Node Type"] == "Seq Scan" and n.get("Relation Name") in HISTORY]
    assert not scans, f"{name} reads {scans} whole: no index matches"


def test_job_health_reaches_unfinished_runs_through_their_own_index(planner: psycopg.Connection[Any]) -> None:
    # job_health_v1's own statement (the gap scan it runs inside reads the unaccounted runs
    # through their index: that is how it lists them)
    [own] = [p for p in executed_plans(planner, *STATEMENTS["job_health"])
             if "WITH gaps AS MATERIALIZED" in p.get("Query Text", "")]
    used = {n.get("Index Name") for n in nodes(own["Plan"])}
    assert "job_runs_unfinished" in used
    # not the index of unaccounted runs, which also holds every dead run a job ever kept (on
    # this small ledger the planner may still take the retry queue for failed_24h; on a big
    # one, where that queue holds every job's failed runs, it takes the job's own index)
    assert "job_runs_unaccounted" not in used, used


def test_job_health_runs_the_gap_scan_once_for_every_job(planner: psycopg.Connection[Any]) -> None:
    jobs = planner.execute("SELECT count(*) FROM runner.jobs").fetchone()
    assert jobs is not None and jobs[0] >= 2  # so once per job would show
    assert gap_scans(executed_plans(planner, *STATEMENTS["job_health"])) == 1
    assert gap_scans(executed_plans(planner, *STATEMENTS["job_health (one job)"])) == 1
    # the view, for psql: the same one pass
    assert gap_scans(executed_plans(planner, "SELECT * FROM runner.job_health", {})) == 1


def test_the_jobs_page_is_three_statements(ledger: Ledger, planner: psycopg.Connection[Any]) -> None:
    from runner.web import reads

    statements: list[str] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary and "plan:" in diag.message_primary:
            statements.append(json.loads(diag.message_primary[diag.message_primary.index("{"):])["Query Text"])

    planner.execute("SET auto_explain.log_nested_statements = off")
    planner.execute("SET client_min_messages = log")
    planner.add_notice_handler(keep)
    try:
        page = reads.jobs(planner, None)
    finally:
        planner.remove_notice_handler(keep)
        planner.execute("SET client_min_messages = notice")
    assert len(statements) == 3, statements
    assert "runner.job_health_v1" in statements[1] and "runner.alerts" in statements[2]
    by_job = {j["job_name"]: j for j in page["jobs"]}
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        missing = dict(conn.execute("SELECT job_name, count(*) FROM runner.missing_slots GROUP BY 1").fetchall())
    assert missing.get(HOSTILE_JOB, 0) >= 2
    assert {name: j["missing"] for name, j in by_job.items()} == {name: missing.get(name, 0) for name in by_job}


def test_slow_alerts_read_durations_from_the_index_alone(planner: psycopg.Connection[Any]) -> None:
    scans = [n for n in plan_of(planner, *STATEMENTS["alerts (runner status)"])
             if n.get("Index Name") == "job_runs_succeeded"]
    assert any(n["Node Type"] == "Index Only Scan" for n in scans), [n["Node Type"] for n in scans]


def test_the_jobs_page_counts_the_alerts_of_each_job(ledger: Ledger) -> None:
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        expected = dict(conn.execute(
            "SELECT job_name, count(*) FROM runner.alerts WHERE job_name IS NOT NULL GROUP BY job_name").fetchall())
        total = conn.execute("SELECT count(*) FROM runner.alerts").fetchone()[0]
    assert expected.get(HOSTILE_JOB, 0) >= 2  # its dead run and its paused backfill at least
    with console(ledger.operator) as client:
        data = client.get("/api/jobs", headers=VIEW).json()
    assert total == sum(expected.values()) + 1  # and no_runner, of the whole ledger (no runner here)
    assert {j["job_name"]: j["alerts"] for j in data["jobs"] if j["alerts"]} == expected
    assert data["alerts"] == total


def test_the_jobs_page_counts_alerts_on_a_second_connection_when_one_is_free(ledger: Ledger) -> None:
    """reads.jobs with ``side``: the alert counts run on the side connection (their backend
    is another session), concurrently with job health; a pool with none free at once (the
    PoolTimeout its ``connection(timeout=...)`` raises) counts them on the page's own
    connection; the page is the same either way."""
    from contextlib import contextmanager

    from psycopg_pool import PoolTimeout

    from runner.web import reads

    used: list[int] = []

    @contextmanager
    def side() -> Iterator[psycopg.Connection[Any]]:
        with psycopg.connect(ledger.admin, autocommit=True) as c:
            used.append(c.info.backend_pid)
            yield c

    @contextmanager
    def none_free() -> Iterator[psycopg.Connection[Any]]:
        raise PoolTimeout("no connection free")
        yield  # pragma: no cover

    def page(**kw: Any) -> dict[str, Any]:
        data = reads.jobs(conn, None, **kw)
        return {**data, "now": None, "jobs": [{**j, "lag": None} for j in data["jobs"]]}

    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        alone = page()
        beside = page(side=side)
        fallback = page(side=none_free)
        assert used and used[0] != conn.info.backend_pid
    assert alone == beside == fallback
    assert alone["alerts"] >= 2
