"""One runner process in-process: what a handler sees, and what its outcome writes."""

from __future__ import annotations

import inspect
import time
from datetime import timedelta
from typing import Any

import psycopg

from runner import JobContext, LostOwnership, Permanent, Runner
from runner.model.schedule import idempotency_key
from tests.support import assert_ledger_clean, eventually, one_late_slot, rows, running_worker, scalar

FAST = {"base": "10ms", "jitter": 0}


running = running_worker


def test_context_carries_the_run(db_url: str) -> None:
    app = Runner()
    seen: list[dict[str, Any]] = []

    @app.job("ctx", every="1s", timezone="Asia/Seoul", partitions=["p1"], version="7")
    def handler(ctx: JobContext) -> None:
        seen.append({k: getattr(ctx, k) for k in (
            "slot", "window_start", "window_end", "business_date", "partition", "idempotency_key",
            "fence", "attempt", "trigger")})

    with running(app, db_url):
        eventually(lambda: seen, message="a run")
    s = seen[0]
    assert s["slot"].utcoffset() == timedelta(0)
    assert s["window_end"] == s["slot"] and s["window_start"] == s["slot"] - timedelta(seconds=1)
    # business date is the local (Seoul) date of the window start
    assert s["business_date"] == (s["window_start"] + timedelta(hours=9)).date()
    assert s["partition"] == "p1"
    assert s["idempotency_key"] == idempotency_key("ctx", s["window_start"], s["window_end"], "p1", "7")
    assert (s["fence"], s["attempt"], s["trigger"]) == (1, 1, "schedule")
    assert rows(db_url, "SELECT status, idempotency_key FROM runner.job_runs"
                        " WHERE schedule_slot = %s", (s["slot"],)) == [("succeeded", s["idempotency_key"])]
    assert_ledger_clean(db_url)


def test_ctx_db_commits_with_success_and_rolls_back_on_failure(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE sink (slot timestamptz, attempt int)")
    app = Runner()

    @app.job("writes", every="1s", max_attempts=2, backoff=FAST)
    def handler(ctx: JobContext) -> None:
        ctx.db.execute("INSERT INTO sink VALUES (%s, %s)", (ctx.slot, ctx.attempt))
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails after writing")

    with running(app, db_url):
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'"
                                          " AND attempt = 2") >= 1, message="a retried success")
    slot = scalar(db_url, "SELECT min(schedule_slot) FROM runner.job_runs WHERE status = 'succeeded'")
    # the first attempt's write was rolled back; the second's committed with the success
    assert rows(db_url, "SELECT attempt FROM sink WHERE slot = %s", (slot,)) == [(2,)]
    run_id = scalar(db_url, "SELECT id FROM runner.job_runs WHERE schedule_slot = %s", (slot,))
    assert rows(db_url, "SELECT attempt, fence, status, error_class, error_message, trigger"
                        " FROM runner.attempts WHERE run_id = %s ORDER BY attempt", (run_id,)) == [
        (1, 1, "failed", "RuntimeError", "first attempt fails after writing", "schedule"),
        (2, 2, "succeeded", None, None, "retry"),
    ]
    assert_ledger_clean(db_url)


def test_retries_exhausted_go_dead(db_url: str) -> None:
    app = Runner()

    @app.job("always-fails", every="1s", max_attempts=3, backoff=FAST)
    def handler(ctx: JobContext) -> None:
        raise ValueError(f"attempt {ctx.attempt}")

    with running(app, db_url):
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'dead'"),
                   message="a dead run")
    run_id, attempt, error = rows(db_url, "SELECT id, attempt, last_error FROM runner.job_runs"
                                          " WHERE status = 'dead' ORDER BY id LIMIT 1")[0]
    assert (attempt, error) == (3, "ValueError: attempt 3")
    assert [r[0] for r in rows(db_url, "SELECT status FROM runner.attempts WHERE run_id = %s"
                                       " ORDER BY attempt", (run_id,))] == ["failed", "failed", "dead"]
    assert_ledger_clean(db_url)


class Unauthorized(Exception):
    pass


