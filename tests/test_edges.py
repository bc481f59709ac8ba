"""Edges: each confirmed way the ledger could say a slot was done, or accounted for, when it
was not (the "Edges" issue, its numbers in each test's docstring). Every test here failed on
the code before the fix; each checks the ledger the way an operator would."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner import JobContext, Runner
from runner.store import ledger
from runner.store.ledger import Outcome
from runner.worker import executor
from runner.worker.loop import LoopConfig, Worker
from tests.apps.edges import FAN_KEYS
from tests.support import (
    RunnerProcess,
    assert_ledger_clean,
    eventually,
    rows,
    run_cli,
    running_worker,
    scalar,
)

ROOT = Path(__file__).resolve().parent.parent
EDGES = "tests/apps/edges.py"

COALESCED_INTO_NOTHING = """
SELECT c.id FROM runner.job_runs c
WHERE c.job_name = %s AND c.status = 'coalesced'
  AND NOT EXISTS (SELECT 1 FROM runner.job_runs t
                  WHERE t.job_name = c.job_name AND t.partition_key = c.partition_key
                    AND t.schedule_slot = c.coalesced_into_slot
                    AND t.status NOT IN ('skipped', 'coalesced', 'cancelled')
                    AND t.window_start <= c.window_start)"""


def test_coalesce_over_a_long_downtime_points_every_row_at_a_run(db_url: str, tmp_path: Path) -> None:
    """#2: 20 minutes x 2 partitions late (2,400 rows, more than one batch of 1,000) while
    the loop claims on-time slots: every late slot is decided, every coalesced row points at
    a run that covers it, and nothing from the tracked range is left to the gap scan."""
    proc = RunnerProcess(f"{EDGES}:coalesce_app", db_url, "--poll-interval", "0.2",
                         log=tmp_path / "runner.log")
    try:
        def decided() -> bool:
            pending = scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'pending'")
            coalesced = scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'coalesced'")
            return pending == 0 and coalesced >= 2 * 1190
        eventually(decided, timeout=60, message="the downtime decided and its runs done")
        now = scalar(db_url, "SELECT now() - interval '3 seconds'")
    finally:
        assert proc.terminate() == 0, proc.output()
    assert rows(db_url, COALESCED_INTO_NOTHING, ("wide-coalesce",)) == []
    missing = rows(db_url, "SELECT schedule_slot, partition_key, state FROM runner.missing_slots_v1(%s)"
                           " WHERE job_name = 'wide-coalesce'", (now,))
    assert missing == []
    # one coalescing run per partition, covering the whole downtime
    mains = rows(db_url, "SELECT partition_key, status FROM runner.job_runs WHERE job_name = 'wide-coalesce'"
                         " AND trigger = 'catch_up' AND status <> 'coalesced' ORDER BY 1")
    assert mains == [("a", "succeeded"), ("b", "succeeded")]
    assert_ledger_clean(db_url)


def _one_job_worker(db_url: str, name: str, handler: Any, **options: Any) -> tuple[Worker, ledger.SlotClaim]:
    """A started Worker (its loop not running: the test drives its steps) of one hourly job,
    and the claim of one of its slots."""
    app = Runner()
    app.job(name, every="1h", **options)(handler)
    worker = Worker(app, db_url, LoopConfig(workers=2, poll_interval=0.05))
    worker.start()
    slot = datetime(2026, 1, 1, tzinfo=UTC)
    return worker, ledger.SlotClaim(name, slot, "", slot.date(), slot - timedelta(hours=1), slot, "k")


def test_a_refused_outcome_does_not_unlock_the_newer_attempt(db_url: str) -> None:
    """#3: after its lock session was lost, this process took its own run over on the new
    session (fence 2); the old attempt's outcome (fence 1) is refused and must not release
    the lock that attempt 2 holds."""
    release = threading.Event()
    worker, claim = _one_job_worker(db_url, "relocked", lambda ctx: release.wait(30))
    try:
        conn = worker.session.conn()
        _, (old,) = ledger.claim_slots(conn, worker.owner, [claim])
        worker.executor.start([old])
        ledger.unlock_runs(conn, worker.owner.namespace, [old.id])  # as if the session had died:
        worker.attempts.release([old])  # (what a reconnect does with its holds)
        with psycopg.connect(db_url, autocommit=True) as admin:  # (its backend gone)
            admin.execute("UPDATE runner.attempts SET owner_backend_pid = NULL WHERE run_id = %s", (old.id,))
        (new,), _ = ledger.take_over_orphans(conn, worker.owner, ["relocked"], 10)
        worker.executor.start([new])
        assert new.fence == old.fence + 1
        done = worker.completer.record(None, [(old, Outcome(old.id, old.fence, "succeeded"))])  # refused: stale
        if done is not None:
            done.close()
        held = scalar(db_url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                              " AND pid = %s", (conn.info.backend_pid,))
        assert held == 1, "the stale outcome released attempt 2's lock"
    finally:
        release.set()
        worker.stop()
        worker.shutdown()


def test_a_retry_claimed_before_the_old_attempt_unlocks_leaves_no_lock(db_url: str) -> None:
    """The completer commits an outcome (a failure, retry due at once) and unlocks the run a
    moment later; in that moment this same process claims the retry on its lock session, and
    the re-entrant session lock is held twice. Each attempt's end must release its own hold:
    the old end used to skip its unlock (the run's newest fence was no longer its own), so the
    key stayed held after the run ended, and every later attempt of the run (a rerun) failed
    with runner.LockUnavailable until the process exited."""
    release = threading.Event()
    worker, claim = _one_job_worker(db_url, "relocked", lambda ctx: release.wait(30))
    try:
        conn = worker.session.conn()
        _, (old,) = ledger.claim_slots(conn, worker.owner, [claim])
        worker.executor.start([old])
        failed = Outcome(old.id, old.fence, "failed", error_class="E", error_message="x", retry_delay=0.0)
        with psycopg.connect(db_url, autocommit=True) as other:  # the completer's commit
            assert ledger.finish_attempts(other, [failed]) == {(old.id, old.fence): True}
        _, (new,) = ledger.claim_due_runs(conn, worker.owner, ["relocked"], 5)  # before the unlock
        assert (new.id, new.fence, new.locked) == (old.id, old.fence + 1, True)
        worker.executor.start([new])

        for run, outcome in ((old, failed), (new, Outcome(new.id, new.fence, "succeeded"))):
            done = worker.completer.record(None, [(run, outcome)])  # the old one: refused, already landed
            if done is not None:
                done.close()
        assert scalar(db_url, "SELECT status FROM runner.job_runs WHERE id = %s", (old.id,)) == "succeeded"
        assert scalar(db_url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                              " AND pid = %s", (conn.info.backend_pid,)) == 0, "the run's key stays held"
        with psycopg.connect(db_url, autocommit=True) as other:  # nobody else is kept out
            assert other.execute("SELECT pg_try_advisory_lock(runner.lock_key_v1(%s, %s))",
                                 (worker.owner.namespace, old.id)).fetchone() == (True,)
    finally:
        release.set()
        worker.stop()
        worker.shutdown()


def test_a_retry_claimed_while_another_runner_unlocks_is_released_uncounted(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same moment seen from another process: runner A committed a failure (retry due at
    once) and has not unlocked yet when runner B claims the retry. B's attempt must not fail
    as if a squatter held the key (that burnt one of max_attempts=2 for nothing, and the run
    went dead), nor wait with the run running and its key free (the takeover duty takes such
    a run for an orphan: the hand check saw the handler run twice). B releases it, uncounted,
    and the run's next claim runs it. A runner session that keeps the key gets that once: the
    next attempt fails, counted."""
    ran = threading.Event()
    a_worker, claim = _one_job_worker(db_url, "handed", lambda ctx: ran.set(), max_attempts=2)
    worker, _ = _one_job_worker(db_url, "handed", lambda ctx: ran.set(), max_attempts=2)
    try:
        a, conn = a_worker.session.conn(), worker.session.conn()  # A's and B's lock sessions
        _, (old,) = ledger.claim_slots(a, a_worker.owner, [claim])
        failed = Outcome(old.id, old.fence, "failed", error_class="E", error_message="x", retry_delay=0.0)
        with psycopg.connect(db_url, autocommit=True) as completer:  # A's completer commits
            assert ledger.finish_attempts(completer, [failed]) == {(old.id, old.fence): True}

        def claim_retry() -> ledger.ClaimedRun:
            def claimed() -> ledger.ClaimedRun | None:
                _, got = ledger.claim_due_runs(conn, worker.owner, ["handed"], 5)
                return got[0] if got else None
            return eventually(claimed, timeout=10, message="due again")

        def released_as_a_retry(run: ledger.ClaimedRun, seconds: float) -> None:
            """The LockBusy release keeps the run's trigger and is due ``seconds`` after it
            (revision 0024_sessions; before: trigger recovery, due at once)."""
            eventually(lambda: scalar(db_url, "SELECT status FROM runner.job_runs WHERE id = %s AND fence = %s",
                                      (run.id, run.fence)) == "pending", timeout=10, message="released")
            got = rows(db_url, "SELECT r.trigger, r.next_attempt_at - a.finished_at FROM runner.job_runs r"
                               " JOIN runner.attempts a ON a.run_id = r.id AND a.fence = r.fence"
                               " WHERE r.id = %s AND r.status = 'pending'", (run.id,))
            assert got == [("retry", timedelta(seconds=seconds))], got

        new = claim_retry()  # B, before A unlocks
        assert (new.id, new.locked) == (old.id, False)
        worker.executor.start([new])
        released_as_a_retry(new, 1.0)
        # A still has not unlocked: released again, each time twice as late (shortened here)
        monkeypatch.setattr(executor, "LOCK_BUSY_DELAY", 0.05)
        for streak in range(1, executor.LOCK_BUSY_RELEASES):
            again = claim_retry()
            assert again.locked is False
            worker.executor.start([again])
            released_as_a_retry(again, 0.05 * 2 ** streak)
        last = claim_retry()  # and after LOCK_BUSY_RELEASES in a row, the attempt counts
        assert last.locked is False
        worker.executor.start([last])
        eventually(lambda: scalar(db_url, "SELECT status FROM runner.job_runs WHERE id = %s",
                                  (old.id,)) == "dead", timeout=10, message="the run dead")
        assert not ran.is_set()
        assert rows(db_url, "SELECT fence, status, error_class FROM runner.attempts WHERE run_id = %s"
                            " ORDER BY fence", (old.id,)) == [
            (1, "failed", "E"), *[(f, "released", "runner.LockBusy") for f in range(2, 2 + executor.LOCK_BUSY_RELEASES)],
            (2 + executor.LOCK_BUSY_RELEASES, "dead", "runner.errors.LockUnavailable")]

        # the same moment once: A unlocks a round trip late, and the retry runs
        claim2 = ledger.SlotClaim("handed", claim.slot + timedelta(hours=1), "", claim.business_date,
                                  claim.slot, claim.slot + timedelta(hours=1), "k2")
        _, (old2,) = ledger.claim_slots(a, a_worker.owner, [claim2])
        failed2 = Outcome(old2.id, old2.fence, "failed", error_class="E", error_message="x", retry_delay=0.0)
        with psycopg.connect(db_url, autocommit=True) as completer:
            assert ledger.finish_attempts(completer, [failed2]) == {(old2.id, old2.fence): True}
        _, (new2,) = ledger.claim_due_runs(conn, worker.owner, ["handed"], 5)
        assert (new2.id, new2.locked) == (old2.id, False)
        worker.executor.start([new2])
        released_as_a_retry(new2, 0.05)
        ledger.unlock_runs(a, a_worker.owner.namespace, [old2.id])  # A's unlock
        third = claim_retry()
        assert (third.id, third.locked) == (old2.id, True)
        worker.executor.start([third])
        assert ran.wait(10), "the retry never ran"
        eventually(lambda: scalar(db_url, "SELECT status FROM runner.job_runs WHERE id = %s",
                                  (old2.id,)) == "succeeded", timeout=10, message="the retry recorded")
        assert rows(db_url, "SELECT fence, status, error_class FROM runner.attempts WHERE run_id = %s"
                            " ORDER BY fence", (old2.id,)) == [
            (1, "failed", "E"), (2, "released", "runner.LockBusy"), (3, "succeeded", None)]
        assert scalar(db_url, "SELECT attempt - uncounted_attempts FROM runner.job_runs WHERE id = %s",
                      (old2.id,)) == 2  # within max_attempts=2: the release did not count
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                                          " AND granted AND pid = %s", (conn.info.backend_pid,)) == 0,
                   timeout=10, message="B released the key")
    finally:
        for w in (worker, a_worker):
            w.stop()
            w.shutdown()


