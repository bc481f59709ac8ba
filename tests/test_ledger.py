"""The ledger statements themselves: claims, fences, outcomes, locks (single processes,
several connections)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import psycopg
import pytest

from runner import Runner
from runner.model.schedule import idempotency_key
from runner.store import ledger
from runner.store.ledger import Outcome, Owner, SlotClaim
from tests.support import logged_plans, plan_nodes, rows, scalar

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def make_app() -> Runner:
    app = Runner()

    @app.job("report", every="1m", partitions=["t1", "t2"])
    def report(ctx: Any) -> None: ...

    @app.job("pausable", every="1m")
    def pausable(ctx: Any) -> None: ...

    return app


def claims(job: str, slot: datetime, partitions: list[str]) -> list[SlotClaim]:
    start, end = slot - timedelta(minutes=1), slot
    return [SlotClaim(job, slot, p, slot.date(), start, end, idempotency_key(job, start, end, p, "1"))
            for p in partitions]


@pytest.fixture
def conns(db_url: str) -> Any:
    a = psycopg.connect(db_url, autocommit=True)
    b = psycopg.connect(db_url, autocommit=True)
    ledger.sync_jobs(a, list(make_app().jobs.values()), now=T0 - timedelta(hours=1))
    yield a, b
    a.close()
    b.close()


def owner() -> Owner:
    return Owner(uuid4(), "host", 1234, 21077)


def test_claim_is_one_statement_and_exactly_one_process_wins(conns: Any, db_url: str) -> None:
    a, b = conns
    first, second = owner(), owner()
    batch = claims("report", T0, ["t1", "t2"])
    now, won = ledger.claim_slots(a, first, batch, now=T0 + timedelta(seconds=1))
    assert now == T0 + timedelta(seconds=1)
    assert sorted(r.partition_key for r in won) == ["t1", "t2"]
    assert all(r.locked and r.fence == 1 and r.attempt == 1 and r.trigger == "schedule" for r in won)
    _, lost = ledger.claim_slots(b, second, batch, now=T0 + timedelta(seconds=1))
    assert lost == []
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs") == 2
    att = rows(db_url, "SELECT owner_instance, fence, status, lock_key FROM runner.attempts")
    assert {(a_[0], a_[1], a_[2]) for a_ in att} == {(first.instance, 1, "running")}
    # the winner's session holds each run's advisory lock under the documented key
    locked = rows(db_url, """
        SELECT l.pid, (l.classid::bigint << 32) | l.objid::bigint FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())""")
    assert {pid for pid, _ in locked} == {a.info.backend_pid}
    assert {key for _, key in locked} == {k for *_, k in att}


def test_claim_refuses_slots_not_yet_due_by_database_clock(conns: Any, db_url: str) -> None:
    a, _ = conns
    now, won = ledger.claim_slots(a, owner(), claims("report", T0, ["t1"]),
                                  now=T0 - timedelta(microseconds=1))
    assert won == [] and now < T0
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs") == 0
    _, won = ledger.claim_slots(a, owner(), claims("report", T0, ["t1"]), now=T0)
    assert len(won) == 1


def test_paused_job_is_not_claimed(conns: Any, db_url: str) -> None:
    a, _ = conns
    a.execute("UPDATE runner.jobs SET paused = true WHERE job_name = 'pausable'")
    _, won = ledger.claim_slots(a, owner(), claims("pausable", T0, [""]) + claims("report", T0, ["t1"]),
                                now=T0)
    assert [r.job_name for r in won] == ["report"]


def test_a_slot_that_fell_due_while_paused_is_not_claimed_after_the_resume(conns: Any, db_url: str) -> None:
    """A live claim that reaches the database after the resume committed, for a slot that fell
    due inside the pause (still within its grace), starts nothing: the pause's slots are not
    expected (runner.expected_spans_v1), so running one would be a run the ledger does not
    expect (seen in a loaded full run of test_edges: slot 52.0 claimed after a resume at 52.x)."""
    a, _ = conns
    a.execute("INSERT INTO runner.job_pauses (job_name, paused_from, paused_until) VALUES ('pausable', %s, %s)",
              (T0 - timedelta(minutes=2), T0 + timedelta(seconds=30)))
    _, won = ledger.claim_slots(a, owner(), claims("pausable", T0, [""]) + claims("report", T0, ["t1"]),
                                now=T0 + timedelta(seconds=31))
    assert [r.job_name for r in won] == ["report"]
    # the slot after the pause is claimed as ever
    _, won = ledger.claim_slots(a, owner(), claims("pausable", T0 + timedelta(minutes=1), [""]),
                                now=T0 + timedelta(minutes=1))
    assert [r.job_name for r in won] == ["pausable"]


def test_outcome_with_stale_fence_is_refused_and_recorded(conns: Any, db_url: str) -> None:
    a, b = conns
    _, (run,) = ledger.claim_slots(a, owner(), claims("report", T0, ["t1"]), now=T0)
    # another attempt took the run over (fence moved on)
    b.execute("UPDATE runner.job_runs SET fence = fence + 1 WHERE id = %s", (run.id,))
    landed = ledger.finish_attempts(b, [Outcome(run.id, run.fence, "succeeded")])
    assert landed == {(run.id, run.fence): False}
    assert scalar(db_url, "SELECT status FROM runner.job_runs WHERE id = %s", (run.id,)) == "running"
    assert scalar(db_url, "SELECT status FROM runner.attempts WHERE run_id = %s", (run.id,)) == "stale"


def test_outcome_with_current_fence_lands_once(conns: Any, db_url: str) -> None:
    a, b = conns
    _, (run,) = ledger.claim_slots(a, owner(), claims("report", T0, ["t1"]), now=T0)
    assert ledger.finish_attempts(b, [Outcome(run.id, run.fence, "succeeded", processed=7)]) == {(run.id, run.fence): True}
    # a second outcome for the same attempt cannot land: the run is no longer running
    assert ledger.finish_attempts(b, [Outcome(run.id, run.fence, "failed", error_class="X", error_message="late", retry_delay=1.0)]) == {
        (run.id, run.fence): False}
    assert rows(db_url, "SELECT status, processed_count, finished_at IS NOT NULL FROM runner.job_runs") == [
        ("succeeded", 7, True)]


def test_stale_and_current_outcome_in_one_batch_land_per_fence(conns: Any, db_url: str) -> None:
    """Edges #10: "landed" is per (run, fence). The stale outcome of attempt 1 and the
    current outcome of attempt 2 of the same run in one batch: only attempt 2's lands, and
    attempt 1 is closed stale, never marked with attempt 2's outcome."""
    a, b = conns
    _, (run,) = ledger.claim_slots(a, owner(), claims("report", T0, ["t1"]), now=T0)
    ledger.unlock_runs(a, 21077, [run.id])  # the owner's session is gone
    (taken,), _ = ledger.take_over_orphans(b, owner(), ["report"], 10, now=T0)
    assert taken.fence == run.fence + 1
    landed = ledger.finish_attempts(b, [
        Outcome(run.id, run.fence, "failed", error_class="Old", error_message="stale", retry_delay=1.0),
        Outcome(taken.id, taken.fence, "succeeded", processed=3)])
    assert landed == {(run.id, run.fence): False, (taken.id, taken.fence): True}
    assert rows(db_url, "SELECT fence, status FROM runner.attempts ORDER BY fence") == [
        (1, "stale"), (2, "succeeded")]
    assert rows(db_url, "SELECT status, last_error FROM runner.job_runs") == [("succeeded", None)]