def test_permanent_errors_are_never_retried(db_url: str) -> None:
    app = Runner()

    @app.job("bad-input", every="1s", max_attempts=5, backoff=FAST, partitions=["a", "b"],
             permanent=[Unauthorized])
    def handler(ctx: JobContext) -> None:
        raise Permanent("invalid input") if ctx.partition == "a" else Unauthorized("no token")

    with running(app, db_url):
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'dead'") >= 2)
    assert set(rows(db_url, "SELECT partition_key, attempt, last_error FROM runner.job_runs"
                            " WHERE status = 'dead'")) >= {
        ("a", 1, "runner.errors.Permanent: invalid input"),
        ("b", 1, "tests.test_worker.Unauthorized: no token"),
    }
    assert_ledger_clean(db_url)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str() raises")


def test_hostile_errors_are_stored_safely(db_url: str) -> None:
    app = Runner()
    errors = {"huge": ValueError("x" * 1_000_000), "nul": ValueError("a\x00b\udcff"),
              "unprintable": Unprintable()}

    @app.job("hostile", every="1s", max_attempts=1, partitions=list(errors))
    def handler(ctx: JobContext) -> object:
        raise errors[ctx.partition]

    with running(app, db_url):
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'dead'") >= 3)
    stored = dict(rows(db_url, "SELECT r.partition_key, a.error_message FROM runner.attempts a"
                               " JOIN runner.job_runs r ON r.id = a.run_id WHERE a.status = 'dead'"))
    assert len(stored["huge"]) <= 4000 and stored["huge"].startswith("xxx")
    assert stored["nul"].startswith("a\\x00b")
    assert "Unprintable" in stored["unprintable"]
    assert_ledger_clean(db_url)