def test_an_attempt_taken_over_before_it_took_its_key_never_runs(db_url: str) -> None:
    """Runner B claims a retry while runner A still holds the run's key, then B stops (a
    hang) before it looks at the key again. A unlocks; five seconds on, the takeover duty
    takes the run for an orphan (its attempt running, its key free: the exception for a fresh
    attempt of a live runner session is over), and A's recovery succeeds and unlocks. When B
    wakes up the key is free: it must not run the handler of an attempt that lost its run
    (before, it took the key and ran it: the work done twice, the outcome then refused)."""
    ran = threading.Event()
    a_worker, claim = _one_job_worker(db_url, "woken", lambda ctx: ran.set())
    worker, _ = _one_job_worker(db_url, "woken", lambda ctx: ran.set())
    try:
        a, conn = a_worker.session.conn(), worker.session.conn()
        _, (old,) = ledger.claim_slots(a, a_worker.owner, [claim])
        failed = Outcome(old.id, old.fence, "failed", error_class="E", error_message="x", retry_delay=0.0)
        with psycopg.connect(db_url, autocommit=True) as completer:
            assert ledger.finish_attempts(completer, [failed]) == {(old.id, old.fence): True}
        _, (late,) = ledger.claim_due_runs(conn, worker.owner, ["woken"], 5)  # B, A still locked
        assert (late.id, late.locked) == (old.id, False)
        # B hangs here; A unlocks, and the takeover finds the attempt 5 s old, its key free
        ledger.unlock_runs(a, a_worker.owner.namespace, [old.id])
        with psycopg.connect(db_url, autocommit=True) as admin:
            admin.execute("UPDATE runner.attempts SET started_at = started_at - interval '10 seconds',"
                          " heartbeat_at = heartbeat_at - interval '10 seconds'"
                          " WHERE run_id = %s AND fence = %s", (late.id, late.fence))
        (taken,), _ = ledger.take_over_orphans(a, a_worker.owner, ["woken"], 10)
        assert (taken.id, taken.fence, taken.trigger) == (late.id, late.fence + 1, "recovery")
        with psycopg.connect(db_url, autocommit=True) as completer:
            done = ledger.finish_attempts(completer, [Outcome(taken.id, taken.fence, "succeeded")])
            assert done == {(taken.id, taken.fence): True}
        ledger.unlock_runs(a, a_worker.owner.namespace, [taken.id])

        worker.executor.start([late])  # B wakes up: the key is free now
        eventually(lambda: scalar(db_url, "SELECT status FROM runner.attempts WHERE run_id = %s AND fence = %s",
                                  (late.id, late.fence)) == "stale", timeout=10, message="B's attempt closed stale")
        assert not ran.is_set(), "the handler of an attempt that lost its run ran"
        assert scalar(db_url, "SELECT status FROM runner.job_runs WHERE id = %s", (late.id,)) == "succeeded"
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                                          " AND granted AND pid = %s", (conn.info.backend_pid,)) == 0,
                   timeout=10, message="B let the key go")
    finally:
        for w in (worker, a_worker):
            w.stop()
            w.shutdown()


