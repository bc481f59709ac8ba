"""Recovery as a workload of its own (runner/worker/lanes.py, runner/aio.py, runner/worker/orphans.py):
each lane's async handlers on their own event loop, so a bulk async backfill never takes a
realtime async run's place; takeovers only of the lanes a process serves and within each
lane's room there; a misfire replay's plan tagged with its lane. Proven with real
``runner start`` processes and the ledger's attempts."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, run_cli, scalar

SYNC_APP = "tests/apps/recovery.py:sync_app"
ASYNC_APP = "tests/apps/recovery.py:async_app"
T0 = datetime(2026, 1, 1, tzinfo=UTC)

# the most attempts of a lane running at one instant on one process (an attempt's start
# against the others' spans)
MAX_OVERLAP = """
SELECT coalesce(max(n), 0) FROM (
    SELECT (SELECT count(*) FROM runner.attempts b JOIN runner.job_runs rb ON rb.id = b.run_id
            WHERE rb.lane = r.lane AND b.owner_pid = a.owner_pid AND b.started_at <= a.started_at
              AND coalesce(b.finished_at, 'infinity') > a.started_at) AS n
    FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id
    WHERE r.lane = %(lane)s AND (%(pid)s::int IS NULL OR a.owner_pid = %(pid)s)) AS x