def test_failure_schedules_retry_and_retry_claim_bumps_fence(conns: Any, db_url: str) -> None:
    a, b = conns
    _, (run,) = ledger.claim_slots(a, owner(), claims("report", T0, ["t1"]), now=T0)
    ledger.finish_attempts(b, [Outcome(run.id, 1, "failed", error_class="ValueError", error_message="boom", retry_delay=30.0)], now=T0)
    assert rows(db_url, "SELECT status, next_attempt_at, last_error FROM runner.job_runs") == [
        ("failed", T0 + timedelta(seconds=30), "ValueError: boom")]
    ledger.unlock_runs(a, 21077, [run.id])
    # just before the retry is due: nothing; just after: the next attempt, fence 2
    _, none = ledger.claim_due_runs(b, owner(), ["report"], 10, now=T0 + timedelta(seconds=29.999))
    assert none == []
    _, (retry,) = ledger.claim_due_runs(b, owner(), ["report"], 10, now=T0 + timedelta(seconds=30))
    assert (retry.id, retry.attempt, retry.fence, retry.trigger, retry.locked) == (run.id, 2, 2, "retry", True)
    assert rows(db_url, "SELECT attempt, fence, status FROM runner.attempts ORDER BY fence") == [
        (1, 1, "failed"), (2, 2, "running")]