def test_the_worker_role_may_read_who_holds_a_run_key(db_url: str, db_roles: Any) -> None:
    """Worker._key_held reads the key's holder as the runner's own login (the worker role,
    sql/roles.sql); an error there would be taken for "not a runner session" and count the
    attempt. As the worker login: a key held by a registered runner session is seen as such,
    and a free key is taken."""
    db_roles.apply(db_url)
    login_url = db_roles.url(db_url, "worker")
    worker, claim = _one_job_worker(login_url, "held", lambda ctx: None)  # a runner of that login
    try:
        _, (run,) = ledger.claim_slots(worker.session.conn(), worker.owner, [claim])  # held by its session
        with psycopg.connect(login_url, autocommit=True) as login:
            assert ledger.key_holder(login, worker.owner.namespace, run.id, run.fence + 1) == (False, True, False)
            ledger.unlock_runs(worker.session.conn(), worker.owner.namespace, [run.id])
            assert ledger.key_holder(login, worker.owner.namespace, run.id, run.fence + 1)[0] is True
    finally:
        worker.stop()
        worker.shutdown()


def test_a_handler_that_kills_its_process_ends_dead(db_url: str, tmp_path: Path) -> None:
    """#4: a supervisor restarts `runner start` each time the handler kills it: after
    max_attempts=3 counted attempts the run is dead, not taken over for ever. The job's one
    slot (daily, 30 minutes ago, the same in each process) is late at start, and no other
    falls due while the test runs."""
    slot = (datetime.now(UTC) - timedelta(minutes=30)).replace(second=0, microsecond=0)
    for i in range(6):
        if scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'dead'"):
            break
        proc = RunnerProcess(f"{EDGES}:crash_app", db_url, "--poll-interval", "0.1",
                             env={"EDGES_CRASH_SLOT": slot.isoformat()}, log=tmp_path / f"r{i}.log")
        try:
            eventually(lambda: proc.proc.poll() is not None  # noqa: B023
                       or scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'dead'"),
                       timeout=60, message="the handler ended its process, or the run is dead")
        finally:
            proc.kill()
    got = rows(db_url, "SELECT id, status, attempt, last_error LIKE 'runner.OwnerLost%%', schedule_slot"
                       " FROM runner.job_runs WHERE status <> 'coalesced'")
    assert len(got) == 1 and got[0][1:] == ("dead", 3, True, slot), got
    assert rows(db_url, "SELECT fence, status FROM runner.attempts WHERE run_id = %s ORDER BY fence",
                (got[0][0],)) == [(1, "abandoned"), (2, "abandoned"), (3, "abandoned")]
    assert_ledger_clean(db_url)