def test_lost_ownership_rolls_back_and_the_run_is_recovered(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE sink (slot timestamptz, attempt int)")
    app = Runner()
    raised: list[BaseException] = []

    @app.job("fenced", **one_late_slot())
    def handler(ctx: JobContext) -> None:
        ctx.db.execute("INSERT INTO sink VALUES (%s, %s)", (ctx.slot, ctx.attempt))
        if ctx.attempt == 1:
            with psycopg.connect(db_url, autocommit=True) as other:  # the fence moves on
                other.execute("UPDATE runner.job_runs SET fence = fence + 1 WHERE id = %s", (ctx.run_id,))
            try:
                ctx.heartbeat(processed=1)
            except LostOwnership as exc:
                raised.append(exc)
                raise

    with running(app, db_url):
        eventually(lambda: scalar(db_url, "SELECT status FROM runner.job_runs") == "succeeded")
    assert raised
    # the stale attempt's write was rolled back and its outcome refused; the run, left with
    # no live owner, was recovered by a new attempt with a higher fence
    assert rows(db_url, "SELECT attempt FROM sink") == [(2,)]
    assert rows(db_url, "SELECT attempt, fence, status, trigger FROM runner.attempts ORDER BY fence") == [
        (1, 1, "stale", "catch_up"), (2, 3, "succeeded", "recovery")]
    assert rows(db_url, "SELECT status, fence, attempt, trigger FROM runner.job_runs") == [
        ("succeeded", 3, 2, "recovery")]
    assert_ledger_clean(db_url)


def test_handler_return_value_is_ignored(db_url: str) -> None:
    app = Runner()

    @app.job("returns", every="1s")
    def handler(ctx: JobContext) -> object:
        return {"not": "none"}

    with running(app, db_url):
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'"))
    assert_ledger_clean(db_url)


class Pending:
    """An awaitable that is neither a coroutine nor a generator (like an asyncio.Future)."""

    def __await__(self) -> Any:
        yield None


def test_a_handler_returning_unfinished_work_fails_for_good(db_url: str) -> None:
    """A coroutine, an awaitable, a generator or an async generator returned by a handler is
    work that has not happened: the attempt fails (Permanent, so the run goes dead at once),
    ctx.db is rolled back, and the coroutine or generator is closed (never 'never awaited')."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE sink (slot timestamptz, partition text)")

    async def work() -> None:
        raise AssertionError("a returned coroutine must never run")

    def lazy() -> Any:
        yield "never"

    async def lazy_async() -> Any:
        yield "never"

    kinds: dict[str, Any] = {"coroutine": work, "awaitable": Pending, "generator": lazy,
                             "async_generator": lazy_async, "wrote_then_coroutine": work}
    returned: list[tuple[str, Any]] = []
    app = Runner()

    @app.job("unfinished", every="1s", max_attempts=3, backoff=FAST, partitions=list(kinds))
    def handler(ctx: JobContext) -> object:
        if ctx.partition == "wrote_then_coroutine":
            ctx.db.execute("INSERT INTO sink VALUES (%s, %s)", (ctx.slot, ctx.partition))
        value = kinds[ctx.partition]()
        returned.append((ctx.partition, value))
        return value

    with running(app, db_url):
        eventually(lambda: scalar(db_url, "SELECT count(DISTINCT partition_key) FROM runner.job_runs"
                                          " WHERE status = 'dead'") == len(kinds), message="dead runs")
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") == 0
    errors = dict(rows(db_url, "SELECT DISTINCT r.partition_key, a.error_class || ': ' || a.error_message"
                               " FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id"
                               " WHERE a.status = 'dead' AND a.attempt = 1"))
    expected = {"coroutine": "a coroutine", "wrote_then_coroutine": "a coroutine",
                "awaitable": "an awaitable (Pending)", "generator": "a generator",
                "async_generator": "an async generator"}
    for partition, kind in expected.items():
        assert errors[partition].startswith(
            f"runner.errors.HandlerReturnedAwaitable: the handler returned {kind}; "), errors[partition]
    assert scalar(db_url, "SELECT count(*) FROM runner.attempts WHERE attempt > 1") == 0  # never retried
    assert scalar(db_url, "SELECT count(*) FROM sink") == 0  # ctx.db rolled back
    for partition, value in returned:
        if inspect.iscoroutine(value):
            assert inspect.getcoroutinestate(value) == inspect.CORO_CLOSED, partition
        elif inspect.isgenerator(value):
            assert inspect.getgeneratorstate(value) == inspect.GEN_CLOSED, partition


def test_runner_advances_gap_scan_watermarks(db_url: str) -> None:
    app = Runner()

    @app.job("tracked", every="1s")
    def handler(ctx: JobContext) -> None: ...

    with running(app, db_url, watermark_interval=0.2):
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 2)
        eventually(lambda: scalar(db_url, "SELECT complete_through FROM runner.gap_watermarks"
                                          " WHERE job_name = 'tracked'") is not None, timeout=15)
    assert scalar(db_url, "SELECT count(*) FROM runner.missing_slots WHERE job_name = 'tracked'"
                          " AND state = 'never_started'") <= 1
    assert_ledger_clean(db_url)


def test_timeout_counts_from_the_handler_start_not_the_claim(db_url: str) -> None:
    """Runs claimed ahead of a free handler thread (max_inflight > workers) wait without their
    timeout running: one thread, three runs of 0.6 s each, timeout 1 s, all succeed."""
    app = Runner()

    @app.job("queued", every="3s", partitions=["p1", "p2", "p3"], timeout="1s")
    def handler(ctx: JobContext) -> None:
        time.sleep(0.6)  # the handler's own work, longer than a third of the timeout

    with running(app, db_url, workers=1, max_inflight=3):
        slot = eventually(lambda: scalar(db_url, "SELECT schedule_slot FROM runner.job_runs GROUP BY 1"
                                                 " HAVING count(*) FILTER (WHERE status <> 'running') = 3"
                                                 " ORDER BY 1 LIMIT 1"), timeout=20, message="a whole slot done")
    got = rows(db_url, "SELECT r.partition_key, a.status, a.started_at FROM runner.job_runs r"
                       " JOIN runner.attempts a ON a.run_id = r.id WHERE r.schedule_slot = %s"
                       " ORDER BY r.partition_key, a.attempt", (slot,))
    assert [(p, s) for p, s, _ in got] == [("p1", "succeeded"), ("p2", "succeeded"), ("p3", "succeeded")]
    # all three were claimed together, so the last one waited well over a second for its thread
    assert max(t for *_, t in got) - min(t for *_, t in got) < timedelta(seconds=0.5)
    assert_ledger_clean(db_url)


def test_two_attempts_of_one_run_in_one_process_each_end_as_their_own(db_url: str) -> None:
    """A runner whose lock session was cut while a handler ran loses that run (another owner
    took it) and, once that owner is gone too, takes it over itself: the process then runs two
    attempts of the same run. The older one ending must not end the newer one (whose outcome
    was once discarded, its run left running and its lock held)."""
    import threading
    from uuid import uuid4

    app = Runner()
    release = {1: threading.Event(), 3: threading.Event()}
    entered: dict[int, int] = {}

    @app.job("twice", **one_late_slot())
    def handler(ctx: JobContext) -> None:
        entered[ctx.attempt] = ctx.fence
        release[ctx.attempt].wait(60)

    from tests.conftest import url_for

    dbname = scalar(db_url, "SELECT current_database()")
    admin = psycopg.connect(url_for("postgres"), autocommit=True)
    allow = f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS '
    try:
        with running(app, db_url) as worker:
            eventually(lambda: 1 in entered, message="attempt 1 running")
            run_id = scalar(db_url, "SELECT id FROM runner.job_runs")
            ns = worker.owner.namespace
            other = psycopg.connect(db_url, autocommit=True)
            try:
                # no new sessions for a moment: the worker cannot re-lock before the other owner
                admin.execute(allow + "false")
                other.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname ="
                              " current_database() AND pid <> pg_backend_pid()")
                eventually(lambda: other.execute("SELECT pg_try_advisory_lock(runner.lock_key_v1(%s, %s))",
                                                 (ns, run_id)).fetchone()[0], message="the run's key")
                other.execute("SELECT * FROM runner.start_attempts_v1(ARRAY[%s]::bigint[],"
                              " ARRAY[1]::bigint[], true, 'elsewhere', 1, %s, %s)", (run_id, uuid4(), ns))
                admin.execute(allow + "true")
                eventually(worker.session.alive, timeout=20, message="the worker reconnected")
                eventually(lambda: scalar(db_url, "SELECT count(*) FROM pg_stat_activity WHERE"
                                                  " application_name = 'runner' AND datname = %s",
                                          (dbname,)) >= 1, timeout=20, message="a new lock session")
            finally:
                admin.execute(allow + "true")
                other.close()  # the other owner is gone: its lock with it
            eventually(lambda: 3 in entered, timeout=20, message="the worker took its run over again")
            release[1].set()  # the older attempt ends first ...
            # its late outcome refused by the fence (the attempt closes stale)
            eventually(lambda: scalar(db_url, "SELECT status FROM runner.attempts WHERE fence = 1") == "stale")
            release[3].set()  # ... then the newer one, which must be recorded
            eventually(lambda: scalar(db_url, "SELECT status FROM runner.job_runs") == "succeeded",
                       timeout=20, message="the newer attempt's success recorded")
    finally:
        for event in release.values():
            event.set()
        admin.execute(allow + "true")
        admin.close()
    assert rows(db_url, "SELECT attempt, fence, status, trigger FROM runner.attempts ORDER BY fence") == [
        (1, 1, "stale", "catch_up"), (2, 2, "abandoned", "recovery"), (3, 3, "succeeded", "recovery")]
    assert scalar(db_url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database ="
                          " (SELECT oid FROM pg_database WHERE datname = current_database())") == 0
    assert_ledger_clean(db_url)


def test_a_runner_start_process_tunes_its_collector_and_an_application_s_is_left_alone(db_url: str) -> None:
    """A `runner start` process freezes what its start made and collects young objects every
    50,000 new containers (issue 32: a third of the loop thread's samples were the collector at
    a 10,000-run instant); a Worker run inside another program (app.running(), the tests'
    in-process runner) leaves that program's collector as it was."""
    import gc

    from runner.worker.loop import GC_THRESHOLDS
    from tests.support import RunnerProcess

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE gc_seen (thresholds int[], frozen int)")
    proc = RunnerProcess("tests/apps/gc_probe.py:app", db_url)
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM gc_seen") >= 1, timeout=60,
                   message="the probe ran in runner start")
    finally:
        assert proc.terminate() == 0
    thresholds, frozen = rows(db_url, "SELECT thresholds, frozen FROM gc_seen LIMIT 1")[0]
    assert tuple(thresholds) == GC_THRESHOLDS and frozen > 1000

    before = gc.get_threshold(), gc.get_freeze_count()
    app = Runner()

    @app.job("tick", every="1s")
    def tick(ctx: JobContext) -> None:
        pass

    with running_worker(app, db_url):
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'tick'"
                                          " AND status = 'succeeded'") >= 1, timeout=30, message="tick ran")
        assert (gc.get_threshold(), gc.get_freeze_count()) == before