def test_heartbeat_is_fence_checked(conns: Any) -> None:
    a, b = conns
    _, (run,) = ledger.claim_slots(a, owner(), claims("report", T0, ["t1"]), now=T0)
    assert ledger.heartbeat_attempt(b, run.id, run.fence, processed=5, failed=None)
    b.execute("UPDATE runner.job_runs SET fence = fence + 1 WHERE id = %s", (run.id,))
    assert not ledger.heartbeat_attempt(b, run.id, run.fence, processed=6, failed=None)


def test_unlock_releases_the_session_lock(conns: Any, db_url: str) -> None:
    a, _ = conns
    _, won = ledger.claim_slots(a, owner(), claims("report", T0, ["t1", "t2"]), now=T0)
    assert scalar(db_url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())") == 2
    ledger.unlock_runs(a, 21077, [r.id for r in won])
    assert scalar(db_url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())") == 0


def test_sync_records_schedule_history_only_on_change(conns: Any, db_url: str) -> None:
    a, _ = conns
    app = make_app()
    ledger.sync_jobs(a, list(app.jobs.values()), now=T0)  # unchanged: no new history row
    assert scalar(db_url, "SELECT count(*) FROM runner.job_schedules WHERE job_name = 'report'") == 1
    changed = Runner()

    @changed.job("report", every="5m", partitions=["t1", "t2"])
    def report(ctx: Any) -> None: ...

    ledger.sync_jobs(a, list(changed.jobs.values()), now=T0)
    hist = rows(db_url, "SELECT valid_from, every_interval FROM runner.job_schedules"
                        " WHERE job_name = 'report' ORDER BY valid_from")
    assert hist == [(T0 - timedelta(hours=1), timedelta(minutes=1)), (T0, timedelta(minutes=5))]
    assert scalar(db_url, "SELECT track_from FROM runner.jobs WHERE job_name = 'report'") == (
        T0 - timedelta(hours=1))


def test_names_and_partitions_with_any_characters(conns: Any, db_url: str) -> None:
    a, _ = conns
    weird = Runner()
    name = "q'uote\"s; DROP TABLE x; -- 한국어 " + "x" * 100

    @weird.job(name, every="1m", partitions=["'; --", "☃", "a" * 10000])
    def h(ctx: Any) -> None: ...

    ledger.sync_jobs(a, list(weird.jobs.values()), now=T0)
    _, won = ledger.claim_slots(a, owner(), claims(name, T0, ["'; --", "☃", "a" * 10000]), now=T0)
    assert sorted(r.partition_key for r in won) == sorted(["'; --", "☃", "a" * 10000])
    assert scalar(db_url, "SELECT job_name FROM runner.jobs WHERE job_name = %s", (name,)) == name


def test_claim_maps_each_won_row_back_to_its_slot_and_partition(conns: Any, db_url: str) -> None:
    """The claim returns only positions and ids; what the caller builds from them must be
    what the ledger holds, across several job x slot groups, with a row given twice."""
    a, _ = conns
    batch = (claims("report", T0, ["t2", "t1"]) + claims("pausable", T0 - timedelta(minutes=1), [""])
             + claims("report", T0 - timedelta(minutes=1), ["t1"]) + claims("report", T0, ["t2"]))
    _, won = ledger.claim_slots(a, owner(), batch, now=T0 + timedelta(seconds=1))
    assert len(won) == 4  # the repeated row names its run once
    stored = {r[0]: r[1:] for r in rows(db_url, "SELECT id, job_name, schedule_slot, partition_key, business_date,"
                                                " window_start, window_end, idempotency_key FROM runner.job_runs")}
    assert {r.id: (r.job_name, r.slot, r.partition_key, r.business_date, r.window_start, r.window_end,
                   r.idempotency_key) for r in won} == stored
    assert len({r.id for r in won}) == 4