"""


def make_release_table(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE recovery_release (at timestamptz)")
        conn.execute("GRANT ALL ON recovery_release TO PUBLIC")


def release(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO recovery_release VALUES (now())")


def backfill(url: str, app: str, hours: int, concurrency: int) -> int:
    out = run_cli("backfill", "hist", "--from", T0.isoformat(), "--to", (T0 + timedelta(hours=hours)).isoformat(),
                  "--concurrency", str(concurrency), "--reason", "recovery test", "--yes", "--json",
                  "--app", app, url=url)
    assert out.returncode == 0, out.stderr
    return int(json.loads(out.stdout)["backfill"]["id"])


def completed(url: str, plan_id: int) -> bool:
    return scalar(url, "SELECT status FROM runner.backfills WHERE id = %s", (plan_id,)) == "completed"


def count_runs(url: str, where: str, params: Any = None) -> int:
    return int(scalar(url, f"SELECT count(*) FROM runner.job_runs WHERE {where}", params))


# -- async handlers per lane -----------------------------------------------------------------


def test_bulk_async_runs_never_take_a_realtime_async_runs_place(db_url: str, tmp_path: Path) -> None:
    """One process serving every lane, two async places for realtime and two for bulk: the
    backfill's async handlers hold both bulk places (and four more runs wait), and the live
    async slots still run within a second of their instant; the bulk bound holds."""
    make_release_table(db_url)
    plan_id = backfill(db_url, ASYNC_APP, 6, 10)
    proc = RunnerProcess(ASYNC_APP, db_url, "--workers", "2", "--async-workers", "2", "--lane-slots", "bulk=2",
                         "--poll-interval", "0.05", log=tmp_path / "shared.log")
    try:
        eventually(lambda: count_runs(db_url, "lane = 'bulk' AND status = 'running'") == 2, timeout=20,
                   message="both bulk async places held")
        saturated = scalar(db_url, "SELECT now()")
        live_after = ("job_name = 'live' AND status = 'succeeded' AND schedule_slot > %s")
        eventually(lambda: count_runs(db_url, live_after, (saturated,)) >= 3, timeout=15,
                   message="live async slots ran while every bulk async place was held")
        # still saturated, the rest of the plan still waiting: live work did not wait for it
        assert count_runs(db_url, "lane = 'bulk' AND status = 'running'") == 2
        assert count_runs(db_url, "lane = 'bulk' AND status = 'pending'") == 4
        lag = scalar(db_url, "SELECT max(extract(epoch FROM finished_at - schedule_slot)) FROM runner.job_runs"
                             " WHERE job_name = 'live' AND status = 'succeeded' AND schedule_slot > %s",
                     (saturated,))
        assert lag < 1.0, f"a live async run finished {lag:.2f}s after its slot while bulk was saturated"
        release(db_url)
        eventually(lambda: completed(db_url, plan_id), timeout=30, message="the plan done once released")
    finally:
        release(db_url)
        assert proc.terminate() == 0, proc.output()
    assert scalar(db_url, MAX_OVERLAP, {"lane": "bulk", "pid": None}) == 2  # reached, never passed
    assert "Traceback" not in proc.output(), proc.output()
    assert_ledger_clean(db_url)


# -- takeover per lane -----------------------------------------------------------------------


def test_takeover_stays_in_the_lanes_served_and_within_their_room(db_url: str, tmp_path: Path) -> None:
    """A bulk process dies (kill -9) holding two bulk runs. A realtime-only process keeps
    running and never takes them; a process serving bulk with one bulk slot takes one, and
    the second only once the first is done. Only the plan's runs (lane bulk) are counted: a
    test that crosses the top of an hour also sees hist's on-time slot, run in realtime."""
    make_release_table(db_url)
    plan_id = backfill(db_url, SYNC_APP, 2, 2)
    live = RunnerProcess(SYNC_APP, db_url, "--lanes", "realtime", "--poll-interval", "0.05",
                         log=tmp_path / "live.log")
    bulk = RunnerProcess(SYNC_APP, db_url, "--lanes", "bulk", "--workers", "2", "--poll-interval", "0.05",
                         log=tmp_path / "bulk.log")
    other: RunnerProcess | None = None
    hist_attempts = ("SELECT a.owner_pid, a.trigger, a.status FROM runner.attempts a"
                     " JOIN runner.job_runs r ON r.id = a.run_id WHERE r.job_name = 'hist' AND r.lane = 'bulk'"
                     " ORDER BY a.id")
    try:
        eventually(lambda: count_runs(db_url, "job_name = 'hist' AND lane = 'bulk' AND status = 'running'") == 2,
                   timeout=20, message="the bulk process holds both runs")
        sessions = [r[0] for r in rows(db_url, "SELECT DISTINCT a.owner_backend_pid FROM runner.attempts a"
                                               " JOIN runner.job_runs r ON r.id = a.run_id"
                                               " WHERE r.job_name = 'hist' AND r.lane = 'bulk'")]
        bulk.kill()
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)",
                                  (sessions,)) == 0, timeout=10, message="the dead process's lock session gone")
        gone = scalar(db_url, "SELECT now()")
        # the realtime-only process goes on (takeover passes every 0.05 s) and leaves them
        eventually(lambda: count_runs(db_url, "job_name = 'live' AND status = 'succeeded' AND schedule_slot > %s",
                                      (gone,)) >= 3, timeout=15, message="live slots ran after the kill")
        assert [(pid, trigger) for pid, trigger, _ in rows(db_url, hist_attempts)] == [
            (bulk.proc.pid, "backfill"), (bulk.proc.pid, "backfill")]
        assert count_runs(db_url, "job_name = 'hist' AND lane = 'bulk' AND status = 'running' AND attempt = 1") == 2
        # a process that serves bulk, with one bulk slot: takes one orphan
        other = RunnerProcess(SYNC_APP, db_url, "--lanes", "bulk,realtime", "--workers", "4",
                              "--lane-slots", "bulk=1", "--poll-interval", "0.05", log=tmp_path / "other.log")
        eventually(lambda: [r for r in rows(db_url, hist_attempts) if r[1] == "recovery"], timeout=20,
                   message="a bulk run taken over by the bulk-serving process")
        taken_at = scalar(db_url, "SELECT max(started_at) FROM runner.attempts WHERE trigger = 'recovery'")
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs r WHERE job_name = 'live'"
                                          " AND status = 'succeeded' AND schedule_slot > %s", (taken_at,)) >= 3,
                   timeout=15, message="passes of the loop after the first takeover")
        recovered = [r for r in rows(db_url, hist_attempts) if r[1] == "recovery"]
        assert recovered == [(other.proc.pid, "recovery", "running")], recovered  # its one bulk slot
        release(db_url)
        eventually(lambda: completed(db_url, plan_id), timeout=30, message="both runs done after release")
    finally:
        release(db_url)
        for p in (live, other):
            if p is not None:
                assert p.terminate() == 0, p.output()
    got = rows(db_url, hist_attempts)
    assert [r for r in got if r[1] == "recovery"] == [(other.proc.pid, "recovery", "succeeded")] * 2
    assert live.proc.pid not in {r[0] for r in got}
    assert scalar(db_url, MAX_OVERLAP, {"lane": "bulk", "pid": other.proc.pid}) == 1
    assert_ledger_clean(db_url)


# -- the replay plan's lane ------------------------------------------------------------------


def test_a_replay_plan_is_tagged_correction_and_an_old_tag_still_reads_so(tx: Any) -> None:
    from runner.worker import lanes

    tx.execute("INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, track_from)"
               " VALUES ('replayed', 'every', '1 hour', %s)", (T0,))
    tx.execute("SELECT runner.record_replay_plan_v1('replayed', %s, %s, 2, 'verify the replay')",
               (T0, T0 + timedelta(hours=2)))
    assert tx.execute("SELECT lane, requested_by FROM runner.backfills WHERE job_name = 'replayed'").fetchall() == [
        ("correction", "runner (misfire=replay)")]
    assert lanes.plan_lane("catch_up") == "correction"  # plans made before 0018_recovery
