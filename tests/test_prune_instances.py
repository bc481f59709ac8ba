"""runner.instances is pruned (revision 0016_health): the retention duty of a real `runner
start` deletes the instance rows that stopped heartbeating long ago (runner.instance_retention,
7 days unless set) and keeps every row that may be live; the job_not_in_code alert answers
the same after the rows are gone (runner.jobs.in_code_at keeps when each job was last in a
pruned runner's code), raised for a job missing from every live runner's code past the
threshold, not for one present."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from tests.support import RunnerProcess, eventually, rows, scalar
from tests.test_operators import make_job

APP = "tests/apps/retention.py:app"  # defines `hourly` and `second`


def instance(conn: psycopg.Connection[Any], age: str, jobs: list[str], *, stopped: bool = True) -> str:
    """An instance row whose last heartbeat is ``age`` ago (stopped then, unless not)."""
    row = conn.execute(
        "INSERT INTO runner.instances (instance_id, host, pid, lock_namespace, started_at, heartbeat_at,"
        " stopped_at, jobs) VALUES (gen_random_uuid(), 'old-host', 1, 21077, now() - %s::interval,"
        " now() - %s::interval, CASE WHEN %s THEN now() - %s::interval END, %s) RETURNING instance_id",
        (age, age, stopped, age, jobs)).fetchone()
    assert row is not None
    return str(row[0])


def not_in_code(url: str, after: str | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        if after:
            conn.execute("SELECT set_config('runner.job_not_in_code_after', %s, false)", (after,))
        return conn.execute("SELECT job_name, detail, since FROM runner.alerts"
                            " WHERE kind = 'job_not_in_code' ORDER BY job_name").fetchall()


def test_the_retention_duty_prunes_old_instances_and_job_not_in_code_answers_the_same(
        db_url: str, tmp_path: Path) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        now = conn.execute("SELECT now()").fetchone()[0]
        for name in ("gone", "moved", "hourly"):  # registered recently: few slots to scan
            make_job(conn, name, registered=now - timedelta(hours=2))
        conn.execute("UPDATE runner.jobs SET synced_at = now() - interval '40 days'")
        ids = {
            # stopped 30 days ago, the last runner whose code had `gone` (and `hourly`)
            "old": instance(conn, "30 days", ["gone", "hourly"]),
            # crashed 10 days ago (never stopped, no session): the last to define `moved`
            "crashed": instance(conn, "10 days", ["moved"], stopped=False),
            # stopped 2 days ago: younger than the retention, kept
            "recent": instance(conn, "2 days", ["hourly"]),
        }
        # before pruning, as a live runner with `hourly` in its code would see it
        stand_in = instance(conn, "0 seconds", ["hourly", "second"], stopped=False)
    before = {after: not_in_code(db_url, after) for after in (None, "15 days", "35 days")}
    assert [r[0] for r in before[None]] == ["gone", "moved"]
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DELETE FROM runner.instances WHERE instance_id = %s", (stand_in,))

    proc = RunnerProcess(APP, db_url, "--prune-interval", "0.2", "--poll-interval", "0.1",
                         log=tmp_path / "runner.log")
    try:
        # live: the runner's own row, heartbeating, with `hourly` and `second` in its code
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL"
                                          " AND heartbeat_at > now() - interval '15 seconds'") == 1,
                   timeout=30, message="the runner registered")
        live = scalar(db_url, "SELECT instance_id::text FROM runner.instances WHERE host <> 'old-host'")
        # the duty has pruned: the old rows went, the others stayed
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.instances") == 2,
                   timeout=30, message="the retention duty pruned the old instance rows")
        kept = {r[0] for r in rows(db_url, "SELECT instance_id::text FROM runner.instances")}
        assert kept == {live, ids["recent"]}
        # what the pruned rows knew: when each of their jobs was last in a runner's code
        seen = dict(rows(db_url, "SELECT job_name, now() - in_code_at FROM runner.jobs"
                                 " WHERE in_code_at IS NOT NULL ORDER BY 1"))
        assert set(seen) == {"gone", "hourly", "moved"}
        assert abs(seen["gone"].days - 30) <= 1 and abs(seen["moved"].days - 10) <= 1

        # job_not_in_code after pruning: `gone` (last defined 30 days ago) and `moved` (10 days
        # ago) are in no live runner's code for longer than 24 hours; `hourly` is in the live one's
        flagged = not_in_code(db_url)
        assert [r[0] for r in flagged] == ["gone", "moved"]
        assert "since" in flagged[0][1] and "retire it" in flagged[0][1]
        # `moved` was defined 10 days ago, not at its sync 40 days ago: under a 15-day threshold
        # it is not flagged (the pruned row's heartbeat, kept in in_code_at, still counts)
        assert [r[0] for r in not_in_code(db_url, "15 days")] == ["gone"]
        assert not_in_code(db_url, "35 days") == []
        # the same alert rows (detail, since) as before pruning, whatever the threshold
        assert {after: not_in_code(db_url, after) for after in before} == before
    finally:
        assert proc.terminate() == 0, proc.output()


def test_instance_pruning_keeps_the_threshold_and_takes_the_duty_lock(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        make_job(conn, "j")
        old = instance(conn, "3 hours", ["j"])
        young = instance(conn, "30 minutes", ["j"])
        # never below 1 hour, whatever the setting says
        conn.execute("SELECT set_config('runner.instance_retention', '1 minute', false)")
        with psycopg.connect(db_url) as other:  # another pruner holds the duty's lock
            other.execute("SELECT pg_advisory_xact_lock(21077, runner.duty_lock_key_v1('prune'))")
            assert conn.execute("SELECT runner.prune_instances_v1(21077)").fetchone() == (0,)
            other.rollback()
        assert conn.execute("SELECT runner.prune_instances_v1(21077)").fetchone() == (1,)
        left = [r[0] for r in conn.execute("SELECT instance_id::text FROM runner.instances").fetchall()]
        assert left == [young], (old, left)
        # silent 20 days, but an attempt it owns is still running: kept (takeover closes the
        # attempt first; a real runner does so at once for an owner that is not live)
        owner = instance(conn, "20 days", ["j"], stopped=False)
        run = conn.execute(
            "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date, window_start,"
            " window_end, status, trigger, attempt, fence, idempotency_key, started_at)"
            " VALUES ('j', date_trunc('hour', now()) - interval '3 hours', '', current_date, now(), now(),"
            " 'running', 'schedule', 1, 1, 'k', now()) RETURNING id").fetchone()
        assert run is not None
        conn.execute("INSERT INTO runner.attempts (run_id, attempt, fence, trigger, owner_host, owner_pid,"
                     " owner_instance, lock_key) VALUES (%s, 1, 1, 'schedule', 'old-host', 1, %s, 1)",
                     (run[0], owner))
        assert conn.execute("SELECT runner.prune_instances_v1(21077)").fetchone() == (0,)
        conn.execute("UPDATE runner.attempts SET status = 'abandoned', finished_at = now()")
        assert conn.execute("SELECT runner.prune_instances_v1(21077)").fetchone() == (1,)
        # the default (7 days) keeps the 30-minute-old row and a day-old one
        conn.execute("RESET runner.instance_retention")
        instance(conn, "1 day", ["j"])
        assert conn.execute("SELECT runner.prune_instances_v1(21077)").fetchone() == (0,)
        # in_code_at never moves back
        conn.execute("UPDATE runner.jobs SET in_code_at = now() WHERE job_name = 'j'")
        instance(conn, "9 days", ["j"])
        assert conn.execute("SELECT runner.prune_instances_v1(21077)").fetchone() == (1,)
        assert conn.execute("SELECT now() - in_code_at < interval '1 minute' FROM runner.jobs"
                            " WHERE job_name = 'j'").fetchone() == (True,)
