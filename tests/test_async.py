"""``async def`` handlers: awaited on the runner's event loop with the same outcome, timeout,
fence and ctx.db rules as sync handlers (runner/aio.py, runner/worker/attempt.py: execute_async)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner import AsyncJobContext, JobContext, LostOwnership, Permanent, Runner
from tests.support import (
    RunnerProcess,
    assert_ledger_clean,
    eventually,
    one_late_slot,
    rows,
    running_worker,
    scalar,
)

FAST = {"base": "10ms", "jitter": 0}


def count(url: str, where: str) -> int:
    return int(scalar(url, f"SELECT count(*) FROM runner.job_runs WHERE {where}"))


def test_async_handler_succeeds_on_the_runners_event_loop(db_url: str) -> None:
    app = Runner()
    seen: list[dict[str, Any]] = []

    @app.job("async-ok", every="1s", partitions=["p1"])
    async def handler(ctx: AsyncJobContext) -> None:
        await asyncio.sleep(0.01)
        seen.append({"thread": threading.current_thread().name, "partition": ctx.partition,
                     "loop": asyncio.get_running_loop(), "ctx": type(ctx).__name__})

    assert app.jobs["async-ok"].is_async
    with running_worker(app, db_url):
        eventually(lambda: count(db_url, "status = 'succeeded'") >= 2, message="two successes")
    assert {s["thread"] for s in seen} == {"runner-async-realtime"}  # the lane's event loop
    assert len({id(s["loop"]) for s in seen}) == 1  # one loop for every attempt
    assert {(s["partition"], s["ctx"]) for s in seen} == {("p1", "AsyncJobContext")}
    assert_ledger_clean(db_url)


def test_async_failures_retry_and_permanent_goes_dead(db_url: str) -> None:
    app = Runner()

    @app.job("async-fails", every="1s", max_attempts=3, backoff=FAST, partitions=["retry", "permanent"])
    async def handler(ctx: AsyncJobContext) -> None:
        await asyncio.sleep(0)
        if ctx.partition == "permanent":
            raise Permanent("bad input")
        if ctx.attempt < 3:
            raise ValueError(f"attempt {ctx.attempt}")

    with running_worker(app, db_url):
        eventually(lambda: count(db_url, "partition_key = 'retry' AND status = 'succeeded'") >= 1
                   and count(db_url, "partition_key = 'permanent' AND status = 'dead'") >= 1,
                   timeout=20, message="a retried success and a dead run")
    run_id = scalar(db_url, "SELECT min(id) FROM runner.job_runs WHERE partition_key = 'retry'"
                            " AND status = 'succeeded'")
    assert rows(db_url, "SELECT attempt, status, error_class, error_message FROM runner.attempts"
                        " WHERE run_id = %s ORDER BY attempt", (run_id,)) == [
        (1, "failed", "ValueError", "attempt 1"), (2, "failed", "ValueError", "attempt 2"),
        (3, "succeeded", None, None)]
    dead = rows(db_url, "SELECT attempt, last_error FROM runner.job_runs WHERE partition_key = 'permanent'"
                        " AND status = 'dead' ORDER BY id LIMIT 1")
    assert dead == [(1, "runner.errors.Permanent: bad input")]  # never retried
    assert_ledger_clean(db_url)


def test_async_ctx_db_commits_with_success_and_rolls_back_on_failure(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE sink (slot timestamptz, attempt int, how text)")
    app = Runner()
    kinds: list[str] = []

    @app.job("async-writes", every="1s", max_attempts=2, backoff=FAST)
    async def handler(ctx: AsyncJobContext) -> None:
        conn = await ctx.db  # the AsyncConnection itself
        kinds.append(type(conn).__name__)
        await ctx.db.execute("INSERT INTO sink VALUES (%s, %s, 'shortcut')", (ctx.slot, ctx.attempt))
        async with conn.cursor() as cur:
            await cur.execute("INSERT INTO sink VALUES (%s, %s, 'cursor')", (ctx.slot, ctx.attempt))
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails after writing")

    with running_worker(app, db_url):
        eventually(lambda: count(db_url, "status = 'succeeded' AND attempt = 2") >= 1,
                   message="a retried success")
    assert set(kinds) == {"AsyncConnection"}
    slot = scalar(db_url, "SELECT min(schedule_slot) FROM runner.job_runs WHERE status = 'succeeded'")
    # the first attempt's writes rolled back; the second's committed with the success
    assert rows(db_url, "SELECT attempt, how FROM sink WHERE slot = %s ORDER BY how", (slot,)) == [
        (2, "cursor"), (2, "shortcut")]
    run_id = scalar(db_url, "SELECT id FROM runner.job_runs WHERE schedule_slot = %s", (slot,))
    assert rows(db_url, "SELECT attempt, status FROM runner.attempts WHERE run_id = %s ORDER BY 1",
                (run_id,)) == [(1, "failed"), (2, "succeeded")]
    assert_ledger_clean(db_url)


def test_a_stale_async_handler_cannot_commit(db_url: str) -> None:
    """The fence moves on while the handler runs: its ctx.db transaction rolls back, its
    outcome is refused (the attempt closes stale), its heartbeat raises LostOwnership."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE sink (slot timestamptz, attempt int)")
    app = Runner()
    raised: list[BaseException] = []

    @app.job("async-fenced", **one_late_slot(),
             partitions=["commit", "heartbeat"])
    async def handler(ctx: AsyncJobContext) -> None:
        await ctx.db.execute("INSERT INTO sink VALUES (%s, %s)", (ctx.slot, ctx.attempt))
        if ctx.attempt == 1:
            other = await psycopg.AsyncConnection.connect(db_url, autocommit=True)
            async with other:  # the fence moves on
                await other.execute("UPDATE runner.job_runs SET fence = fence + 1 WHERE id = %s",
                                    (ctx.run_id,))
            if ctx.partition == "heartbeat":
                try:
                    await ctx.heartbeat(processed=1)
                except LostOwnership as exc:
                    raised.append(exc)
                    raise
            # partition 'commit': returns normally; the fence-checked success must be refused

    with running_worker(app, db_url):
        eventually(lambda: count(db_url, "status = 'succeeded'") == 2, timeout=20,
                   message="both runs recovered and succeeded")
    assert len(raised) == 1
    # only the recovery attempts' writes landed
    assert rows(db_url, "SELECT attempt FROM sink ORDER BY 1") == [(2,), (2,)]
    assert sorted(rows(db_url, "SELECT r.partition_key, a.attempt, a.status FROM runner.attempts a"
                               " JOIN runner.job_runs r ON r.id = a.run_id")) == [
        ("commit", 1, "stale"), ("commit", 2, "succeeded"),
        ("heartbeat", 1, "stale"), ("heartbeat", 2, "succeeded")]
    assert_ledger_clean(db_url)