def test_a_partial_dynamic_fanout_shows_every_missing_partition(db_url: str, tmp_path: Path) -> None:
    """#5: a `runner start` with one handler thread is stopped (grace 0.2 s) after claiming 1
    of the 30 partitions of a dynamic job: the gap scan lists each of the 29 others (it used to
    see "at least one run" and list nothing), and the released run is pending again."""
    proc = RunnerProcess(f"{EDGES}:fan_app", db_url, "--poll-interval", "0.05", "--workers", "1",
                         "--max-inflight", "1", "--grace", "0.2", log=tmp_path / "runner.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.attempts WHERE status = 'running'") == 1,
                   timeout=60, message="one partition claimed and running")
    finally:
        assert proc.terminate() == 0, proc.output()
    (fan_slot, ran), = rows(db_url, "SELECT schedule_slot, partition_key FROM runner.job_runs")
    assert rows(db_url, "SELECT partitions FROM runner.slot_fanouts WHERE job_name = 'fan'"
                        " AND schedule_slot = %s", (fan_slot,)) == [(FAN_KEYS,)]
    listed = rows(db_url, "SELECT partition_key FROM runner.missing_slots_v1(now(), 'fan')"
                          " WHERE schedule_slot = %s AND state = 'never_started' ORDER BY 1", (fan_slot,))
    assert [r[0] for r in listed] == sorted(k for k in FAN_KEYS if k != ran)
    assert rows(db_url, "SELECT status, trigger FROM runner.job_runs") == [("pending", "recovery")]
    assert_ledger_clean(db_url)


