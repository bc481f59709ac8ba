"""The operator's commands and views: runner status (runner.job_health, runner.alerts),
rerun, pause and resume, each audited in runner.requests.

Views take the database's now(): tests of thresholds run in one transaction (the ``tx``
fixture), where now() is fixed, and place hand-made runs just before and just after each
threshold."""

from __future__ import annotations

import getpass
import json
import os
import pty
import socket
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.support import RunnerProcess, eventually, rows, run_cli, runner_cmd, scalar

APP = "tests/apps/operators.py:app"
SLOT = datetime(2026, 1, 1, tzinfo=UTC)


# -- factories ----------------------------------------------------------------------------


def db_now(conn: psycopg.Connection[Any]) -> datetime:
    return conn.execute("SELECT now()").fetchone()[0]


def make_job(conn: psycopg.Connection[Any], name: str, *, every: timedelta | None = timedelta(hours=1),
             cron: str | None = None, partitions: list[str] | None = None, paused: bool = False,
             registered: datetime | None = None, **options: Any) -> None:
    registered = registered or datetime(2025, 1, 1, tzinfo=UTC)
    conn.execute(
        "INSERT INTO runner.jobs (job_name, schedule_kind, cron, every_interval, partitions, options,"
        " paused, track_from, first_registered_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (name, "cron" if cron else "every", cron, None if cron else every, partitions, Jsonb(options),
         paused, registered, registered))


def make_run(conn: psycopg.Connection[Any], job: str, slot: datetime, *, partition: str = "",
             status: str = "succeeded", started: datetime | None = None, finished: datetime | None = None,
             attempt: int = 1, last_error: str | None = None, processed: int = 0, failed: int = 0,
             updated: datetime | None = None, next_attempt: datetime | None = None) -> int:
    row = conn.execute(
        "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date, window_start,"
        " window_end, status, trigger, attempt, fence, idempotency_key, started_at, finished_at,"
        " last_error, processed_count, failed_count, updated_at, next_attempt_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, 'schedule', %s, %s, 'key', %s, %s, %s, %s, %s,"
        " coalesce(%s, now()), %s) RETURNING id",
        (job, slot, partition, slot.date(), slot, slot, status, attempt, attempt, started, finished,
         last_error, processed, failed, updated or finished, next_attempt)).fetchone()
    return int(row[0])


def make_attempt(conn: psycopg.Connection[Any], run_id: int, *, attempt: int = 1, status: str = "failed",
                 finished: datetime | None = None, error: str | None = None) -> None:
    conn.execute(
        "INSERT INTO runner.attempts (run_id, attempt, fence, trigger, owner_host, owner_pid,"
        " owner_instance, lock_key, status, finished_at, error_class, error_message)"
        " VALUES (%s, %s, %s, 'schedule', 'host-a', 4242, gen_random_uuid(), 1, %s, %s, %s, %s)",
        (run_id, attempt, attempt, status, finished, "RuntimeError" if error else None, error))


def alerts(conn: psycopg.Connection[Any], job: str) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT kind, run_id, detail, since FROM runner.alerts WHERE job_name = %s"
                        " ORDER BY kind, run_id", (job,)).fetchall()


def kinds(conn: psycopg.Connection[Any], job: str) -> list[str]:
    return [a[0] for a in alerts(conn, job)]


def health(conn: psycopg.Connection[Any], job: str) -> dict[str, Any]:
    cur = conn.execute("SELECT * FROM runner.job_health WHERE job_name = %s", (job,))
    names = [d.name for d in cur.description]
    return dict(zip(names, cur.fetchone(), strict=True))


def one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("runner: error: "), lines
    return lines[0]