def test_timeout_cancels_the_task_and_the_attempt_ends_timed_out(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE sink (attempt int)")
    app = Runner()
    cancelled: list[int] = []

    @app.job("async-slow", **one_late_slot(),
             timeout="0.5s", max_attempts=2, backoff=FAST, partitions=["sleep", "statement"])
    async def handler(ctx: AsyncJobContext) -> None:
        await ctx.db.execute("INSERT INTO sink VALUES (%s)", (ctx.attempt,))
        try:
            if ctx.partition == "sleep":
                await asyncio.sleep(60)
            else:  # a statement on ctx.db is cancelled with the task
                await ctx.db.execute("SELECT pg_sleep(60)")
        except asyncio.CancelledError:
            cancelled.append(ctx.attempt)
            raise

    with running_worker(app, db_url) as worker:
        eventually(lambda: count(db_url, "status = 'dead'") == 2, timeout=20, message="both timed out twice")
        eventually(lambda: len(cancelled) == 4, message="every task cancelled")
        assert worker.stats["timed_out"] == 4
    assert rows(db_url, "SELECT DISTINCT status, error_class FROM runner.attempts") == [
        ("timed_out", "runner.Timeout")]
    assert scalar(db_url, "SELECT count(*) FROM sink") == 0  # ctx.db rolled back
    # the cancelled statement is not still running on the server
    assert scalar(db_url, "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)'"
                          " AND state = 'active' AND datname = current_database()") == 0
    assert_ledger_clean(db_url)


@pytest.mark.parametrize("how", ["swallows", "blocks"])
def test_a_handler_that_ignores_its_timeout_and_returns_records_nothing(db_url: str, how: str) -> None:
    """Suspicion (issue 26): an async handler that ignores its timeout and returns before
    `timed_out` is recorded. It either catches the cancellation and returns at once
    ("swallows"), or blocks its loop past the deadline (time.sleep) and then returns
    ("blocks"): the runner gave up on the attempt at its timeout, so its ctx.db writes must
    not commit and its return must not count as a success, whichever of the handler's
    return and the recording of `timed_out` comes first. Every attempt is timed_out and the
    run ends dead; nothing the handler wrote is kept."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE sink (attempt int)")
    app = Runner()
    returned: list[int] = []

    @app.job("async-deaf", **one_late_slot(), timeout="0.3s", max_attempts=3, backoff=FAST)
    async def handler(ctx: AsyncJobContext) -> None:
        await ctx.db.execute("INSERT INTO sink VALUES (%s)", (ctx.attempt,))
        if how == "swallows":
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(60)
        else:
            time.sleep(0.6)  # the classic mistake: the loop is blocked past the deadline
        returned.append(ctx.attempt)

    with running_worker(app, db_url) as worker:
        eventually(lambda: count(db_url, "status = 'dead'") == 1, timeout=30,
                   message="the run went dead, out of attempts")
        eventually(lambda: len(returned) == 3, message="every attempt's handler returned")
        assert worker.stats["timed_out"] == 3
    assert rows(db_url, "SELECT attempt, status, error_class FROM runner.attempts ORDER BY attempt") == [
        (1, "timed_out", "runner.Timeout"), (2, "timed_out", "runner.Timeout"), (3, "timed_out", "runner.Timeout")]
    assert scalar(db_url, "SELECT count(*) FROM sink") == 0  # nothing it wrote committed
    assert_ledger_clean(db_url)


def test_async_effects_and_heartbeats(db_url: str) -> None:
    app = Runner()
    sent: list[str] = []

    async def deliver(key: str) -> str:
        await asyncio.sleep(0)
        sent.append(key)
        return "receipt"

    @app.job("async-effects", every="1s", max_attempts=3, backoff=FAST)
    async def handler(ctx: AsyncJobContext) -> None:
        key = f"{ctx.idempotency_key}:mail"
        receipt = await ctx.effect(key, lambda: deliver(key))
        assert receipt == "receipt"
        # a plain send (called on an executor thread, off the event loop) and a planned stage
        assert await ctx.effect(f"{key}:sync", lambda: sent.append(f"{key}:sync") or 7) == 7
        await ctx.effect(f"{key}:later", stage="delivered")
        await ctx.heartbeat(processed=7)
        if ctx.attempt == 1:
            raise RuntimeError("fails after the effect: the retry must not send again")

    with running_worker(app, db_url):
        eventually(lambda: count(db_url, "status = 'succeeded'") >= 1, message="a success")
    run = rows(db_url, "SELECT idempotency_key, processed_count, attempt FROM runner.job_runs"
                       " WHERE status = 'succeeded' ORDER BY id LIMIT 1")[0]
    assert run[1:] == (7, 2)
    assert sent.count(f"{run[0]}:mail") == 1 and sent.count(f"{run[0]}:mail:sync") == 1
    assert rows(db_url, "SELECT status FROM runner.effects WHERE effect_key = %s",
                (f"{run[0]}:mail:later",)) == [("planned",)]
    assert rows(db_url, "SELECT status, send_count FROM runner.effects WHERE effect_key = %s",
                (f"{run[0]}:mail",)) == [("confirmed", 1)]
    assert_ledger_clean(db_url)


def test_sync_and_async_handlers_mix_in_one_worker(db_url: str) -> None:
    app = Runner()

    @app.job("sync-one", every="1s")
    def sync_handler(ctx: JobContext) -> None:
        ctx.db.execute("SELECT 1")

    @app.job("async-one", every="1s")
    async def async_handler(ctx: AsyncJobContext) -> None:
        await ctx.db.execute("SELECT 1")

    with running_worker(app, db_url):
        eventually(lambda: count(db_url, "job_name = 'sync-one' AND status = 'succeeded'") >= 2
                   and count(db_url, "job_name = 'async-one' AND status = 'succeeded'") >= 2,
                   message="both kinds succeed")
    assert_ledger_clean(db_url)


def test_hundreds_of_async_handlers_run_at_once_on_a_few_threads_and_connections(db_url: str) -> None:
    """The quality bar in small (scripts/bench/async_sleepers.py measures 1,000): 300 async
    handlers sleeping at once in one process add no thread and no connection per handler."""
    n = 300
    app = Runner()
    state = {"running": 0, "peak": 0, "threads": 0}
    threads_before = threading.active_count()

    @app.job("sleepers", **one_late_slot(),
             partitions=[f"p{i}" for i in range(n)], misfire="replay")
    async def sleeper(ctx: AsyncJobContext) -> None:
        state["running"] += 1  # one event loop: no lock needed
        state["peak"] = max(state["peak"], state["running"])
        state["threads"] = max(state["threads"], threading.active_count())
        try:
            await asyncio.sleep(2)
        finally:
            state["running"] -= 1

    connections = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                   " AND pid <> pg_backend_pid()")
    with running_worker(app, db_url, workers=2, async_workers=n, max_inflight=n):
        eventually(lambda: state["peak"] == n, timeout=30, message="all of them running at once")
        peak_connections = scalar(db_url, connections)
        eventually(lambda: count(db_url, "status = 'succeeded'") == n, timeout=30, message="all done")
    # not one per handler (300): a fixed set per served lane (handler threads and its ctx.db
    # pool's workers, runner/worker/lanes.py) plus the loop's own
    assert state["threads"] - threads_before < 40, state
    assert peak_connections < 10, peak_connections  # not one per handler
    assert_ledger_clean(db_url)


@pytest.mark.slow
def test_mixed_app_in_real_runner_start(db_url: str, tmp_path: Path) -> None:
    """Two real ``runner start`` processes run a sync and an async job of one app: every slot
    once, ctx.db writes exactly once, a clean stop."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE sink (job_name text, slot timestamptz, partition_key text, fence bigint)")
    procs = [RunnerProcess("tests/apps/mixed.py:app", db_url, "--workers", "2", "--async-workers", "20",
                           log=tmp_path / f"runner{i}.log") for i in range(2)]
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM (SELECT job_name, schedule_slot FROM"
                                          " runner.job_runs WHERE status = 'succeeded'"
                                          " GROUP BY 1, 2 HAVING count(*) = 3) s") >= 8,
                   timeout=40, message="four slots of each job fully succeeded")
    finally:
        codes = [p.terminate() for p in procs]
    assert codes == [0, 0], "\n".join(p.output() for p in procs)
    assert {r[0] for r in rows(db_url, "SELECT DISTINCT status FROM runner.job_runs")} == {"succeeded"}
    assert {r[0] for r in rows(db_url, "SELECT DISTINCT job_name FROM runner.job_runs")} == {
        "mixed-sync", "mixed-async"}
    # one sink row per run, written by its recorded fence
    assert scalar(db_url, "SELECT count(*) FROM sink") == count(db_url, "true")
    assert scalar(db_url, "SELECT count(*) FROM sink s JOIN runner.job_runs r ON r.job_name = s.job_name"
                          " AND r.schedule_slot = s.slot AND r.partition_key = s.partition_key"
                          " AND r.fence = s.fence") == count(db_url, "true")
    assert scalar(db_url, "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL") == 0
    assert_ledger_clean(db_url)


