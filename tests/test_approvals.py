"""Approvals: `runner approve` starts runs held as awaiting_approval, `runner skip` records
them skipped with the reason; each writes one runner.requests row listing what it touched."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner.actions import approvals, operate
from tests.support import RunnerProcess, eventually, rows, run_cli, scalar

APP = "tests/apps/backfill.py:app"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def cli(*args: str, url: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The CLI with stdin given (never the developer's terminal)."""
    return run_cli(*args, url=url, stdin=stdin)


@pytest.fixture
def url(db_url: str) -> str:
    """Three held runs of 'held' (T0, T0+1h, T0+2h) and two of 'other' (partitions p, q)."""
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE bf_gauge (running int NOT NULL DEFAULT 0, peak int NOT NULL DEFAULT 0)")
        c.execute("INSERT INTO bf_gauge VALUES (0, 0)")
        c.execute("CREATE TABLE bf_done (slot timestamptz, partition_key text, run_id bigint, fence bigint)")
        for job, slot, part, attempt in [("held", T0, "", 0), ("held", T0 + HOUR, "", 0),
                                         ("held", T0 + 2 * HOUR, "", 2),
                                         ("other", T0, "p", 0), ("other", T0, "q", 0)]:
            c.execute(
                "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date,"
                " window_start, window_end, status, trigger, attempt, fence, idempotency_key, status_reason)"
                " VALUES (%s, %s, %s, %s, %s, %s, 'awaiting_approval', 'catch_up', %s, %s, 'k',"
                " 'misfire=manual: late by 3h; held for approval')",
                (job, slot, part, slot.date(), slot - HOUR, slot, attempt, attempt))
    return db_url


def state(url: str) -> list[tuple[Any, ...]]:
    return rows(url, "SELECT job_name, schedule_slot, partition_key, status, trigger, attempt, fence,"
                     " uncounted_attempts, status_reason FROM runner.job_runs ORDER BY id")


def requests(url: str) -> list[tuple[Any, ...]]:
    return rows(url, "SELECT action, job_name, who, reason, touched FROM runner.requests ORDER BY id")


def test_approved_runs_are_executed_by_a_runner(url: str, tmp_path: Path) -> None:
    out = cli("approve", "held", "--from", T0.isoformat(), "--to", (T0 + 3 * HOUR).isoformat(),
              "--reason", "upstream fixed", "--by", "alice", "--yes", "--json", url=url)
    assert out.returncode == 0, out.stderr
    done = json.loads(out.stdout)
    assert len(done["runs"]) == 3 and done["left_alone"] == []
    held = [r for r in state(url) if r[0] == "held"]
    assert {(r[3], r[4]) for r in held} == {("pending", "manual")}
    assert [r[7] for r in held] == [r[5] for r in held]  # a full budget of attempts
    assert held[0][8] == "approved by alice: upstream fixed"
    (req,) = requests(url)
    assert req[:4] == ("approve", "held", "alice", "upstream fixed")
    assert [r["slot"] for r in req[4]["runs"]] == [(T0 + i * HOUR).isoformat() for i in range(3)]
    assert {r["before"]["status"] for r in req[4]["runs"]} == {"awaiting_approval"}
    assert req[4]["runs"][2]["before"]["attempt"] == 2
    proc = RunnerProcess(APP, url, "--poll-interval", "0.1", log=tmp_path / "r.log")
    try:
        eventually(lambda: scalar(url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'held'"
                                       " AND status = 'succeeded'") == 3, timeout=30)
    finally:
        assert proc.terminate() == 0, proc.output()
    ran = rows(url, "SELECT schedule_slot, trigger, attempt, fence FROM runner.job_runs WHERE job_name = 'held'"
                    " ORDER BY schedule_slot")
    assert ran == [(T0, "manual", 1, 1), (T0 + HOUR, "manual", 1, 1), (T0 + 2 * HOUR, "manual", 3, 3)]
    assert scalar(url, "SELECT count(*) FROM bf_done") == 3
    # the other job's held runs were not touched
    assert {r[3] for r in state(url) if r[0] == "other"} == {"awaiting_approval"}


def test_skip_records_the_reason(url: str) -> None:
    out = cli("skip", "held", "--slot", (T0 + HOUR).isoformat(), "--reason", "data never arrived", "--by", "bob",
              "--yes", url=url)
    assert out.returncode == 0, out.stderr
    assert "1 run skipped; request" in out.stdout
    got = {r[1]: r for r in state(url) if r[0] == "held"}
    assert got[T0 + HOUR][3:5] == ("skipped", "catch_up")
    assert got[T0 + HOUR][8] == "skipped by bob: data never arrived"
    assert scalar(url, "SELECT finished_at IS NOT NULL FROM runner.job_runs WHERE job_name = 'held'"
                       " AND schedule_slot = %s", (T0 + HOUR,))
    assert {got[T0][3], got[T0 + 2 * HOUR][3]} == {"awaiting_approval"}
    (req,) = requests(url)
    assert req[:4] == ("skip", "held", "bob", "data never arrived")
    assert [(r["slot"], r["after"]) for r in req[4]["runs"]] == [((T0 + HOUR).isoformat(), {"status": "skipped"})]
    assert req[4]["selection"]["slot"] == (T0 + HOUR).isoformat()