def test_a_window_callable_that_raises_fails_its_slot_not_the_loop(db_url: str, tmp_path: Path) -> None:
    """#6: one job's window callable raises for every slot: the other job keeps running in the
    same `runner start`, and the failing slots are recorded and listed by the gap scan as
    fanout_failed."""
    proc = RunnerProcess(f"{EDGES}:window_app", db_url, "--poll-interval", "0.1", log=tmp_path / "runner.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'healthy'"
                                          " AND status = 'succeeded'") >= 3,
                   timeout=60, message="the healthy job kept running")
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.slot_fanouts"
                                          " WHERE job_name = 'bad-window' AND error IS NOT NULL") >= 2, timeout=60)
    finally:
        assert proc.terminate() == 0, proc.output()
    states = rows(db_url, "SELECT DISTINCT state, last_error LIKE 'RuntimeError: no window%%'"
                          " FROM runner.missing_slots WHERE job_name = 'bad-window'")
    assert states == [("fanout_failed", True)]
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'bad-window'") == 0
    assert_ledger_clean(db_url)


def test_an_overloaded_runner_never_claims_a_late_slot_as_on_time(db_url: str, tmp_path: Path) -> None:
    """#7: a 2.5 s handler, a slot every second, one handler thread in a real `runner start`:
    slots past grace go to the misfire policy (skip, with the reason) instead of starting late
    as 'schedule'."""
    proc = RunnerProcess(f"{EDGES}:overload_app", db_url, "--poll-interval", "0.05", "--workers", "1",
                         "--max-inflight", "1", "--grace", "5", log=tmp_path / "runner.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'skipped'") >= 3,
                   timeout=60, message="late slots skipped")
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 2,
                   timeout=60)
    finally:
        assert proc.terminate() == 0, proc.output()
    late = rows(db_url, "SELECT r.schedule_slot, a.started_at - r.schedule_slot FROM runner.job_runs r"
                        " JOIN runner.attempts a ON a.run_id = r.id AND a.fence = 1"
                        " WHERE r.trigger = 'schedule' AND a.started_at - r.schedule_slot > interval '1.5 seconds'")
    assert late == []
    reasons = rows(db_url, "SELECT DISTINCT left(status_reason, 14) FROM runner.job_runs WHERE status = 'skipped'")
    assert reasons == [("misfire=skip: ",)]
    assert_ledger_clean(db_url)


