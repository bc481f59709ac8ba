"""Misfire policies: late slots are skipped, coalesced, replayed or held, with the reason in
the ledger; never claimed as if on time, never dropped silently."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner import Runner
from runner.store import ledger
from runner.store.ledger import Owner
from runner.worker import misfire
from tests.support import RunnerProcess, eventually, rows, scalar

T0 = datetime(2026, 5, 4, 3, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def job_app(**options: Any) -> Runner:
    app = Runner()
    app.job("late", every="1m", track_from=T0, **options)(lambda ctx: None)
    return app


@pytest.fixture
def conn(db_url: str) -> Any:
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


def startup_range(app: Runner, now: datetime) -> misfire.LateRange:
    """The range a runner starting at ``now`` hands over: from the newest complete slot."""
    job = app.jobs["late"]
    return misfire.LateRange(None, job.schedule.latest_at_or_before(misfire.cutoff_for(job, now)))


def decide(conn: Any, app: Runner, now: datetime, batch: int = 1000,
           late: misfire.LateRange | None = None) -> misfire.Decisions:
    ledger.sync_jobs(conn, list(app.jobs.values()), now=T0 - MIN)
    return misfire.run_once(conn, app.jobs["late"], now, late or startup_range(app, now), batch=batch)


def runs(conn: Any) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT schedule_slot, partition_key, status, trigger, window_start, window_end,"
                        " coalesced_into_slot, status_reason FROM runner.job_runs ORDER BY 1, 2").fetchall()


NOW = T0 + 9 * MIN + timedelta(seconds=61)  # slots T0 .. T0+9m are late (grace 60 s)


def test_skip_records_each_late_slot_with_its_reason(conn: Any) -> None:
    decide(conn, job_app(misfire="skip"), NOW)
    got = runs(conn)
    assert [r[0] for r in got] == [T0 + i * MIN for i in range(10)]
    assert {r[2] for r in got} == {"skipped"}
    assert got[0][7].startswith("misfire=skip: not started within grace 0:01:00, late by 10m01s")


def test_grace_threshold_on_both_sides(conn: Any) -> None:
    app = job_app(misfire="skip")
    decide(conn, app, T0 + 9 * MIN + timedelta(seconds=60))  # T0+9m is exactly at grace: not late
    assert max(r[0] for r in runs(conn)) == T0 + 8 * MIN
    decide(conn, app, T0 + 9 * MIN + timedelta(seconds=60, microseconds=2))
    assert max(r[0] for r in runs(conn)) == T0 + 9 * MIN


def test_coalesce_runs_once_for_the_newest_with_a_widened_window(conn: Any) -> None:
    result = decide(conn, job_app(misfire="coalesce"), NOW)
    assert result.counts == {"coalesced": 9, "pending": 1}
    got = runs(conn)
    main = got[-1]
    assert main[:4] == (T0 + 9 * MIN, "", "pending", "catch_up")
    assert (main[4], main[5]) == (T0 - MIN, T0 + 9 * MIN)  # covers every late window
    assert {(r[2], r[6]) for r in got[:-1]} == {("coalesced", T0 + 9 * MIN)}


def test_coalesce_in_small_batches_still_covers_the_whole_range(conn: Any) -> None:
    app = job_app(misfire="coalesce", partitions=["p", "q"])
    passes = 0
    late = startup_range(app, NOW)
    while decide(conn, app, NOW, batch=3, late=late).more:
        passes += 1
    assert passes >= 3
    got = runs(conn)
    mains = [r for r in got if r[2] == "pending"]
    assert [(r[0], r[1], r[4], r[5]) for r in mains] == [
        (T0 + 9 * MIN, "p", T0 - MIN, T0 + 9 * MIN), (T0 + 9 * MIN, "q", T0 - MIN, T0 + 9 * MIN)]
    assert sum(1 for r in got if r[2] == "coalesced") == 18


def test_replay_caps_count_and_age_and_holds_the_rest(conn: Any) -> None:
    decide(conn, job_app(misfire="replay", max_catch_up=3), NOW)
    got = runs(conn)
    assert [(r[0], r[2]) for r in got if r[2] == "pending"] == [
        (T0 + 7 * MIN, "pending"), (T0 + 8 * MIN, "pending"), (T0 + 9 * MIN, "pending")]
    held = [r for r in got if r[2] == "awaiting_approval"]
    assert len(held) == 7 and "beyond max_catch_up=3" in held[0][7]


def test_replay_age_cap(conn: Any) -> None:
    decide(conn, job_app(misfire="replay", max_catch_up=10, max_catch_up_age="150s"), NOW)
    got = runs(conn)
    assert [r[0] for r in got if r[2] == "pending"] == [T0 + 8 * MIN, T0 + 9 * MIN]  # 121 s, 61 s old
    assert "older than max_catch_up_age" in got[0][7]


def test_replayed_slots_run_oldest_first_one_at_a_time(conn: Any, db_url: str) -> None:
    decide(conn, job_app(misfire="replay", max_catch_up=3), NOW)
    owner = Owner(__import__("uuid").uuid4(), "h", 1, 21077)
    _, first = ledger.claim_due_runs(conn, owner, ["late"], 10)
    assert [r.slot for r in first] == [T0 + 7 * MIN]
    _, none = ledger.claim_due_runs(conn, owner, ["late"], 10)
    assert none == []  # the next waits while one runs
    ledger.finish_attempts(conn, [ledger.Outcome(first[0].id, first[0].fence, "succeeded")])
    _, second = ledger.claim_due_runs(conn, owner, ["late"], 10)
    assert [r.slot for r in second] == [T0 + 8 * MIN]


def test_a_replayed_slot_retried_released_or_recovered_still_holds_the_next_back(conn: Any) -> None:
    """The order holds across a replayed run's later attempts: its retry (trigger retry), a
    release at shutdown (trigger recovery) and a LockBusy release each keep the next late
    slot waiting until the run is done. Before, the order was read from the run's current
    trigger, so the next slot started beside a retried or recovered one."""
    decide(conn, job_app(misfire="replay", max_catch_up=3), NOW)
    owner = Owner(__import__("uuid").uuid4(), "h", 1, 21077)
    _, (run,) = ledger.claim_due_runs(conn, owner, ["late"], 10)
    assert run.slot == T0 + 7 * MIN
    outcomes = [ledger.Outcome(run.id, 0, "failed", error_class="E", error_message="x", retry_delay=0.0),
                ledger.Outcome(run.id, 0, "released", attempt_status="released"),
                ledger.Outcome(run.id, 0, "released", error_class="runner.LockBusy", error_message="x",
                               retry_delay=0.0)]
    for outcome in outcomes:
        assert ledger.finish_attempts(conn, [outcome._replace(fence=run.fence)]) == {(run.id, run.fence): True}
        _, again = ledger.claim_due_runs(conn, owner, ["late"], 10)
        assert [(r.id, r.slot) for r in again] == [(run.id, T0 + 7 * MIN)], (outcome.status, again)
        run = again[0]
        _, none = ledger.claim_due_runs(conn, owner, ["late"], 10)
        assert none == [], (outcome.status, run.trigger, none)  # the next still waits
    ledger.finish_attempts(conn, [ledger.Outcome(run.id, run.fence, "succeeded")])
    _, second = ledger.claim_due_runs(conn, owner, ["late"], 10)
    assert [r.slot for r in second] == [T0 + 8 * MIN]


def test_manual_holds_every_late_slot(conn: Any) -> None:
    decide(conn, job_app(misfire="manual"), NOW)
    assert {r[2] for r in runs(conn)} == {"awaiting_approval"}
    assert len(runs(conn)) == 10


def test_decisions_start_after_the_newest_slot_with_a_run(conn: Any) -> None:
    app = job_app(misfire="skip")
    ledger.sync_jobs(conn, list(app.jobs.values()), now=T0 - MIN)
    owner = Owner(__import__("uuid").uuid4(), "h", 1, 21077)
    claim = ledger.SlotClaim("late", T0 + 5 * MIN, "", T0.date(), T0 + 4 * MIN, T0 + 5 * MIN, "k")
    ledger.claim_slots(conn, owner, [claim], now=T0 + 5 * MIN)
    decide(conn, app, NOW)
    assert [r[0] for r in runs(conn) if r[2] == "skipped"] == [T0 + i * MIN for i in range(6, 10)]


def test_two_deciders_at_once_decide_once(db_url: str) -> None:
    import threading

    app = job_app(misfire="coalesce")
    with psycopg.connect(db_url, autocommit=True) as c:
        ledger.sync_jobs(c, list(app.jobs.values()), now=T0 - MIN)
    results: list[misfire.Decisions] = []

    def one() -> None:
        with psycopg.connect(db_url, autocommit=True) as c:
            results.append(misfire.run_once(c, app.jobs["late"], NOW, startup_range(app, NOW)))

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.counts.get("pending", 0) for r in results) == 1
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs") == 10


def _downtime_settled(db_url: str) -> bool:
    """Every second from each job's first to its last slot has a run per partition, each
    succeeded, skipped or coalesced (no hole, nothing still open), the downtime's decisions
    are there (some skipped, some coalesced into a catch-up run that succeeded)."""
    for job, parts in (("every-second", 2), ("every-second-coalesced", 1)):
        slots = rows(db_url, "SELECT schedule_slot, count(*), array_agg(DISTINCT status) FROM runner.job_runs"
                             " WHERE job_name = %s GROUP BY 1 ORDER BY 1", (job,))
        if not slots:
            return False
        first, last = slots[0][0], slots[-1][0]
        assert [s[0] for s in slots] == [first + timedelta(seconds=i)
                                         for i in range(int((last - first).total_seconds()) + 1)], job
        assert {s[1] for s in slots} == {parts}, (job, slots)
        assert {st for s in slots for st in s[2]} <= {"succeeded", "skipped", "coalesced"}, (job, slots)
    return bool(scalar(db_url, "SELECT count(*) FILTER (WHERE status = 'skipped') >= 4"
                               " AND count(*) FILTER (WHERE status = 'coalesced') >= 2"
                               " AND count(*) FILTER (WHERE trigger = 'catch_up' AND status = 'succeeded') >= 1"
                               " FROM runner.job_runs"))


def test_restarted_runner_applies_policy_to_the_downtime(db_url: str, tmp_path: Path) -> None:
    """Waits on the ledger's state only, with margins for a loaded two-core machine (runner
    start-up there takes seconds, so the downtime, and the misfire duty's batches, grow)."""
    a = RunnerProcess("tests/apps/misfire_skip.py:app", db_url, "--poll-interval", "0.2",
                      log=tmp_path / "a.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'"
                                          " AND job_name = 'every-second'") >= 4, timeout=60)
    finally:
        assert a.terminate() == 0, a.output()
    stopped = scalar(db_url, "SELECT max(schedule_slot) FROM runner.job_runs")
    # every runner is down for a while (waiting on the database clock, not sleeping)
    eventually(lambda: scalar(db_url, "SELECT now() - %s > interval '4 seconds'", (stopped,)), timeout=60)
    b = RunnerProcess("tests/apps/misfire_skip.py:app", db_url, "--poll-interval", "0.2",
                      log=tmp_path / "b.log")
    try:
        # the whole downtime decided and every run since finished: not just the first few
        eventually(lambda: _downtime_settled(db_url), timeout=90, message="the downtime settled, no hole")
    finally:
        assert b.terminate() == 0, b.output()
    assert _downtime_settled(db_url)  # and still so once the runner has stopped