def test_skipping_a_cover_skips_the_runs_coalesced_into_it(url: str) -> None:
    """A held run that late slots were coalesced into is their cover: skipping it decides them
    too (skipped with it, listed in the request), so none is left coalesced into nothing —
    uncovered, unlisted by the gap scan and flagged by the audit."""
    with psycopg.connect(url, autocommit=True) as c:
        for k in (1, 2):
            slot = T0 + 2 * HOUR - k * timedelta(minutes=20)
            c.execute(
                "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date,"
                " window_start, window_end, status, trigger, idempotency_key, status_reason,"
                " coalesced_into_slot, finished_at) VALUES ('held', %s, '', %s, %s, %s, 'coalesced', 'catch_up',"
                " 'k', 'misfire=coalesce: covered by the newest slot', %s, now())",
                (slot, slot.date(), slot, slot, T0 + 2 * HOUR))
    out = cli("skip", "held", "--slot", (T0 + 2 * HOUR).isoformat(), "--reason", "window lost", "--by", "bob",
              "--yes", url=url)
    assert out.returncode == 0, out.stderr
    followers = rows(url, "SELECT status, status_reason FROM runner.job_runs WHERE job_name = 'held'"
                          " AND coalesced_into_slot IS NOT NULL ORDER BY schedule_slot")
    cover = scalar(url, "SELECT id FROM runner.job_runs WHERE job_name = 'held' AND schedule_slot = %s",
                   (T0 + 2 * HOUR,))
    assert followers == [("skipped", f"skipped with run {cover} (coalesced into it) by bob: window lost")] * 2
    (req,) = requests(url)
    assert [r["cover_run_id"] for r in req[4]["coalesced_runs"]] == [cover, cover]
    assert scalar(url, "SELECT count(*) FROM runner.check_v1() WHERE invariant = 'coalesced_into_nothing'") == 0
    assert scalar(url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'held' AND NOT"
                       " runner.run_covered_v1(job_name, partition_key, status, coalesced_into_slot)") == 2


def test_partition_selection(url: str) -> None:
    out = cli("approve", "other", "--partition", "q", "--reason", "only q", "--yes", "--json", url=url)
    assert out.returncode == 0, out.stderr
    assert [r["partition_key"] for r in json.loads(out.stdout)["runs"]] == ["q"]
    assert {(r[2], r[3]) for r in state(url) if r[0] == "other"} == {("p", "awaiting_approval"), ("q", "pending")}


def test_without_a_reason_or_confirmation_nothing_is_written(url: str) -> None:
    before = state(url)
    no_reason = cli("approve", "held", "--yes", url=url)
    assert no_reason.returncode == 2 and "--reason" in no_reason.stderr
    assert cli("skip", "held", "--reason", "  ", "--yes", url=url).returncode == 2
    both = cli("skip", "held", "--slot", T0.isoformat(), "--from", T0.isoformat(), "--to", T0.isoformat(),
               "--reason", "r", "--yes", url=url)
    assert both.returncode == 2 and "not both" in both.stderr
    unconfirmed = cli("approve", "held", "--reason", "r", url=url)  # stdin is no terminal: no
    assert unconfirmed.returncode == 1
    assert unconfirmed.stderr.strip().splitlines()[-1].startswith("runner: error: not confirmed")
    assert "awaiting approval" in unconfirmed.stdout  # it showed what it would touch
    answered_no = cli("skip", "held", "--reason", "r", url=url, stdin="n\n")
    assert answered_no.returncode == 1
    nothing = cli("approve", "held", "--slot", (T0 + 9 * HOUR).isoformat(), "--reason", "r", "--yes", url=url)
    assert nothing.returncode == 1
    assert nothing.stderr == (f"runner: error: no run awaiting approval for job 'held', slot "
                              f"{(T0 + 9 * HOUR).isoformat()}; nothing to approve\n")
    assert state(url) == before
    assert requests(url) == []


def test_a_run_decided_meanwhile_is_left_alone(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        planned = approvals.plan(conn, "approve", "held")
        conn.execute("UPDATE runner.job_runs SET status = 'skipped' WHERE job_name = 'held' AND schedule_slot = %s",
                     (T0,))
        done = approvals.decide(conn, planned, "go", "erin")
        assert len(done["runs"]) == 2 and len(done["left_alone"]) == 1
        assert requests(url)[0][4]["left_alone"] == done["left_alone"]
        conn.execute("UPDATE runner.job_runs SET status = 'skipped' WHERE job_name = 'other'")
        with pytest.raises(operate.OperatorError, match="no run awaiting approval"):
            approvals.plan(conn, "skip", "other")