def test_heartbeats_continue_during_the_shutdown_grace(db_url: str, tmp_path: Path) -> None:
    """#8: lease 1 s, a 4 s handler, SIGTERM while it runs, a peer watching: the stopping
    runner keeps beating, so the peer never ends its session and never re-runs the work."""
    a = RunnerProcess(f"{EDGES}:lease_app", db_url, "--poll-interval", "0.1", env={"EDGES_SLOW": "1"},
                      log=tmp_path / "a.log")
    b = RunnerProcess(f"{EDGES}:lease_app", db_url, "--poll-interval", "0.1", env={"EDGES_SLOW": "0"},
                      log=tmp_path / "b.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.attempts WHERE status = 'running'"
                                          " AND owner_pid = %s", (a.proc.pid,)), timeout=60,
                   message="a slow attempt running on the first runner")
        slow_run = scalar(db_url, "SELECT run_id FROM runner.attempts WHERE status = 'running'"
                                  " AND owner_pid = %s", (a.proc.pid,))
        assert a.terminate(timeout=60) == 0, a.output()
    finally:
        a.kill()
        assert b.terminate() == 0, b.output()
    assert rows(db_url, "SELECT status, attempt FROM runner.job_runs WHERE id = %s", (slow_run,)) == [
        ("succeeded", 1)]
    assert scalar(db_url, "SELECT count(*) FROM runner.attempts WHERE status = 'abandoned'") == 0
    assert_ledger_clean(db_url)


def test_paused_slots_stay_in_the_gap_scan_across_a_restart(db_url: str, tmp_path: Path) -> None:
    """#9: pause a job, restart its runner while paused, resume: the slots that fell due while
    it was paused are never turned into misfire decisions (skipped); the gap scan lists them."""
    a = RunnerProcess(f"{EDGES}:skip_app", db_url, "--poll-interval", "0.1", log=tmp_path / "a.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 2,
                   timeout=60)
        out = run_cli("pause", "pausable-skip", "--reason", "test", "--yes", url=db_url)
        assert out.returncode == 0, out.stderr
        committed = scalar(db_url, "SELECT now()")
    finally:
        assert a.terminate() == 0, a.output()
    paused_at = scalar(db_url, "SELECT paused_from FROM runner.job_pauses")
    eventually(lambda: scalar(db_url, "SELECT now() - %s > interval '3 seconds'", (paused_at,)), timeout=60)
    b = RunnerProcess(f"{EDGES}:skip_app", db_url, "--poll-interval", "0.1", log=tmp_path / "b.log")
    try:
        eventually(lambda: "runner_started" in b.output(), timeout=60)
        eventually(lambda: scalar(db_url, "SELECT now() - %s > interval '5 seconds'", (paused_at,)), timeout=60)
        out = run_cli("resume", "pausable-skip", "--reason", "test", "--yes", url=db_url)
        assert out.returncode == 0, out.stderr
        resumed = scalar(db_url, "SELECT paused_until FROM runner.job_pauses")
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'"
                                          " AND schedule_slot > %s", (resumed,)) >= 2, timeout=60)
    finally:
        assert b.terminate() == 0, b.output()
    # (a pause takes effect at its commit, not at its clock: a live claim that began between
    # the two may start one slot, docs/how-to/operate-runs.md: seen once here under load)
    decided = rows(db_url, "SELECT schedule_slot, status, trigger FROM runner.job_runs WHERE schedule_slot > %s"
                           " AND schedule_slot <= %s AND NOT (trigger = 'schedule' AND scheduled_at <= %s)",
                   (paused_at, resumed, committed))
    assert decided == []
    listed = scalar(db_url, "SELECT count(*) FROM runner.missing_slots WHERE job_name = 'pausable-skip'"
                            " AND schedule_slot > %s AND schedule_slot <= %s", (paused_at, resumed))
    assert listed >= 5
    assert_ledger_clean(db_url)


