"""Lanes (runner/worker/lanes.py): what a process serves, per-process handler slots, and each
lane's fleet budget, proven with real ``runner start`` processes and the ledger's attempts
(which process ran what, and what overlapped), plus the race on a lane's last unit."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner.store import ledger
from runner.store.ledger import Owner
from runner.worker import lanes
from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, run_cli, scalar

APP = "tests/apps/lanes.py:app"
T0 = datetime(2026, 1, 1, tzinfo=UTC)

# the most attempts of a lane running at one instant (an attempt's start against the others'
# spans), over every process or per process (owner_pid)
MAX_OVERLAP = """
SELECT coalesce(max(n), 0) FROM (
    SELECT (SELECT count(*) FROM runner.attempts b JOIN runner.job_runs rb ON rb.id = b.run_id
            WHERE rb.lane = r.lane AND b.started_at <= a.started_at
              AND coalesce(b.finished_at, 'infinity') > a.started_at
              AND (NOT %(per_process)s OR b.owner_pid = a.owner_pid)) AS n
    FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id
    WHERE r.lane = %(lane)s) AS x
"""


def backfill(url: str, hours: int, *extra: str) -> int:
    out = run_cli("backfill", "hist", "--from", T0.isoformat(), "--to", (T0 + timedelta(hours=hours)).isoformat(),
                  "--reason", "lanes test", "--yes", "--json", "--app", APP, *extra, url=url)
    assert out.returncode == 0, out.stderr
    return int(json.loads(out.stdout)["backfill"]["id"])


def completed(url: str, plan_id: int) -> bool:
    return scalar(url, "SELECT status FROM runner.backfills WHERE id = %s", (plan_id,)) == "completed"


def set_lane(url: str, *args: str) -> None:
    out = run_cli("lane", "set", *args, "--reason", "test", "--by", "t", url=url)
    assert out.returncode == 0, out.stderr


def stop(*procs: RunnerProcess) -> None:
    for p in procs:
        assert p.terminate() == 0, p.output()


def test_a_bulk_process_never_runs_a_live_slot_and_a_realtime_one_never_a_backfill(
        db_url: str, tmp_path: Path) -> None:
    plan_id = backfill(db_url, 6, "--concurrency", "4")
    bulk = RunnerProcess(APP, db_url, "--lanes", "bulk", "--poll-interval", "0.1", env={"LANE_WORK": "0.05"},
                         log=tmp_path / "bulk.log")
    live = RunnerProcess(APP, db_url, "--lanes", "realtime", "--poll-interval", "0.1", log=tmp_path / "live.log")
    try:
        eventually(lambda: completed(db_url, plan_id), timeout=30, message="the plan done by the bulk process")
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'live'"
                                          " AND status = 'succeeded'") >= 3, timeout=15)
    finally:
        stop(bulk, live)
    by_owner = rows(db_url, "SELECT r.job_name, r.lane, a.owner_pid, count(*) FROM runner.attempts a"
                            " JOIN runner.job_runs r ON r.id = a.run_id GROUP BY 1, 2, 3 ORDER BY 1")
    assert {(job, lane, pid) for job, lane, pid, _ in by_owner} == {
        ("hist", "bulk", bulk.proc.pid), ("live", "realtime", live.proc.pid)}
    assert_ledger_clean(db_url)


def test_fleet_concurrency_and_per_process_slots_hold_across_two_processes(db_url: str, tmp_path: Path) -> None:
    """The lane allows 3 fleet-wide, each process 2 handler slots, the plan 10: the ledger
    shows at most 3 bulk attempts at once in all, at most 2 on either process, and both
    bounds reached."""
    set_lane(db_url, "bulk", "--concurrency", "3")
    plan_id = backfill(db_url, 12, "--concurrency", "10")
    procs = [RunnerProcess(APP, db_url, "--lanes", "bulk,correction", "--lane-slots", "bulk=2",
                           "--poll-interval", "0.05", env={"LANE_WORK": "1.0"}, log=tmp_path / f"{i}.log")
             for i in range(2)]
    try:
        eventually(lambda: completed(db_url, plan_id), timeout=60)
    finally:
        stop(*procs)
    assert scalar(db_url, MAX_OVERLAP, {"lane": "bulk", "per_process": False}) == 3
    assert scalar(db_url, MAX_OVERLAP, {"lane": "bulk", "per_process": True}) == 2
    pids = {r[0] for r in rows(db_url, "SELECT DISTINCT owner_pid FROM runner.attempts")}
    assert pids == {p.proc.pid for p in procs}  # both took part


def test_realtime_keeps_its_handlers_while_bulk_is_saturated_on_a_shared_process(
        db_url: str, tmp_path: Path) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE lane_release (at timestamptz)")
        conn.execute("GRANT ALL ON lane_release TO PUBLIC")
    plan_id = backfill(db_url, 6, "--concurrency", "10")
    # one process serving every lane, two handler threads for live slots and two for bulk:
    # bulk handlers that hold until released take every bulk slot
    proc = RunnerProcess(APP, db_url, "--workers", "2", "--lane-slots", "bulk=2", "--poll-interval", "0.05",
                         env={"LANE_HOLD": "1"}, log=tmp_path / "shared.log")
    running_bulk = ("SELECT count(*) FROM runner.job_runs WHERE lane = 'bulk' AND status = 'running'")
    live_done = "SELECT count(*) FROM runner.job_runs WHERE job_name = 'live' AND status = 'succeeded'"
    try:
        eventually(lambda: scalar(db_url, running_bulk) == 2, timeout=20, message="bulk saturated")
        before = scalar(db_url, live_done)
        eventually(lambda: scalar(db_url, live_done) >= before + 2, timeout=15,
                   message="live slots ran while every bulk slot was held")
        assert scalar(db_url, running_bulk) == 2  # still held: the live runs did not wait for them
        assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE lane = 'bulk'"
                              " AND status = 'succeeded'") == 0
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("INSERT INTO lane_release VALUES (now())")
        eventually(lambda: completed(db_url, plan_id), timeout=30)
    finally:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("INSERT INTO lane_release VALUES (now())")  # (again) so that it stops at once
        stop(proc)


# -- the race on a lane's last unit ------------------------------------------------------------


def queue_runs(conn: psycopg.Connection[Any], lane: str, n: int) -> None:
    for i in range(n):
        slot = T0 + timedelta(hours=i)
        conn.execute(
            "INSERT INTO runner.job_runs (job_name, schedule_slot, business_date, window_start, window_end,"
            " status, trigger, idempotency_key, lane, next_attempt_at)"
            " VALUES ('hist', %s, %s, %s, %s, 'pending', 'manual', %s, %s, now())",
            (slot, slot.date(), slot - timedelta(hours=1), slot, f"k{i}", lane))


def test_two_processes_claiming_the_last_unit_of_a_lane_at_once_get_one(db_url: str) -> None:
    """Adversarial: A claims the lane's last unit and has not committed; B claims at the same
    time. B waits on the lane's row and then counts A's run: it gets nothing."""
    admin = psycopg.connect(db_url, autocommit=True)
    set_lane(db_url, "correction", "--concurrency", "1")
    queue_runs(admin, "correction", 3)
    a = psycopg.connect(db_url, autocommit=True)
    b = psycopg.connect(db_url, autocommit=True)
    owner_a, owner_b = Owner.here(uuid.uuid4(), 21077), Owner.here(uuid.uuid4(), 21077)
    got_b: list[Any] = []
    with a.transaction():
        _, first = ledger.claim_due_runs(a, owner_a, ["hist"], {"correction": 5})
        assert len(first) == 1

        def claim_b() -> None:
            got_b.extend(ledger.claim_due_runs(b, owner_b, ["hist"], {"correction": 5})[1])

        thread = threading.Thread(target=claim_b)
        thread.start()
        b_pid = b.info.backend_pid
        eventually(lambda: scalar(db_url, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s"
                                          " AND datname = current_database()", (b_pid,)) == "Lock",
                   timeout=10, message="B waits on the lane's row")
    thread.join(10)
    assert got_b == []
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE lane = 'correction'"
                          " AND status = 'running'") == 1
    for c in (a, b, admin):
        c.close()


def test_a_lanes_rate_bounds_starts_across_claims(db_url: str) -> None:
    """rate 2/s: a full bucket holds 2 starts; the next claim at the same instant gets none."""
    admin = psycopg.connect(db_url, autocommit=True)
    set_lane(db_url, "correction", "--rate", "2")
    queue_runs(admin, "correction", 5)
    owner = Owner.here(uuid.uuid4(), 21077)
    with admin.transaction():  # one instant (now() is the transaction's)
        now = scalar(db_url, "SELECT now()")
        _, first = ledger.claim_due_runs(admin, owner, ["hist"], {"correction": 5}, now=now)
        _, second = ledger.claim_due_runs(admin, owner, ["hist"], {"correction": 5}, now=now)
    assert (len(first), len(second)) == (2, 0)
    _, later = ledger.claim_due_runs(admin, owner, ["hist"], {"correction": 5}, now=now + timedelta(seconds=1))
    assert len(later) == 2
    admin.close()


# -- options and the lane command --------------------------------------------------------------


def test_start_refuses_an_unknown_lane_in_one_line(db_url: str) -> None:
    out = run_cli("start", "--app", APP, "--lanes", "bulk,nope", url=db_url, timeout=60)
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1].startswith("runner: error: unknown lane 'nope'"), out.stderr
    assert len([line for line in out.stderr.splitlines() if "error" in line]) == 1, out.stderr
    assert scalar(db_url, "SELECT count(*) FROM runner.instances") == 0  # nothing half-started
    with psycopg.connect(db_url, autocommit=True) as conn:
        for wanted, slots, text in [(("nope",), {}, "unknown lane 'nope'"),
                                    (("bulk",), {"correction": 2}, "not served by this process")]:
            with pytest.raises(lanes.LaneError, match=text):
                lanes.resolve(conn, wanted, slots, 10)
        with pytest.raises(lanes.LaneError, match="unknown lane 'reports'"):
            lanes.resolve(conn, None, {}, 10, [("report_job", "reports")])
        served = lanes.resolve(conn, ("bulk", "realtime"), {"bulk": 3}, 8)
        assert served.slots == {"realtime": 8, "bulk": 3}
        assert lanes.resolve(conn, ("bulk",), {}, 8).slots == {"bulk": 8}
        assert lanes.resolve(conn, None, {}, 8).slots == {"realtime": 8, "correction": 4, "manual": 2, "bulk": 2}
    for text, error in [("Bad!", "is not a lane name"), (" , ", "names no lane")]:
        with pytest.raises(lanes.LaneError, match=error):
            lanes.parse_lanes(text)
    for text, error in [("bulk=0", "N must be an integer >= 1"), ("bulk", "is not LANE=N")]:
        with pytest.raises(lanes.LaneError, match=error):
            lanes.parse_lane_slots(text)
    assert lanes.parse_lane_slots("bulk=2, correction=4") == {"bulk": 2, "correction": 4}


def test_lane_set_adds_a_lane_audited_and_refuses_bad_input(db_url: str) -> None:
    set_lane(db_url, "reports", "--rank", "15", "--concurrency", "3", "--rate", "0.5")
    assert rows(db_url, "SELECT lane, rank, concurrency, rate FROM runner.lanes WHERE lane = 'reports'") == [
        ("reports", 15, 3, 0.5)]
    with psycopg.connect(db_url, autocommit=True) as conn:
        lanes.set_lane(conn, "reports", "no cap", concurrency=None, set_concurrency=True, who="t")
        assert scalar(db_url, "SELECT concurrency FROM runner.lanes WHERE lane = 'reports'") is None
        assert scalar(db_url, "SELECT count(*) FROM runner.requests WHERE action = 'lane_set'") == 2
        for name, kw, text in [("Bad-Name", {}, "is not valid"),
                               ("realtime", {"concurrency": 2, "set_concurrency": True}, "takes no fleet limit"),
                               ("bulk", {"rate": -1.0, "set_rate": True}, "rate must be a positive")]:
            with pytest.raises(lanes.OperatorError, match=text):
                lanes.set_lane(conn, name, "r", who="t", **kw)
    out = run_cli("lane", "set", "realtime", "--rate", "5", "--reason", "r", url=db_url)
    assert out.returncode != 0 and "takes no fleet limit" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert scalar(db_url, "SELECT count(*) FROM runner.requests WHERE action = 'lane_set'") == 2
    listed = run_cli("lane", "list", "--json", url=db_url)
    assert listed.returncode == 0
    assert [r["lane"] for r in json.loads(listed.stdout)] == ["realtime", "correction", "reports", "manual", "bulk"]


def test_backfill_refuses_an_unknown_lane_and_accepts_the_old_tag(db_url: str) -> None:
    out = run_cli("backfill", "hist", "--from", T0.isoformat(), "--to", (T0 + timedelta(hours=2)).isoformat(),
                  "--reason", "r", "--yes", "--lane", "nope", "--app", APP, url=db_url)
    assert out.returncode != 0 and "unknown lane 'nope'" in out.stderr
    assert scalar(db_url, "SELECT count(*) FROM runner.backfills") == 0
    assert lanes.plan_lane("backfill") == "bulk" and lanes.plan_lane("catch_up") == "correction"


def test_runs_in_flight_lose_no_update_between_the_loop_and_the_completer() -> None:
    """The in-flight counts (runner/worker/budget.py ``InFlight``) are written by the loop
    thread (a run started) and the completer thread (a run recorded); the lane caps are
    computed from them. Before, they were two plain attributes of the Worker written from
    both threads without a lock: with a thread switch forced at every few bytecodes, many
    threads starting and ending runs through the same counts lose updates, and the counts
    end off zero (a count that drifts up leaves the process claiming less and less; one that
    drifts down lets it claim past its cap). Fails with the lock taken out of ``InFlight``."""
    import sys

    from runner.worker.budget import InFlight

    inflight = InFlight()
    threads_, rounds = 8, 10000
    start = threading.Barrier(threads_)

    def starts_and_ends(lane: str) -> None:
        start.wait()
        for _ in range(rounds):
            inflight.started([lane, lane])  # a claim of two runs (loop thread)
            inflight.ended([lane])  # and two outcomes recorded (completer), one by one
            inflight.ended([lane])

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=starts_and_ends, args=(("realtime", "bulk")[i % 2],))
                   for i in range(threads_)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert (inflight.total, inflight.of("realtime"), inflight.of("bulk")) == (0, 0, 0)