# ------------------------------------------------------------------------------------------
# the runner inside the application (runner/worker/inprocess.py)


def _in_app(db_url: str) -> tuple[Runner, list[str]]:
    app = Runner()
    ran: list[str] = []

    @app.job("in-app-sync", every="1s")
    def sync_handler(ctx: JobContext) -> None:
        ran.append("sync")

    @app.job("in-app-async", every="1s")
    async def async_handler(ctx: AsyncJobContext) -> None:
        await asyncio.sleep(0)
        ran.append("async")

    return app, ran


def _stopped_cleanly(db_url: str) -> None:
    assert scalar(db_url, "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL") == 0
    assert scalar(db_url, "SELECT count(*) FROM runner.instances") == 1
    assert count(db_url, "status <> 'succeeded'") == 0
    assert scalar(db_url, "SELECT count(*) FROM runner.attempts WHERE status <> 'succeeded'") == 0
    assert_ledger_clean(db_url)


def test_in_process_context_manager(db_url: str) -> None:
    import logging
    import signal

    app, ran = _in_app(db_url)
    handlers = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
    root = list(logging.getLogger().handlers)
    with app.running(db_url, workers=2, poll_interval=0.05, grace=10) as runner:
        assert runner.running
        eventually(lambda: {"sync", "async"} <= set(ran), message="both jobs ran in-process")
        # it installs no signal handler and no logging of its own
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers
        assert logging.getLogger().handlers == root
    assert not runner.running
    _stopped_cleanly(db_url)