def test_a_replay_of_a_verified_job_is_verified_on_its_plan(db_url: str) -> None:
    from tests.test_worker import running

    checked: list[tuple[datetime, datetime, str]] = []
    seen: list[tuple[datetime, str]] = []
    app = Runner()

    def verify(conn: Any, start: datetime, end: datetime, partition: str) -> bool:
        checked.append((start, end, partition))
        return True

    @app.job("replayed", every="1m", misfire="replay", max_catch_up=3, grace="1s",
             track_from=datetime.now(UTC) - timedelta(minutes=10), verify=verify)
    def handler(ctx: Any) -> None:
        seen.append((ctx.slot, ctx.trigger))

    with running(app, db_url):
        eventually(lambda: scalar(db_url, "SELECT verify_status FROM runner.backfills") == "passed", timeout=30)
    plan = rows(db_url, "SELECT job_name, status, concurrency, requested_by, expected_runs, replay_group_id"
                        " FROM runner.backfills")
    assert [p[:5] for p in plan] == [("replayed", "completed", 1, "runner (misfire=replay)", 3)]
    replayed = rows(db_url, "SELECT schedule_slot FROM runner.job_runs WHERE replay_group_id = %s"
                            " AND status = 'succeeded' AND trigger = 'catch_up' ORDER BY 1", (plan[0][5],))
    assert len(replayed) == 3
    # run oldest first, one at a time; then verified once over the replayed range
    assert [s for s, t in seen if t == "catch_up"] == [r[0] for r in replayed]
    assert checked == [(replayed[0][0] - MIN, replayed[-1][0], "")]


def test_decisions_do_not_wait_for_rows_that_reference_the_job(db_url: str) -> None:
    """A transaction that inserts rows referencing the job (a claim's runs, the gap scan's
    holes: each takes a KEY SHARE lock on the job's row) does not hold up the misfire duty,
    and the duty does not hold up such inserts. The job's row lock that serialises deciders is
    FOR NO KEY UPDATE: with FOR UPDATE, a long watermark advance over a wide fan-out stalled
    the loop thread (and its SIGTERM) for minutes."""
    app = job_app(misfire="skip")
    with psycopg.connect(db_url, autocommit=True) as c:
        ledger.sync_jobs(c, list(app.jobs.values()), now=T0 - MIN)
    with psycopg.connect(db_url) as holder, psycopg.connect(db_url, autocommit=True) as c:
        holder.execute("SELECT 1 FROM runner.jobs WHERE job_name = 'late' FOR KEY SHARE")
        c.execute("SET lock_timeout = '2s'")  # waiting would raise LockNotAvailable
        decided = misfire.run_once(c, app.jobs["late"], NOW, startup_range(app, NOW))
        holder.rollback()
    assert decided.counts == {"skipped": 10}