def test_replayed_slots_run_back_to_back(db_url: str, tmp_path: Path) -> None:
    """#12: with a 5 s poll interval, 12 replayed slots of a quick handler finish long before
    12 poll intervals in a real `runner start`: the next catch-up run starts as soon as the
    previous one ends."""
    proc = RunnerProcess(f"{EDGES}:replay_app", db_url, "--poll-interval", "5", log=tmp_path / "runner.log")
    try:
        eventually(lambda: "runner_started" in proc.output(), timeout=60)
        began = scalar(db_url, "SELECT now()")
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE trigger = 'catch_up'"
                                          " AND status = 'succeeded'") == 12, timeout=40,
                   message="12 replays done well within 12 poll intervals (60 s)")
        took = scalar(db_url, "SELECT extract(epoch FROM max(finished_at) - %s) FROM runner.job_runs"
                              " WHERE trigger = 'catch_up'", (began,))
    finally:
        assert proc.terminate() == 0, proc.output()
    assert took < 5 * 6, f"12 replays took {took} s: paced by the poll interval"
    assert_ledger_clean(db_url)


# -- suspicions of the issue, checked (each names what it rules out) --------------------------


def test_a_schedule_change_across_a_downtime_judges_each_slot_by_its_schedule(
        db_url: str, tmp_path: Path) -> None:
    """Suspicion: "a schedule change applies the new schedule to slots before valid_from".
    A runner with every=2s stops; 6 s later one with every=3s starts (misfire=skip). Every run
    before the change is at a 2 s slot and every run after it at a 3 s slot; the downtime's 2 s
    slots are not decided with the new schedule but listed by the gap scan (judged by the
    schedule then in force); the audit is clean."""
    a = RunnerProcess(f"{EDGES}:change_app", db_url, "--poll-interval", "0.1", env={"EDGES_EVERY": "2s"},
                      log=tmp_path / "a.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 2,
                   timeout=60)
    finally:
        assert a.terminate() == 0, a.output()
    stopped = scalar(db_url, "SELECT now()")
    eventually(lambda: scalar(db_url, "SELECT now() - %s > interval '6 seconds'", (stopped,)), timeout=60)
    b = RunnerProcess(f"{EDGES}:change_app", db_url, "--poll-interval", "0.1", env={"EDGES_EVERY": "3s"},
                      log=tmp_path / "b.log")
    try:
        changed = eventually(lambda: scalar(db_url, "SELECT max(valid_from) FROM runner.job_schedules"
                                                    " WHERE job_name = 'changing' AND every_interval = '3s'"),
                             timeout=60)
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'"
                                          " AND schedule_slot > %s", (changed,)) >= 2, timeout=60)
        now = scalar(db_url, "SELECT now() - interval '2 seconds'")
    finally:
        assert b.terminate() == 0, b.output()
    before = [r[0] for r in rows(db_url, "SELECT extract(epoch FROM schedule_slot)::numeric FROM runner.job_runs"
                                         " WHERE schedule_slot < %s", (changed,))]
    after = [r[0] for r in rows(db_url, "SELECT extract(epoch FROM schedule_slot)::numeric FROM runner.job_runs"
                                        " WHERE schedule_slot >= %s", (changed,))]
    assert before and after
    assert all(s % 2 == 0 for s in before), before
    assert all(s % 3 == 0 for s in after), after
    gap = [r[0] for r in rows(db_url, "SELECT extract(epoch FROM schedule_slot)::numeric"
                                      " FROM runner.missing_slots_v1(%s, 'changing')"
                                      " WHERE schedule_slot > %s AND schedule_slot < %s", (now, stopped, changed))]
    assert len(gap) >= 2 and all(s % 2 == 0 for s in gap), gap
    assert_ledger_clean(db_url)


def test_a_failed_misfire_pass_keeps_the_late_range(db_url: str, monkeypatch: Any) -> None:
    """Suspicion: "a transient database error in _decide_misfires drops the job from the
    misfire duty for the process's lifetime". The first two passes fail with a database
    error (a statement cancelled); the on-time slots keep running meanwhile, and the late
    range handed over at start is still decided afterwards."""
    from runner.worker import misfire

    real = misfire.run_once
    failures = []

    def flaky(*args: Any, **kw: Any) -> Any:
        if len(failures) < 2:
            failures.append(1)
            raise psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
        return real(*args, **kw)

    monkeypatch.setattr(misfire, "run_once", flaky)
    app = Runner()

    @app.job("late-skip", every="1s", misfire="skip", grace="1s",
             track_from=datetime.now(UTC) - timedelta(seconds=20))
    def handler(ctx: JobContext) -> None:
        pass

    with running_worker(app, db_url, poll_interval=0.05):
        eventually(lambda: len(failures) == 2, timeout=30, message="two passes failed")
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'skipped'") >= 15,
                   timeout=30, message="the downtime decided after the failures")
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 2,
                   timeout=30)
    assert_ledger_clean(db_url)