def test_in_process_async_context_manager_keeps_the_event_loop_free(db_url: str) -> None:
    app, ran = _in_app(db_url)
    slow_started = threading.Event()

    @app.job("in-app-slow", **one_late_slot())
    async def slow(ctx: AsyncJobContext) -> None:
        slow_started.set()
        await asyncio.sleep(1.5)  # still running when the application stops: the grace waits

    ticks: list[float] = []

    async def main() -> None:
        async def ticker() -> None:  # the application's own loop keeps running meanwhile
            while True:
                ticks.append(asyncio.get_running_loop().time())
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        async with app.running(db_url, workers=2, poll_interval=0.05, grace=10):
            while not ({"sync", "async"} <= set(ran) and slow_started.is_set()):
                await asyncio.sleep(0.02)
        stopped_at = asyncio.get_running_loop().time()
        task.cancel()
        assert stopped_at - ticks[0] > 1.4  # the stop waited for the slow handler

    asyncio.run(asyncio.wait_for(main(), 60))
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 0.5, max(gaps)  # start and stop ran off the event loop
    _stopped_cleanly(db_url)


def test_in_process_stop_hands_running_runs_over(db_url: str) -> None:
    """Leaving the context waits ``grace`` seconds, then releases what still runs."""
    app = Runner()
    started = threading.Event()

    @app.job("in-app-slow", **one_late_slot())
    async def slow(ctx: AsyncJobContext) -> None:
        started.set()
        await asyncio.sleep(60)

    with app.running(db_url, workers=1, poll_interval=0.05, grace=1.0):
        eventually(started.is_set, message="the handler started")
        leaving = time.monotonic()
    took = time.monotonic() - leaving
    assert 1.0 <= took < 5.0, took  # the grace, then the hand-over (not the handler's 60 s)
    assert rows(db_url, "SELECT status, trigger FROM runner.job_runs") == [("pending", "recovery")]
    assert rows(db_url, "SELECT status FROM runner.attempts") == [("released",)]
    assert scalar(db_url, "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL") == 0


def test_in_process_refuses_an_unmigrated_database(empty_db_url: str) -> None:
    from runner.settings import ConfigError

    app, _ = _in_app(empty_db_url)
    with pytest.raises(ConfigError, match="no runner schema"), app.running(empty_db_url):
        pass
