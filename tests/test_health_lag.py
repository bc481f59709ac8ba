"""runner.job_health.lag (and so `runner status`) counts the expected slots that never
started: a job whose runners were all down is behind by the age of its oldest missing slot,
not 0s because none of its runs is unfinished (issue 14; revision 0009_web)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg


def make_minutely_job(conn: psycopg.Connection[Any], name: str, hours: int) -> None:
    """A job due every minute, tracked (and registered with its schedule) ``hours`` ago."""
    conn.execute("INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, track_from,"
                 " first_registered_at) VALUES (%s, 'every', '1 minute',"
                 " now() - make_interval(hours => %s), now() - make_interval(hours => %s))",
                 (name, hours, hours))
    conn.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval,"
                 " timezone) SELECT job_name, track_from, schedule_kind, every_interval, timezone"
                 " FROM runner.jobs WHERE job_name = %s", (name,))


def succeed(conn: psycopg.Connection[Any], name: str, slot_sql: str) -> None:
    """A succeeded run at every slot chosen by ``slot_sql`` (a query over runner.missing_slots)."""
    conn.execute(
        "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date, window_start,"
        " window_end, status, trigger, attempt, fence, idempotency_key, started_at, finished_at)"
        " SELECT job_name, schedule_slot, '', schedule_slot::date, schedule_slot, schedule_slot,"
        " 'succeeded', 'schedule', 1, 1, 'k', now(), now() FROM (" + slot_sql + ") s",
        (name,))


def health(conn: psycopg.Connection[Any], name: str) -> dict[str, Any]:
    cur = conn.execute("SELECT * FROM runner.job_health WHERE job_name = %s", (name,))
    names = [c.name for c in cur.description or ()]
    row = cur.fetchone()
    assert row is not None
    return dict(zip(names, row, strict=True))


def test_lag_counts_slots_that_never_started(tx: psycopg.Connection[Any]) -> None:
    make_minutely_job(tx, "down", hours=6)
    # the first hour ran; the last five hours no runner was up: no run at all for them
    succeed(tx, "down", "SELECT job_name, schedule_slot FROM runner.missing_slots"
                        " WHERE job_name = %s AND schedule_slot < now() - interval '5 hours'")
    now = tx.execute("SELECT now()").fetchone()[0]
    oldest = tx.execute("SELECT min(schedule_slot) FROM runner.missing_slots WHERE job_name = 'down'"
                        " AND state = 'never_started'").fetchone()[0]
    assert oldest is not None and now - oldest > timedelta(hours=4, minutes=59)
    h = health(tx, "down")
    assert h["oldest_unfinished_slot"] is None  # no run is unfinished ...
    assert h["oldest_missing_slot"] == oldest
    assert h["lag"] == now - oldest  # ... and yet the job is five hours behind


def test_lag_is_zero_once_every_slot_ran(tx: psycopg.Connection[Any]) -> None:
    make_minutely_job(tx, "caught_up", hours=2)
    succeed(tx, "caught_up", "SELECT job_name, schedule_slot FROM runner.missing_slots WHERE job_name = %s")
    h = health(tx, "caught_up")
    assert h["oldest_missing_slot"] is None
    assert h["lag"] == timedelta(0)


def test_lag_takes_the_older_of_unfinished_and_missing(tx: psycopg.Connection[Any]) -> None:
    make_minutely_job(tx, "mixed", hours=3)
    # every slot ran but the last 30 minutes; one run two hours ago is still failed (a retry due)
    succeed(tx, "mixed", "SELECT job_name, schedule_slot FROM runner.missing_slots"
                         " WHERE job_name = %s AND schedule_slot < now() - interval '30 minutes'")
    failed_slot = tx.execute(
        "UPDATE runner.job_runs SET status = 'failed', finished_at = NULL WHERE id = ("
        " SELECT id FROM runner.job_runs WHERE job_name = 'mixed'"
        " AND schedule_slot < now() - interval '2 hours' ORDER BY schedule_slot DESC LIMIT 1)"
        " RETURNING schedule_slot").fetchone()[0]
    now = tx.execute("SELECT now()").fetchone()[0]
    h = health(tx, "mixed")
    assert h["oldest_unfinished_slot"] == failed_slot
    assert h["oldest_missing_slot"] is not None and h["oldest_missing_slot"] > failed_slot
    assert h["lag"] == now - failed_slot


def test_lag_counts_the_holes_below_the_gap_scans_watermark(tx: psycopg.Connection[Any]) -> None:
    make_minutely_job(tx, "holes", hours=4)
    succeed(tx, "holes", "SELECT job_name, schedule_slot FROM runner.missing_slots"
                         " WHERE job_name = %s AND schedule_slot < now() - interval '3 hours'")
    tx.execute("SELECT runner.advance_watermarks_v1()")  # what every runner's loop does
    assert tx.execute("SELECT count(*) FROM runner.gap_holes WHERE job_name = 'holes'").fetchone()[0] > 100
    now = tx.execute("SELECT now()").fetchone()[0]
    first, second = (r[0] for r in tx.execute(
        "SELECT schedule_slot FROM runner.missing_slots WHERE job_name = 'holes' ORDER BY 1 LIMIT 2"))
    h = health(tx, "holes")
    assert h["oldest_missing_slot"] == first and h["lag"] == now - first
    # the oldest hole gets a run (a backfill): the lag moves to the next one, before any advance
    succeed(tx, "holes", "SELECT job_name, schedule_slot FROM runner.missing_slots"
                         " WHERE job_name = %s ORDER BY schedule_slot LIMIT 1")
    h = health(tx, "holes")
    assert h["oldest_missing_slot"] == second and h["lag"] == now - second