def test_claim_keeps_partition_keys_of_any_text(conns: Any, db_url: str) -> None:
    a, _ = conns
    keys = ['quote"s', "back\\slash", "tab\tnew\nline", "é🙂", "{braces}", "comma,here", " ", "NULL"]
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE runner.jobs SET partitions = %s WHERE job_name = 'report'", (keys,))
    _, won = ledger.claim_slots(a, owner(), claims("report", T0, keys), now=T0)
    assert sorted(r.partition_key for r in won) == sorted(keys)
    assert sorted(r[0] for r in rows(db_url, "SELECT partition_key FROM runner.job_runs")) == sorted(keys)


def test_unclaimed_rows_are_checked_by_key_not_by_count(conns: Any) -> None:
    """Edges (suspicion: shares settled by count). A slot with two runs, t1 and t3, while
    this runner's list says t1 and t2 (a rolling deploy): t2 is unclaimed although the slot
    has as many runs as this runner expects partitions."""
    a, _ = conns
    ledger.claim_slots(a, owner(), claims("report", T0, ["t1", "t3"]), now=T0)
    mine = claims("report", T0, ["t1", "t2"]) + claims("pausable", T0, [""])
    assert ledger.unclaimed_rows(a, mine) == {1, 2}
    assert ledger.unclaimed_rows(a, []) == set()


def test_unclaimed_rows_probe_each_row_by_its_key_on_a_young_ledger(conns: Any, db_url: str) -> None:
    """Perf (issue 32): a runner asks this of tens of thousands of rows half a second after a
    wide slot, on a ledger whose statistics still say "empty". Planned as it pleased, the
    statement read every run once per row (seconds, with the database's CPU) or hashed the
    whole table: it must reach runs only by their business key, one probe per row."""
    a, _ = conns
    keys = [f"t{i}" for i in range(3000)]
    ledger.claim_slots(a, owner(), claims("report", T0, keys[:1500]), now=T0)
    with psycopg.connect(db_url, autocommit=True) as conn:  # statistics taken while it was small
        conn.execute("ANALYZE runner.job_runs")
    ledger.claim_slots(a, owner(), claims("report", T0, keys[1500:2000]), now=T0)
    with psycopg.connect(db_url, autocommit=True) as conn, logged_plans(conn, analyze=True) as plans:
        assert ledger.unclaimed_rows(conn, claims("report", T0, keys)) == set(range(2000, 3000))
    (plan,) = plans
    reads = [n for n in plan_nodes(plan["Plan"]) if n.get("Relation Name") == "job_runs"]
    assert reads and all(n["Node Type"] == "Index Scan" and n["Index Name"] == "job_runs_business_key"
                         for n in reads), reads
    assert sum(n["Actual Loops"] for n in reads) == 3000, reads


