"""What the Jobs page and `runner status` ask the database is bounded by what is live, not by
the ledger's history (revision 0014_webperf):

- every statement they issue is planned with an index wherever it reads a table that grows
  with history (runs, attempts, effects, requests): with sequential scans priced out, a
  relation still read sequentially is one no index matches;
- runner.job_health reaches a job's unfinished runs through the index of unfinished runs
  (the index of unaccounted runs also holds every dead run the job kept; the retry queue
  holds every job's), and runner.alerts' slow branch reads durations from the index alone;
- the Jobs page's alert counts are runner.alerts' rows per job, exactly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from runner.sqlfiles import queries
from tests.web.conftest import HOSTILE_JOB, Ledger
from tests.web.test_api import VIEW, console

HISTORY = {"job_runs", "attempts", "effects", "requests"}
QO = queries("operate")
QW = queries("web")


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


def plan_of(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    row = conn.execute("EXPLAIN (FORMAT JSON) " + statement, params).fetchone()
    assert row is not None
    found = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return list(nodes(found[0]["Plan"]))


@pytest.fixture
def planner(ledger: Ledger) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        conn.execute("ANALYZE")
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET jit = off")
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
    used = {n.get("Index Name") for n in plan_of(planner, *STATEMENTS["job_health"])}
    assert "job_runs_unfinished" in used
    # not the index of unaccounted runs, which also holds every dead run a job ever kept (on
    # this small ledger the planner may still take the retry queue for failed_24h; on a big
    # one, where that queue holds every job's failed runs, it takes the job's own index)
    assert "job_runs_unaccounted" not in used, used


def test_slow_alerts_read_durations_from_the_index_alone(planner: psycopg.Connection[Any]) -> None:
    scans = [n for n in plan_of(planner, *STATEMENTS["alerts (runner status)"])
             if n.get("Index Name") == "job_runs_succeeded"]
    assert any(n["Node Type"] == "Index Only Scan" for n in scans), [n["Node Type"] for n in scans]


def test_the_jobs_page_counts_the_alerts_of_each_job(ledger: Ledger) -> None:
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        expected = dict(conn.execute(
            "SELECT job_name, count(*) FROM runner.alerts WHERE job_name IS NOT NULL GROUP BY job_name").fetchall())
    assert expected.get(HOSTILE_JOB, 0) >= 2  # its dead run and its paused backfill at least
    with console(ledger.operator) as client:
        data = client.get("/api/jobs", headers=VIEW).json()
    assert {j["job_name"]: j["alerts"] for j in data["jobs"] if j["alerts"]} == expected
    assert data["alerts"] == sum(expected.values())