def test_a_completer_held_up_past_the_lease_keeps_its_session(db_url: str, tmp_path: Path) -> None:
    """Suspicion: "a completer stuck longer than the lease gets the whole lock session
    terminated because returned-but-unrecorded runs are no longer beaten". Lease 1 s, a peer
    watching: a run's row is locked by another session while its 4 s handler runs, so the
    outcome waits to be recorded well past the lease. The stopping runner keeps beating that
    run: the peer does not end its session, and the run succeeds at its first attempt."""
    a = RunnerProcess(f"{EDGES}:lease_app", db_url, "--poll-interval", "0.1", env={"EDGES_SLOW": "1"},
                      log=tmp_path / "a.log")
    b = None
    try:
        run_id = eventually(lambda: scalar(db_url, "SELECT run_id FROM runner.attempts WHERE status = 'running'"
                                                   " AND owner_pid = %s", (a.proc.pid,)), timeout=60,
                            message="a slow attempt running on the first runner")
        lock_pid = scalar(db_url, "SELECT backend_pid FROM runner.instances WHERE pid = %s", (a.proc.pid,))
        b = RunnerProcess(f"{EDGES}:lease_app", db_url, "--poll-interval", "0.1", env={"EDGES_SLOW": "0"},
                          log=tmp_path / "b.log")
        with psycopg.connect(db_url) as holder:
            holder.execute("SELECT 1 FROM runner.job_runs WHERE id = %s FOR UPDATE", (run_id,))
            blocked = eventually(lambda: scalar(
                db_url, "SELECT now() FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND query LIKE '%%The one place that writes attempt outcomes%%'"), timeout=60,
                message="the handler returned and its outcome waits on the row lock")
            eventually(lambda: scalar(db_url, "SELECT now() - %s > interval '3 seconds'", (blocked,)), timeout=60)
            holder.rollback()
        eventually(lambda: scalar(db_url, "SELECT status FROM runner.job_runs WHERE id = %s", (run_id,))
                   == "succeeded", timeout=60)
        assert scalar(db_url, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (lock_pid,)) == 1, \
            "the peer ended the lock session of a runner whose completer was held up"
    finally:
        assert a.terminate() == 0, a.output()
        if b is not None:
            assert b.terminate() == 0, b.output()
    assert rows(db_url, "SELECT status, attempt FROM runner.job_runs WHERE id = %s", (run_id,)) == [
        ("succeeded", 1)]
    assert scalar(db_url, "SELECT count(*) FROM runner.attempts WHERE status = 'abandoned'") == 0
    assert_ledger_clean(db_url)


def test_a_redeploy_does_not_run_the_new_partitions_for_slots_before_the_change(
        db_url: str, tmp_path: Path) -> None:
    """Found by the model-based test (tests/test_model.py): a runner restarted at once with
    new partitions used to claim the slots of the last ``grace`` seconds, due before the new
    schedule's ``valid_from``, with the new partitions: runs of a partition the schedule then
    in force did not have, and the old partitions of those slots left never started. The new
    definition governs from its ``valid_from`` on; earlier slots are the old one's."""
    old = RunnerProcess(f"{EDGES}:repartition_app", db_url, "--poll-interval", "0.1",
                        env={"EDGES_PARTITIONS": "a,b"}, log=tmp_path / "old.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 4,
                   timeout=30)
    finally:
        assert old.terminate() == 0, old.output()
    new = RunnerProcess(f"{EDGES}:repartition_app", db_url, "--poll-interval", "0.1",
                        env={"EDGES_PARTITIONS": "a,b,c"}, log=tmp_path / "new.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE partition_key = 'c'"
                                          " AND status = 'succeeded'") >= 2, timeout=30)
    finally:
        assert new.terminate() == 0, new.output()
    changed_at = scalar(db_url, "SELECT max(valid_from) FROM runner.job_schedules WHERE job_name = 'repartitioned'")
    early = rows(db_url, "SELECT schedule_slot, partition_key, trigger FROM runner.job_runs"
                         " WHERE partition_key = 'c' AND schedule_slot < %s", (changed_at,))
    assert early == [], f"partition c ran for slots before its schedule's valid_from {changed_at}"
    assert_ledger_clean(db_url)