def test_beats_outcomes_and_takeovers_of_the_same_runs_never_deadlock(db_url: str) -> None:
    """Edges (suspicion: "takeover and completer batches lock the same runs in different
    orders"). 2,000 running runs: the owner's loop beats all of them (one statement) while its
    completer records their outcomes in shuffled batches and a peer takes over the half whose
    lock is gone (as after a lost session). Row locks are always taken runs first, attempts
    second, and the takeover skips locked runs, so no statement ever waits in a cycle:
    PostgreSQL reports no deadlock (it would cancel one statement after deadlock_timeout)."""
    import random
    import threading

    many = Runner()

    @many.job("wide", every="1m", partitions=[f"p{i}" for i in range(1000)])
    def wide(ctx: Any) -> None: ...

    loop_conn, completer, peer = (psycopg.connect(db_url, autocommit=True) for _ in range(3))
    ledger.sync_jobs(loop_conn, list(many.jobs.values()), now=T0 - timedelta(days=1))
    me, other = owner(), owner()
    deadlocks: list[BaseException] = []
    taken = 0
    try:
        for k in range(2):
            slot = T0 + timedelta(minutes=k)
            start = slot - timedelta(minutes=1)
            batch = [SlotClaim("wide", slot, f"p{i}", slot.date(), start, slot,
                               idempotency_key("wide", start, slot, f"p{i}", "1")) for i in range(1000)]
            _, won = ledger.claim_slots(loop_conn, me, batch, now=slot + timedelta(seconds=1))
            ids = [r.id for r in won]
            ledger.unlock_runs(loop_conn, me.namespace, ids[::2])  # their owner's lock is gone
            stop = threading.Event()

            def guarded(fn: Any, stop: threading.Event = stop) -> Any:
                def run() -> None:
                    while not stop.is_set():
                        try:
                            fn()
                        except psycopg.errors.DeadlockDetected as exc:
                            deadlocks.append(exc)
                return run

            def take() -> None:
                nonlocal taken
                got, _ = ledger.take_over_orphans(peer, other, ["wide"], 100)
                taken += len(got)

            threads = [threading.Thread(target=guarded(lambda: ledger.heartbeat_attempts(loop_conn, me, ids))),  # noqa: B023
                       threading.Thread(target=guarded(take))]
            for t in threads:
                t.start()
            outcomes = [Outcome(r.id, r.fence, "succeeded") for r in won]
            random.Random(k).shuffle(outcomes)
            for i in range(0, len(outcomes), 100):
                try:
                    ledger.finish_attempts(completer, outcomes[i:i + 100])
                except psycopg.errors.DeadlockDetected as exc:
                    deadlocks.append(exc)
            stop.set()
            for t in threads:
                t.join()
    finally:
        for c in (loop_conn, completer, peer):
            c.close()
    assert deadlocks == []
    assert taken > 0, "the peer took over none of the orphaned runs: the race was not exercised"
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status NOT IN ('succeeded', 'running')") == 0


def _xact_seq_scans(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Sequential scans of the hot tables by this session's current transaction."""
    return dict(conn.execute("SELECT relname, seq_scan FROM pg_stat_xact_user_tables"
                             " WHERE schemaname = 'runner' AND relname IN ('job_runs', 'attempts')").fetchall())


def test_outcomes_reach_runs_by_key_on_a_ledger_grown_since_the_plan(conns: Any) -> None:
    """The session's plans were made while the ledger was small (a young ledger, statistics
    refreshed every 100,000 changed rows): outcome batches still reach each run and attempt by
    its key, never by reading every run (revision 0019_wide)."""
    a, b = conns
    me = owner()
    # the completer's session records small batches while the ledger holds a few runs: the
    # function's plan is kept for the session (PL/pgSQL), made on those statistics
    for k in range(8):
        _, won = ledger.claim_slots(a, me, claims("report", T0 + timedelta(minutes=k), ["t1", "t2"]),
                                    now=T0 + timedelta(minutes=k, seconds=1))
        assert ledger.finish_attempts(b, [Outcome(r.id, r.fence, "succeeded") for r in won])
    # then the ledger grows by 20,000 runs, as one wide instant makes them
    slot = T0 + timedelta(hours=1)
    wide = claims("report", slot, [f"p{i:05d}" for i in range(20000)])
    won = []
    for i in range(0, len(wide), 2000):  # (each won run holds an advisory lock until unlocked)
        batch = ledger.claim_slots(a, me, wide[i:i + 2000], now=slot + timedelta(seconds=1))[1]
        ledger.unlock_runs(a, me.namespace, [r.id for r in batch])
        won += batch
    assert len(won) == 20000
    with b.transaction():
        landed = ledger.finish_attempts(b, [Outcome(r.id, r.fence, "succeeded") for r in won[:200]])
        assert len(landed) == 200 and all(landed.values())
        assert _xact_seq_scans(b) == {"job_runs": 0, "attempts": 0}