def cli(*args: str, url: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The CLI with stdin given (never the developer's terminal)."""
    return run_cli(*args, url=url, stdin=stdin)


def requests(url: str) -> list[dict[str, Any]]:
    with psycopg.connect(url) as conn:
        cur = conn.execute("SELECT * FROM runner.requests ORDER BY id")
        names = [d.name for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


# -- runner.job_health ------------------------------------------------------------------


def test_job_health_last_success_counts_and_lag(tx: psycopg.Connection[Any]) -> None:
    now = db_now(tx)
    make_job(tx, "h", partitions=["a", "b"], owner="team-h")
    hour = timedelta(hours=1)
    old = make_run(tx, "h", SLOT, partition="a", started=now - 30 * hour, finished=now - 30 * hour)
    ok1 = make_run(tx, "h", SLOT + hour, partition="a", started=now - 3 * hour, finished=now - 2 * hour)
    make_run(tx, "h", SLOT + hour, partition="b", started=now - 5 * hour, finished=now - 4 * hour)
    make_run(tx, "h", SLOT + 2 * hour, partition="a", status="dead", finished=now - hour, attempt=3)
    make_run(tx, "h", SLOT + 3 * hour, partition="a", status="failed", updated=now - hour,
             next_attempt=now + hour)
    make_run(tx, "h", SLOT + 3 * hour, partition="b", status="failed", updated=now - 25 * hour)
    make_run(tx, "h", SLOT + 4 * hour, partition="a", status="running", processed=7, failed=1,
             started=now - timedelta(minutes=1))
    make_run(tx, "h", SLOT + 4 * hour, partition="b", status="succeeded", processed=5,
             started=now - 10 * hour, finished=now - 10 * hour)
    h = health(tx, "h")
    assert (h["owner"], h["paused"]) == ("team-h", False)
    # the latest completion, not the latest slot
    assert (h["last_success_run_id"], h["last_success_at"], h["last_success_slot"]) == (
        ok1, now - 2 * hour, SLOT + hour)
    assert h["last_success_business_date"] == (SLOT + hour).date()
    assert h["last_slot"] == SLOT + 4 * hour
    assert h["last_slot_statuses"] == {"running": 1, "succeeded": 1}
    assert (h["last_processed"], h["last_failed"]) == (12, 1)
    assert (h["succeeded_24h"], h["failed_24h"], h["dead_24h"]) == (3, 1, 1)
    assert h["oldest_unfinished_slot"] == SLOT + 3 * hour
    assert h["lag"] == now - (SLOT + 3 * hour)
    assert old != ok1


def test_job_health_of_a_job_with_no_runs(tx: psycopg.Connection[Any]) -> None:
    make_job(tx, "fresh", paused=True)
    h = health(tx, "fresh")
    assert h["paused"] is True
    assert h["last_success_at"] is None and h["last_slot"] is None
    assert (h["succeeded_24h"], h["failed_24h"], h["dead_24h"]) == (0, 0, 0)
    assert h["lag"] == timedelta(0)


# -- runner.alerts ----------------------------------------------------------------------


def test_dead_runs_alert_with_their_error_until_handled(tx: psycopg.Connection[Any]) -> None:
    now = db_now(tx)
    make_job(tx, "d", owner="team-d")
    dead = make_run(tx, "d", SLOT, partition="t'1", status="dead", attempt=5, finished=now - timedelta(days=9),
                    last_error="ValueError: bad input")
    make_run(tx, "d", SLOT + timedelta(hours=1), status="failed", last_error="RuntimeError: again")
    rows_ = tx.execute("SELECT kind, owner, run_id, detail, since FROM runner.alerts"
                       " WHERE job_name = 'd' AND kind = 'dead'").fetchall()
    assert len(rows_) == 1
    kind, owner, run_id, detail, since = rows_[0]
    assert (kind, owner, run_id, since) == ("dead", "team-d", dead, now - timedelta(days=9))
    assert "dead after 5 attempt(s): ValueError: bad input" in detail
    assert "partition 't''1'" in detail
    tx.execute("UPDATE runner.job_runs SET status = 'pending' WHERE id = %s", (dead,))
    assert "dead" not in kinds(tx, "d")


def test_abandoned_attempts_alert_for_24_hours(tx: psycopg.Connection[Any]) -> None:
    now = db_now(tx)
    make_job(tx, "ab")
    recent = make_run(tx, "ab", SLOT, status="succeeded", finished=now)
    older = make_run(tx, "ab", SLOT + timedelta(hours=1), status="succeeded", finished=now)
    make_attempt(tx, recent, status="abandoned", finished=now - timedelta(hours=24) + timedelta(seconds=1),
                 error="the owner's lock session ended")
    make_attempt(tx, older, status="abandoned", finished=now - timedelta(hours=24) - timedelta(seconds=1))
    make_attempt(tx, older, attempt=2, status="failed", finished=now)
    found = [a for a in alerts(tx, "ab") if a[0] == "abandoned"]
    assert [a[1] for a in found] == [recent]
    assert "on host-a pid 4242 was abandoned: the owner's lock session ended" in found[0][2]
    assert "the run is now succeeded" in found[0][2]


def test_slow_runs_over_twice_the_p95_of_the_last_successes(tx: psycopg.Connection[Any]) -> None:
    now = db_now(tx)
    s = timedelta(seconds=1)
    for job, count, usual in (("slow", 20, 10 * s), ("few", 19, 10 * s), ("tiny", 20, s / 10)):
        make_job(tx, job)
        for i in range(count):  # the baseline: `count` successes of `usual` each
            end = now - timedelta(hours=30) + i * s
            make_run(tx, job, SLOT + i * s, started=end - usual, finished=end)
    p95 = 10 * s  # 20 (or 21) samples: the p95 is the 20th smallest, 10 s
    under = make_run(tx, "slow", SLOT + 100 * s, status="running", started=now - 2 * p95 + s)
    over = make_run(tx, "slow", SLOT + 101 * s, status="running", started=now - 2 * p95 - s)
    took = make_run(tx, "slow", SLOT + 102 * s, started=now - 2 * p95 - s, finished=now)
    found = {a[1]: a for a in alerts(tx, "slow") if a[0] == "slow"}
    assert set(found) == {over, took}, found
    assert under not in found
    assert "running for 21.0s, over 2 x the p95 (10.0s) of the last 21 successful runs" in found[over][2]
    assert found[over][3] == now - 2 * p95 - s + 2 * p95
    assert "took 21.0s" in found[took][2]
    # fewer than 20 successes: no baseline, no alert
    make_run(tx, "few", SLOT + 100 * s, status="running", started=now - timedelta(hours=1))
    assert "slow" not in kinds(tx, "few")
    # sub-second baselines alert only past 1 second
    make_run(tx, "tiny", SLOT + 100 * s, status="running", started=now - s + s / 10)
    assert "slow" not in kinds(tx, "tiny")
    late = make_run(tx, "tiny", SLOT + 101 * s, status="running", started=now - s - s / 10)
    assert [a[1] for a in alerts(tx, "tiny") if a[0] == "slow"] == [late]


def test_stale_when_the_last_success_is_older_than_stale_after(tx: psycopg.Connection[Any]) -> None:
    now = db_now(tx)
    hour, s = timedelta(hours=1), timedelta(seconds=1)
    for job in ("fresh", "stale", "never", "paused", "unset"):
        make_job(tx, job, stale_after_seconds=3600, paused=job == "paused",
                 registered=now - 2 * hour)
    tx.execute("UPDATE runner.jobs SET options = '{}' WHERE job_name = 'unset'")
    make_run(tx, "fresh", SLOT, finished=now - hour + s)
    stale = make_run(tx, "stale", SLOT, finished=now - hour - s)
    make_run(tx, "unset", SLOT, finished=now - 10 * hour)
    make_run(tx, "paused", SLOT, finished=now - 10 * hour)
    assert "stale" not in kinds(tx, "fresh")
    [(_kind, run_id, detail, since)] = [a for a in alerts(tx, "stale") if a[0] == "stale"]
    assert (run_id, since) == (stale, now - s)
    assert "older than stale_after (3600s)" in detail
    [never] = [a for a in alerts(tx, "never") if a[0] == "stale"]
    assert never[1] is None and "no success since the job was registered" in never[2]
    assert never[3] == now - hour
    assert "stale" not in kinds(tx, "paused") + kinds(tx, "unset")


def test_late_when_the_latest_slot_past_its_grace_is_not_done(tx: psycopg.Connection[Any]) -> None:
    now = db_now(tx)
    s = timedelta(seconds=1)
    # cron jobs: the latest slot in the ledger whose deadline (slot + grace) has passed
    make_job(tx, "in-time", cron="* * * * *", grace_seconds=60)
    make_run(tx, "in-time", now - 60 * s + s, status="running", started=now)
    make_job(tx, "late", cron="* * * * *", grace_seconds=60, owner="team-late")
    make_run(tx, "late", now - 60 * s - s - 60 * s, status="succeeded", finished=now)
    open_run = make_run(tx, "late", now - 60 * s - s, status="running", started=now)
    make_job(tx, "parted", cron="* * * * *", partitions=["a", "b"], grace_seconds=60)
    make_run(tx, "parted", now - 120 * s, partition="a", finished=now)
    make_job(tx, "done", cron="* * * * *", partitions=["a", "b"], grace_seconds=60)
    make_run(tx, "done", now - 120 * s, partition="a", finished=now)
    make_run(tx, "done", now - 120 * s, partition="b", status="skipped")
    make_job(tx, "quiet", cron="* * * * *", grace_seconds=60, paused=True)
    make_run(tx, "quiet", now - 120 * s, status="dead", finished=now)
    assert "late" not in kinds(tx, "in-time")
    [late] = [a for a in alerts(tx, "late") if a[0] == "late"]
    assert late[1] == open_run and late[3] == now - s
    assert "not done by" in late[2] and "(grace 60s): 0 of 1 run(s) done; open: running" in late[2]
    [parted] = [a for a in alerts(tx, "parted") if a[0] == "late"]
    assert parted[1] is None and "1 of 2 run(s) done" in parted[2]
    assert "late" not in kinds(tx, "done")
    assert kinds(tx, "quiet") == ["dead"]  # paused: its dead run alerts, its lateness does not


def test_late_every_slots_are_computed_even_with_no_run(tx: psycopg.Connection[Any]) -> None:
    now = db_now(tx)
    grace, hour = timedelta(seconds=600), timedelta(hours=1)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    slot = epoch + ((now - grace - epoch) // hour) * hour
    make_job(tx, "nobody-ran", every=hour, grace_seconds=600)
    make_job(tx, "ran", every=hour, grace_seconds=600)
    make_run(tx, "ran", slot, finished=now)
    make_job(tx, "new", every=hour, grace_seconds=600, registered=slot + timedelta(microseconds=1))
    make_job(tx, "default-grace", every=hour)  # no grace_seconds: 300 s
    [late] = [a for a in alerts(tx, "nobody-ran") if a[0] == "late"]
    assert late[1] is None and late[3] == slot + grace
    assert "(grace 600s): no run at all" in late[2]
    assert "late" not in kinds(tx, "ran")
    assert "late" not in kinds(tx, "new")  # not judged before its tracked range starts
    [default] = [a for a in alerts(tx, "default-grace") if a[0] == "late"]
    assert "(grace 300s)" in default[2]


# -- runner status ----------------------------------------------------------------------


def test_status_on_a_ledger_made_by_a_real_runner(db_url: str, tmp_path: Path) -> None:
    proc = RunnerProcess(APP, db_url, "--poll-interval", "0.2", log=tmp_path / "runner.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'ok'"
                                          " AND status = 'succeeded'") >= 3
                   and scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'nope'"
                                      " AND status = 'failed'") >= 1,
                   timeout=30, message="three ok runs and one failed nope run")
    finally:
        assert proc.terminate() == 0, proc.output()
    out = run_cli("status", "--json", "--app", APP, url=db_url)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    now = datetime.fromisoformat(report["now"])
    jobs = {j["job_name"]: j for j in report["jobs"]}
    assert set(jobs) == {"ok", "other", "nope"}
    ok, nope = jobs["ok"], jobs["nope"]
    assert ok["owner"] == "team-ok" and ok["paused"] is False
    assert ok["succeeded_24h"] >= 3 and ok["failed_24h"] == 0 and ok["dead_24h"] == 0
    last = datetime.fromisoformat(ok["last_success_at"])
    assert now - timedelta(seconds=60) < last <= now
    assert datetime.fromisoformat(ok["last_success_slot"]) <= last
    assert ok["last_slot_statuses"] == {"succeeded": 1} and ok["last_processed"] == 1
    assert now < datetime.fromisoformat(ok["next_slot"]) <= now + timedelta(seconds=1)
    assert nope["owner"] == "team-nope" and nope["failed_24h"] >= 1 and nope["last_success_at"] is None
    assert nope["lag"] > 0 and nope["oldest_unfinished_slot"] is not None
    for job in jobs.values():
        assert "missing" in job
    for alert in report["alerts"]:
        assert set(alert) == {"kind", "job_name", "owner", "run_id", "detail", "since"}
    # without the app the next slot comes from the definitions in the ledger (issue 30); the
    # table names every job
    bare = json.loads(run_cli("status", "--json", url=db_url).stdout)
    bare_now = datetime.fromisoformat(bare["now"])
    for j in bare["jobs"]:
        assert bare_now < datetime.fromisoformat(j["next_slot"]) <= bare_now + timedelta(seconds=1), j
    table = run_cli("status", "--app", APP, url=db_url)
    assert table.returncode == 0, table.stderr
    assert "job health at" in table.stdout and "team-ok" in table.stdout and "nope" in table.stdout
    only = json.loads(run_cli("status", "--json", "--job", "nope", url=db_url).stdout)
    assert [j["job_name"] for j in only["jobs"]] == ["nope"]


def test_status_shows_alerts_below_the_table_and_counts_missing_slots(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        make_job(conn, "a'job [red]x[/]", owner="team-a")
        make_job(conn, "b")
        make_run(conn, "a'job [red]x[/]", SLOT, status="dead", finished=SLOT, last_error="KeyError: 'tenant'")
        if scalar(db_url, "SELECT to_regclass('runner.missing_slots')") is None:
            # revision 0003's gap scan, where it is not there yet: a stand-in with its job_name
            conn.execute("CREATE VIEW runner.missing_slots AS SELECT 'b'::text AS job_name,"
                         " g AS schedule_slot FROM generate_series(1, 3) g")
    expected = dict(rows(db_url, "SELECT job_name, count(*) FROM runner.missing_slots GROUP BY 1"))
    report = json.loads(run_cli("status", "--json", url=db_url).stdout)
    assert {j["job_name"]: j["missing"] for j in report["jobs"]} == {
        "a'job [red]x[/]": expected.get("a'job [red]x[/]", 0), "b": expected.get("b", 0)}
    out = run_cli("status", url=db_url)
    assert out.returncode == 0, out.stderr
    table, _, below = out.stdout.partition("alerts")
    assert "a'job [red]x[/]" in table  # names are shown as they are, never as markup
    assert "dead" in below and "KeyError: 'tenant'" in below and "team-a" in below


def test_status_says_when_there_are_no_alerts(db_url: str) -> None:
    out = run_cli("status", url=db_url)
    assert out.returncode == 0, out.stderr
    assert "no alerts" in out.stdout


def test_status_lists_jobs_no_runner_has_synced_yet(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        make_job(conn, "ok")
    report = json.loads(run_cli("status", "--json", "--app", APP, url=db_url).stdout)
    jobs = {j["job_name"]: j for j in report["jobs"]}
    assert set(jobs) == {"ok", "other", "nope"}
    assert set(jobs["nope"]) == set(jobs["ok"])  # one shape for every row
    assert jobs["nope"]["owner"] == "team-nope" and jobs["nope"]["last_success_at"] is None
    assert jobs["nope"]["next_slot"] is not None


# -- runner rerun -----------------------------------------------------------------------


def seed(db_url: str, job: str = "ok", status: str = "dead", attempt: int = 3,
         partition: str = "") -> int:
    with psycopg.connect(db_url, autocommit=True) as conn:
        run_id = make_run(conn, job, SLOT, partition=partition, status=status, attempt=attempt,
                          started=SLOT, finished=None if status in ("running", "pending") else SLOT,
                          last_error="RuntimeError: boom" if status == "dead" else None,
                          next_attempt=SLOT if status == "pending" else None)
        last = {"running": "running", "succeeded": "succeeded", "dead": "dead"}.get(status, "failed")
        for n in range(1, attempt + 1):
            make_attempt(conn, run_id, attempt=n, status=last if n == attempt else "failed",
                         finished=None if last == "running" else SLOT, error=f"boom {n}")
    return run_id


def run_state(db_url: str, run_id: int) -> tuple[Any, ...]:
    return rows(db_url, "SELECT status, trigger, attempt, fence, uncounted_attempts FROM runner.job_runs"
                        " WHERE id = %s", (run_id,))[0]


def test_rerun_of_dead_runs_gets_manual_attempts_from_a_real_runner(db_url: str, tmp_path: Path) -> None:
    ok = seed(db_url, "ok", attempt=3)
    nope = seed(db_url, "nope", attempt=2)  # nope allows 2 attempts: it had them all
    has_effects = scalar(db_url, "SELECT to_regclass('runner.effects') IS NOT NULL")
    if has_effects:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("INSERT INTO runner.effects (effect_key, run_id, job_name, status, attempt, fence)"
                         " VALUES ('mail:run-1', %s, 'ok', 'planned', 1, 1)", (ok,))
    # the slot in another offset: the same instant
    out = cli("rerun", "ok", "--slot", "2026-01-01T09:00:00+09:00", "--reason", "upstream fixed",
              "--by", "alice", "--yes", url=db_url)
    assert out.returncode == 0, out.stderr
    assert f"run {ok} of job 'ok', slot 2026-01-01T00:00:00+00:00" in out.stdout
    assert "status dead" in out.stdout and "RuntimeError: boom" in out.stdout
    assert "boom 3" in out.stdout  # its attempts
    if has_effects:
        assert "mail:run-1" in out.stdout
    assert "stop counting against max_attempts" in out.stdout
    assert run_state(db_url, ok) == ("pending", "manual", 3, 3, 3)
    out = cli("rerun", "nope", "--slot", "2026-01-01T00:00:00Z", "--reason", "retry once more", "--yes",
              "--json", url=db_url)
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["run"]["status"] == "dead" and len(shown["attempts"]) == 2
    assert shown["queued"]["status"] == "pending" and shown["request"]["who"] == (
        f"{getpass.getuser()}@{socket.gethostname()}")

    [first, second] = requests(db_url)
    assert (first["action"], first["job_name"], first["who"], first["reason"]) == (
        "rerun", "ok", "alice", "upstream fixed")
    assert first["db_user"] and first["requested_at"] is not None
    [touched] = first["touched"]["runs"]
    assert touched["run_id"] == ok and touched["slot"] == "2026-01-01T00:00:00+00:00"
    assert touched["partition_key"] == ""
    assert touched["before"]["status"] == "dead" and touched["after"] == {
        "status": "pending", "trigger": "manual", "uncounted_attempts": 3}
    assert first["touched"]["force"] is False
    assert second["touched"]["runs"][0]["run_id"] == nope

    proc = RunnerProcess(APP, db_url, "--poll-interval", "0.2", log=tmp_path / "runner.log")
    try:
        eventually(lambda: run_state(db_url, ok)[0] == "succeeded" and run_state(db_url, nope)[0] == "failed",
                   timeout=30, message="both reruns attempted")
    finally:
        assert proc.terminate() == 0, proc.output()
    assert run_state(db_url, ok) == ("succeeded", "manual", 4, 4, 3)
    assert rows(db_url, "SELECT attempt, trigger, status FROM runner.attempts WHERE run_id = %s"
                        " AND fence = 4", (ok,)) == [(4, "manual", "succeeded")]
    # nope failed again, but the rerun's attempt was the first of a fresh budget: a retry waits
    assert run_state(db_url, nope) == ("failed", "manual", 3, 3, 2)
    assert "trigger manual" in scalar(db_url, "SELECT last_error FROM runner.job_runs WHERE id = %s", (nope,))
    assert rows(db_url, "SELECT attempt, trigger, status FROM runner.attempts WHERE run_id = %s"
                        " AND fence = 3", (nope,)) == [(3, "manual", "failed")]


def test_rerun_refuses_a_running_run_and_writes_nothing(db_url: str) -> None:
    run_id = seed(db_url, status="running", attempt=2)
    out = cli("rerun", "ok", "--slot", "2026-01-01T00:00:00Z", "--reason", "stuck?", "--yes", url=db_url)
    assert out.returncode == 1
    assert "is running (attempt 2, fence 2)" in one_line_error(out)
    assert "status running" in out.stdout  # the impact is still shown
    assert run_state(db_url, run_id) == ("running", "schedule", 2, 2, 0)
    assert requests(db_url) == []


def test_rerun_of_a_paused_jobs_run_says_it_waits(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        make_job(conn, "ok", paused=True)
    run_id = seed(db_url)
    out = cli("rerun", "ok", "--slot", "2026-01-01T00:00:00Z", "--reason", "r", "--yes", url=db_url)
    assert out.returncode == 0, out.stderr
    assert "job 'ok' is paused: the attempt starts once it is resumed" in out.stdout
    assert run_state(db_url, run_id)[0] == "pending"


def test_rerun_refuses_a_pending_run(db_url: str) -> None:
    run_id = seed(db_url, status="pending", attempt=1)
    out = cli("rerun", "ok", "--slot", "2026-01-01T00:00:00Z", "--reason", "again", "--yes", url=db_url)
    assert out.returncode == 1
    assert "already pending" in one_line_error(out)
    assert run_state(db_url, run_id)[0] == "pending" and requests(db_url) == []


def test_rerun_of_a_succeeded_run_needs_force(db_url: str) -> None:
    run_id = seed(db_url, status="succeeded", attempt=1)
    out = cli("rerun", "ok", "--slot", "2026-01-01T00:00:00Z", "--reason", "wrong data", "--yes", url=db_url)
    assert out.returncode == 1
    assert "already succeeded: pass --force" in one_line_error(out)
    assert run_state(db_url, run_id)[0] == "succeeded" and requests(db_url) == []
    out = cli("rerun", "ok", "--slot", "2026-01-01T00:00:00Z", "--reason", "wrong data", "--force", "--yes",
              url=db_url)
    assert out.returncode == 0, out.stderr
    assert run_state(db_url, run_id) == ("pending", "manual", 1, 1, 1)
    [request] = requests(db_url)
    assert request["touched"]["force"] is True
    assert request["touched"]["runs"][0]["before"]["status"] == "succeeded"


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_rerun_without_a_reason_is_a_usage_error(db_url: str, reason: str | None) -> None:
    run_id = seed(db_url)
    args = ["rerun", "ok", "--slot", "2026-01-01T00:00:00Z", "--yes"]
    out = cli(*args, *([] if reason is None else ["--reason", reason]), url=db_url)
    assert out.returncode == 2, out.stderr
    assert "--reason" in out.stderr
    assert run_state(db_url, run_id)[0] == "dead" and requests(db_url) == []


def test_rerun_asks_and_no_answer_is_no(db_url: str) -> None:
    run_id = seed(db_url)
    out = cli("rerun", "ok", "--slot", "2026-01-01T00:00:00Z", "--reason", "r", url=db_url, stdin="y\n")
    assert out.returncode == 1
    assert "not confirmed" in one_line_error(out) and "--yes" in out.stderr
    assert "status dead" in out.stdout
    assert run_state(db_url, run_id)[0] == "dead" and requests(db_url) == []


@pytest.mark.parametrize(("answer", "code", "status"), [("n\n", 1, "dead"), ("y\n", 0, "pending")])
def test_rerun_confirmation_on_a_terminal(db_url: str, answer: str, code: int, status: str) -> None:
    run_id = seed(db_url)
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            runner_cmd("rerun", "ok", "--slot", "2026-01-01T00:00:00Z", "--reason", "asked"),
            stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "RUNNER_DATABASE_URL": db_url}, cwd=Path(__file__).resolve().parent.parent)
        os.write(leader, answer.encode())
        _, stderr = proc.communicate(timeout=60)
    finally:
        os.close(leader)
        os.close(follower)
    assert proc.returncode == code, stderr
    assert "Rerun run" in stderr
    assert run_state(db_url, run_id)[0] == status
    assert len(requests(db_url)) == (1 if status == "pending" else 0)


def test_rerun_of_an_unknown_run_or_a_bad_slot(db_url: str) -> None:
    seed(db_url, partition="acme")
    out = cli("rerun", "ok", "--slot", "2026-01-01T00:00:00Z", "--reason", "r", "--yes", url=db_url)
    assert out.returncode == 1
    line = one_line_error(out)
    assert "no run of job 'ok' at slot 2026-01-01T00:00:00+00:00" in line
    assert "that slot has runs for partition(s) 'acme': pass --partition" in line
    out = cli("rerun", "ok", "--slot", "2026-01-01T00:00:00Z", "--partition", "acme", "--reason", "r",
              "--yes", url=db_url)
    assert out.returncode == 0, out.stderr
    out = cli("rerun", "ok", "--slot", "2026-01-01T00:00:00", "--reason", "r", "--yes", url=db_url)
    assert out.returncode == 2 and "UTC offset" in out.stderr
    out = cli("rerun", "ok", "--slot", "yesterday", "--reason", "r", "--yes", url=db_url)
    assert out.returncode == 2
    assert len(requests(db_url)) == 1


# -- runner pause / resume --------------------------------------------------------------


def test_a_paused_job_gets_no_new_runs_from_a_live_runner(db_url: str, tmp_path: Path) -> None:
    proc = RunnerProcess(APP, db_url, "--poll-interval", "0.2", log=tmp_path / "runner.log")

    def newest(job: str) -> datetime | None:
        return scalar(db_url, "SELECT max(schedule_slot) FROM runner.job_runs WHERE job_name = %s", (job,))

    try:
        eventually(lambda: newest("ok") is not None, timeout=30, message="ok ran")
        out = cli("pause", "ok", "--reason", "vendor maintenance", "--by", "bob", "--yes", url=db_url)
        assert out.returncode == 0, out.stderr
        assert "will pause it" in out.stdout and "paused; request" in out.stdout
        paused_at = scalar(db_url, "SELECT now()")
        # every claim statement that starts after the pause sees it: once `other` has runs
        # for slots well after it, any ok run after it would have been claimed too
        eventually(lambda: (newest("other") or SLOT) > paused_at + timedelta(seconds=2), timeout=30,
                   message="other keeps running")
        assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'ok'"
                              " AND schedule_slot > %s", (paused_at,)) == 0
        status = json.loads(run_cli("status", "--json", "--job", "ok", url=db_url).stdout)
        assert status["jobs"][0]["paused"] is True
        again = cli("pause", "ok", "--reason", "twice", "--yes", url=db_url)
        assert again.returncode == 0 and "already paused; nothing written" in again.stdout
        out = cli("resume", "ok", "--reason", "vendor back", "--by", "bob", "--yes", "--json", url=db_url)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["changed"] is True
        resumed_at = scalar(db_url, "SELECT now()")
        eventually(lambda: (newest("ok") or SLOT) > resumed_at, timeout=30, message="ok runs again")
    finally:
        assert proc.terminate() == 0, proc.output()
    pause, resume = requests(db_url)
    assert (pause["action"], pause["job_name"], pause["who"], pause["reason"]) == (
        "pause", "ok", "bob", "vendor maintenance")
    assert pause["touched"]["jobs"] == [{"job_name": "ok", "before": {"paused": False},
                                         "after": {"paused": True}}]
    assert (resume["action"], resume["reason"]) == ("resume", "vendor back")
    assert resume["touched"]["jobs"][0]["after"] == {"paused": False}


def test_pause_needs_a_reason_a_known_job_and_a_confirmation(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        make_job(conn, "ok")
    out = cli("pause", "ok", "--yes", url=db_url)
    assert out.returncode == 2 and "--reason" in out.stderr
    out = cli("pause", "ok", "--reason", "r", url=db_url)
    assert out.returncode == 1 and "not confirmed" in one_line_error(out)
    out = cli("pause", "nosuchjob", "--reason", "r", "--yes", url=db_url)
    assert out.returncode == 1 and "no job 'nosuchjob'" in one_line_error(out)
    out = cli("resume", "ok", "--reason", "r", "--yes", url=db_url)
    assert out.returncode == 0 and "already not paused" in out.stdout
    assert scalar(db_url, "SELECT paused FROM runner.jobs WHERE job_name = 'ok'") is False
    assert requests(db_url) == []


def test_stale_after_comes_from_the_job_definition(tx: psycopg.Connection[Any]) -> None:
    from runner import Runner
    from runner.errors import JobDefinitionError
    from runner.store import ledger

    app = Runner()

    @app.job("watched", every="1h", stale_after="90m")
    def watched(ctx: Any) -> None: ...

    ledger.sync_jobs(tx, list(app.jobs.values()))
    assert tx.execute("SELECT options ->> 'stale_after_seconds' FROM runner.jobs"
                      " WHERE job_name = 'watched'").fetchone()[0] == "5400.0"
    assert "stale" not in kinds(tx, "watched")  # registered just now
    tx.execute("UPDATE runner.jobs SET first_registered_at = now() - interval '91 minutes'"
               " WHERE job_name = 'watched'")
    assert "stale" in kinds(tx, "watched")
    with pytest.raises(JobDefinitionError, match="stale_after"):
        Runner().job("x", every="1s", stale_after="soon")


def test_unknown_and_duplicate_effects_alert(tx: psycopg.Connection[Any]) -> None:
    now = db_now(tx)
    make_job(tx, "fx", owner="team-fx")
    done = make_run(tx, "fx", SLOT, status="succeeded", finished=now)
    running = make_run(tx, "fx", SLOT + timedelta(hours=1), status="running")

    def effect(key: str, run: int, status: str, sends: int, age: timedelta) -> None:
        tx.execute("INSERT INTO runner.effects (effect_key, run_id, job_name, status, attempt, fence, send_count,"
                   " created_at, updated_at, sent_at, confirmed_at, confirmed_by)"
                   " VALUES (%s, %s, 'fx', %s, 1, 1, %s, %s, %s, %s, %s, %s)",
                   (key, run, status, sends, now - age, now - age, now - age,
                    now - age if status == "confirmed" else None,
                    "send" if status == "confirmed" else None))

    effect("timed-out", done, "unknown", 1, timedelta(seconds=1))
    effect("sent-long-ago", done, "sent", 1, timedelta(minutes=5, seconds=1))
    effect("sent-just-now", done, "sent", 1, timedelta(minutes=4, seconds=59))
    effect("sent-by-a-live-attempt", running, "sent", 1, timedelta(hours=1))
    effect("resent", done, "confirmed", 2, timedelta(minutes=1))
    effect("once", done, "confirmed", 1, timedelta(minutes=1))
    got = tx.execute("SELECT kind, detail FROM runner.alerts WHERE job_name = 'fx' AND kind LIKE 'effect%%'"
                     " ORDER BY kind, detail").fetchall()
    assert [(k, d.split()[1]) for k, d in got] == [
        ("effect_duplicate", "resent"), ("effect_unknown", "sent-long-ago"), ("effect_unknown", "timed-out")]


def test_a_bulk_rerun_says_its_runs_continue_from_their_checkpoints_and_keeps_them(db_url: str) -> None:
    """Issue 33: a bulk rerun takes only runs that never succeeded (failed or dead); each
    continues from its last checkpoint, as its own retry would, and the impact shown first says
    so (a single `runner rerun` clears it unless --resume). Before, nothing said it."""
    with_cp = seed(db_url, "ok", attempt=3)
    seed(db_url, "ok", attempt=3, partition="p2")
    with psycopg.connect(db_url, autocommit=True) as conn:
        make_job(conn, "ok", partitions=["", "p2"])
        conn.execute("UPDATE runner.job_runs SET checkpoint = '{\"next\": 7}', checkpoint_at = %s,"
                     " checkpoint_fence = 3, checkpoint_bytes = 11, checkpoint_summary = 'chunk 7',"
                     " checkpoints = 7 WHERE id = %s", (SLOT, with_cp))
    out = cli("rerun-many", "ok", "--from", "2025-12-31T00:00:00Z", "--to", "2026-01-02T00:00:00Z",
              "--reason", "upstream fixed", "--yes", url=db_url)
    assert out.returncode == 0, out.stderr
    assert "checkpoints: 1 of them have a checkpoint: each continues from its last one" in out.stdout, out.stdout
    assert rows(db_url, "SELECT status, checkpoint FROM runner.job_runs WHERE id = %s", (with_cp,)) == [
        ("pending", {"next": 7})]
