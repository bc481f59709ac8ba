"""Watching over time (issue 30): who is alive (the runners line of `runner status`, the
no_runner alert), lag and last success from the live schedule with a backfill's progress
apart, the chart's scale, and why an attempt failed (its redacted, bounded traceback and the
handler's last heartbeat, on `runner runs --show ID`, never in the log's one line)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from runner.web.charts import timings_chart
from runner.worker.attempt import traceback_text
from tests.support import RunnerProcess, eventually, rows, run_cli, scalar
from tests.test_health_lag import health, make_minutely_job, succeed

APP = "tests/apps/watch.py:app"


def no_runner_rows(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT job_name, run_id, detail FROM runner.alerts WHERE kind = 'no_runner'").fetchall()


def test_a_failed_attempt_keeps_its_traceback_and_the_fleet_going_silent_alerts(
        db_url: str, tmp_path: Path) -> None:
    proc = RunnerProcess(APP, db_url, "--poll-interval", "0.1", log=tmp_path / "runner.log")
    try:
        run_id = eventually(lambda: scalar(db_url, "SELECT min(id) FROM runner.job_runs WHERE status = 'dead'"),
                            timeout=60, message="a dead run of boom")
        status = run_cli("status", url=db_url)
        assert status.returncode == 0, status.stderr
        assert status.stdout.splitlines()[0].startswith("runners: 1 live")
    finally:
        assert proc.terminate() == 0
    [(tb, beat, message)] = rows(db_url, "SELECT traceback, last_heartbeat, error_message FROM runner.attempts"
                                         " WHERE run_id = %s", (run_id,))
    # the whole traceback, down to the handler's own frames, with the password redacted
    assert "Traceback (most recent call last)" in tb and "in connect_upstream" in tb and "in boom" in tb
    assert "s3cret-pw" not in tb and "postgresql://etl:***@db.internal" in tb
    assert "<script>alert('tb')</script>" in tb
    assert beat["processed"] == 3 and beat["failed"] == 1 and beat["beats"] == 1 and beat["at"]
    assert "\n" not in message  # the run's error stays one line
    log = proc.output()
    assert "Traceback" not in log and "s3cret-pw" not in log

    shown = run_cli("runs", "--show", str(run_id), url=db_url)
    assert shown.returncode == 0, shown.stderr
    assert "in connect_upstream" in shown.stdout and "s3cret-pw" not in shown.stdout
    assert "last heartbeat of the handler" in shown.stdout and "processed 3" in shown.stdout
    as_json = json.loads(run_cli("runs", "--show", str(run_id), "--json", url=db_url).stdout)
    assert as_json["attempts"][0]["traceback"] == tb
    missing = run_cli("runs", "--show", "999999999", url=db_url)
    assert missing.returncode == 1 and "no run 999999999" in missing.stderr

    # every runner stopped, boom due every second: no_runner, once the setting's time passed
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT set_config('runner.no_runner_after', '1 second', false)")
        found = eventually(lambda: no_runner_rows(conn), timeout=30, message="a no_runner alert")
        [(job, run, detail)] = found
        assert job is None and run is None and "job 'boom' (and maybe others) owes slots" in detail
        conn.execute("SELECT set_config('runner.no_runner_after', '1 hour', false)")
        assert no_runner_rows(conn) == []  # just short of the threshold: none
    status = run_cli("status", url=db_url)
    assert status.stdout.splitlines()[0].startswith("runners: NONE live: the newest heartbeat was")


def test_no_runner_needs_a_silent_fleet_and_due_work(tx: psycopg.Connection[Any]) -> None:
    make_minutely_job(tx, "due", hours=1)

    def instance(beat_ago: str, stopped: bool = False) -> None:
        tx.execute("INSERT INTO runner.instances (instance_id, host, pid, lock_namespace, heartbeat_at, stopped_at)"
                   " VALUES (gen_random_uuid(), 'h', 1, 0, now() - %s::interval,"
                   " CASE WHEN %s THEN now() END)", (beat_ago, stopped))

    assert no_runner_rows(tx)  # jobs due, no runner ever registered
    instance("2 minutes")
    [(_, _, detail)] = no_runner_rows(tx)
    assert "job 'due' (and maybe others) owes slots" in detail and "0 run(s) queued" in detail
    tx.execute("SET LOCAL runner.no_runner_after = 'banana'")  # unusable: 60 s, and said so
    assert len(no_runner_rows(tx)) == 1
    [(bad,)] = tx.execute("SELECT detail FROM runner.alerts WHERE kind = 'bad_setting'").fetchall()
    assert "runner.no_runner_after is 'banana'" in bad and "no_runner uses 60 seconds" in bad
    tx.execute("SET LOCAL runner.no_runner_after = '3 minutes'")  # the newest beat 2 minutes ago
    assert no_runner_rows(tx) == []
    tx.execute("RESET runner.no_runner_after")
    instance("50 seconds", stopped=True)  # the newest beat 50 s ago: not yet 60 s
    assert no_runner_rows(tx) == []
    tx.execute("DELETE FROM runner.instances")
    instance("5 seconds")  # a live runner
    instance("2 minutes")
    assert no_runner_rows(tx) == []
    tx.execute("DELETE FROM runner.instances")
    instance("2 minutes")
    # a cron job: its schedule expanded since the last beat
    tx.execute("UPDATE runner.jobs SET schedule_kind = 'cron', cron = '* * * * *', every_interval = NULL")
    assert "job 'due'" in no_runner_rows(tx)[0][2]
    tx.execute("UPDATE runner.jobs SET cron = '0 0 1 1 *'")  # no slot in the last day: not due
    assert no_runner_rows(tx) == []
    tx.execute("UPDATE runner.jobs SET schedule_kind = 'every', cron = NULL, every_interval = '1 minute',"
               " paused = true")  # nothing due
    assert no_runner_rows(tx) == []


def test_a_backfill_does_not_make_a_healthy_job_look_behind(tx: psycopg.Connection[Any]) -> None:
    make_minutely_job(tx, "live", hours=6)
    succeed(tx, "live", "SELECT job_name, schedule_slot FROM runner.missing_slots WHERE job_name = %s")
    newest = tx.execute("SELECT max(schedule_slot) FROM runner.job_runs WHERE job_name = 'live'").fetchone()[0]
    # a backfill plan re-runs five hours-old slots: one finished just now, the others pending
    tx.execute(
        "UPDATE runner.job_runs SET replay_group_id = '00000000-0000-0000-0000-0000000000aa', trigger = 'backfill',"
        " status = CASE WHEN schedule_slot = (SELECT min(schedule_slot) FROM runner.job_runs WHERE job_name = 'live')"
        "               THEN 'succeeded' ELSE 'pending' END,"
        " finished_at = now() + interval '1 second'"
        " WHERE job_name = 'live' AND schedule_slot < (SELECT min(schedule_slot) + interval '5 minutes'"
        "                                              FROM runner.job_runs WHERE job_name = 'live')")
    h = health(tx, "live")
    assert h["lag"] < timedelta(minutes=2), h["lag"]  # every live slot succeeded
    # not the backfilled slot that finished last
    assert h["last_success_slot"] >= newest - timedelta(hours=6) + timedelta(minutes=5)
    assert h["backfill_open"] == 4 and h["backfill_oldest_slot"] is not None
    assert h["catch_up_open"] == 0
    # the live schedule's own unfinished run still counts
    tx.execute("UPDATE runner.job_runs SET status = 'failed', next_attempt_at = now()"
               " WHERE job_name = 'live' AND schedule_slot = %s", (newest - timedelta(hours=1),))
    assert health(tx, "live")["lag"] > timedelta(minutes=59)


def test_the_chart_scale_is_robust_to_one_outlier() -> None:
    timings = [{"schedule_slot": i, "duration_s": 10.0, "start_lag_s": 1.0} for i in range(30)]
    timings[3]["start_lag_s"] = 576_209.0  # a backfilled slot started days after it
    chart = timings_chart(timings)
    assert chart["top_seconds"] < 100 and chart["clipped"] == 1
    assert chart["max_lag_s"] == 576_209.0  # still told
    heights = {float(p.split(",")[1]) for p in chart["duration_points"].split()}
    assert max(heights) < chart["height"] / 2  # the durations are not flattened to the floor


def test_a_traceback_is_bounded_and_redacted() -> None:
    def fail() -> None:
        raise ValueError("password=hunter2 " + "x" * 10_000 + " password=hunter3 postgresql://u:pw1@h/db")

    try:
        fail()
    except ValueError as exc:
        text = traceback_text(exc, limit=4000)
    assert text is not None and len(text) <= 4000
    assert text.startswith("Traceback") and "characters cut" in text
    assert text.rstrip().endswith("x password=*** postgresql://u:***@h/db")
    assert "hunter" not in text and "pw1" not in text
    assert traceback_text(ValueError("no frames")) is None
