"""The fault suite's short tier (scripts/fault_suite.py with a small configuration), the
crash points it relies on, and focused reproductions of what it found."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest

from runner.store import ledger
from tests.support import ROOT, RunnerProcess, assert_ledger_clean, eventually, rows, scalar

NAMESPACE = 21077


@pytest.mark.slow
@pytest.mark.parametrize("handlers", ["sync", "async"])
def test_short_fault_tier_keeps_every_guarantee(db_url: str, tmp_path: Path, handlers: str) -> None:
    """3 runner processes, 20 s of kill -9, SIGSTOP past the lease, connection kills and
    crash points (no PostgreSQL restart: CI's server is shared), then every invariant; with
    plain handlers, and with async def ones (scripts/fault_app.py: FAULT_ASYNC). (The plan of
    seed 7 is the same 12 faults at any duration / fault interval ratio: 5 kill -9, 5 SIGSTOP,
    2 connection kills; 20 s at one every 2 s injects what 30 s at one every 3 s did.)"""
    out = subprocess.run(
        [sys.executable, "scripts/fault_suite.py", "--processes", "3", "--duration", "20",
         "--seed", "7", "--fault-interval", "2", "--crash-rate", "0.05", "--database-url", db_url, "--json",
         "--log-dir", str(tmp_path / "logs"), *(["--async"] if handlers == "async" else [])],
        cwd=ROOT, capture_output=True, text=True, timeout=170)
    assert out.stdout, out.stderr
    result = json.loads(out.stdout)
    failed = {k: v["value"] for k, v in result["invariants"].items() if not v["ok"]}
    assert not failed, f"invariants failed: {failed}\nfigures: {result['figures']}\nlogs: {tmp_path / 'logs'}"
    assert out.returncode == 0, out.stderr
    figures = result["figures"]
    assert figures["runs expected (slot x partition)"] >= 3 * 2 * 16  # 2 jobs x 3 partitions, every second: 20 s less slack
    assert result["invariants"]["ledger audit violations (runner check)"] == {
        "value": 0, "required": 0, "ok": True}
    assert sum(figures["faults injected"].values()) >= 4


@pytest.mark.parametrize("point", ["after_claim", "after_handler", "before_completion"])
def test_crash_point_exits_at_once_and_the_run_is_taken_over(db_url: str, tmp_path: Path,
                                                             point: str) -> None:
    crashing = RunnerProcess("tests/apps/hello.py:app", db_url, "--poll-interval", "0.2",
                             env={"RUNNER_CRASH_POINT": point}, log=tmp_path / "a.log")
    code = crashing.proc.wait(30)
    crashing.kill()  # gone already: closes its log
    assert code == 137, crashing.output()
    owned = [r for (r,) in rows(db_url, "SELECT run_id FROM runner.attempts WHERE owner_pid = %s",
                                (crashing.proc.pid,))]
    assert owned, "the crashing process claimed a run first"
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE id = ANY(%s) AND status = 'running'",
                  (owned,)) == len(owned)
    other = RunnerProcess("tests/apps/hello.py:app", db_url, "--poll-interval", "0.2", log=tmp_path / "b.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE id = ANY(%s)"
                                          " AND status = 'succeeded'", (owned,)) == len(owned), timeout=20)
    finally:
        assert other.terminate() == 0, other.output()
    assert set(rows(db_url, "SELECT a.status, b.status, b.trigger FROM runner.attempts a"
                            " JOIN runner.attempts b ON b.run_id = a.run_id AND b.fence = a.fence + 1"
                            " WHERE a.owner_pid = %s", (crashing.proc.pid,))) == {
        ("abandoned", "succeeded", "recovery")}
    assert_ledger_clean(db_url)


def test_crash_point_rate_zero_never_fires(db_url: str, tmp_path: Path) -> None:
    proc = RunnerProcess("tests/apps/hello.py:app", db_url, "--poll-interval", "0.2",
                         env={"RUNNER_CRASH_POINT": "after_handler", "RUNNER_CRASH_RATE": "0"},
                         log=tmp_path / "a.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 2,
                   timeout=20)
    finally:
        assert proc.terminate() == 0, proc.output()
    assert_ledger_clean(db_url)


# -- found by the suite ---------------------------------------------------------------------


def _running_runs(conn: psycopg.Connection, n: int, status: str = "running",
                  first: int = 0) -> list[tuple[int, int]]:
    base = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=first)
    made = []
    for i in range(n):
        row = conn.execute(
            "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date,"
            " window_start, window_end, status, trigger, attempt, fence, idempotency_key)"
            " VALUES ('relock', %s, '', '2026-01-01', %s, %s, %s, 'schedule', 1, 1, 'k') RETURNING id, fence",
            (base + timedelta(seconds=i), base, base, status)).fetchone()
        made.append(row)
    return made


def _times_held(conn: psycopg.Connection, run_id: int) -> int:
    """How many times this session holds the run's (re-entrant) advisory lock; releases it."""
    n = 0
    while conn.execute("SELECT pg_advisory_unlock(runner.lock_key_v1(%s, %s))",
                       (NAMESPACE, run_id)).fetchone()[0]:
        n += 1
        assert n < 1000
    return n


def test_relock_after_a_lost_session_takes_each_lock_once(db_url: str) -> None:
    """Found by the fault suite (leaked advisory locks after connection kills).

    After its lock session is cut, a runner locks the runs it still executes again on the
    new session (runner/worker/session.py ``reconnect`` -> ledger.relock_runs, sql/queries/takeover.sql
    ``relock_runs``), then releases each lock once when the run's outcome is recorded. The
    planner inlines the ``still`` CTE and evaluates the ``pg_try_advisory_lock`` filter on
    the scan of ``mine`` inside a nested loop, once per running run it is joined with: with
    k runs kept, each lock is taken k times, so one unlock leaves it held. Every later attempt
    of such a run (a retry) fails with runner.LockUnavailable until that session ends, and
    with the default max_attempts=3 the run goes dead; the suite saw runs fail five times in a
    row this way. (Fix: ``still AS MATERIALIZED``, so the filter runs once per row.)"""
    with psycopg.connect(db_url, autocommit=True) as conn:
        runs = _running_runs(conn, 5)
        kept = ledger.relock_runs(conn, NAMESPACE, runs)
        assert kept == set(runs)
        assert [_times_held(conn, run_id) for run_id, _ in runs] == [1] * 5


def test_relock_leaves_runs_it_no_longer_owns_unlocked(db_url: str) -> None:
    """The same filter, evaluated before the join, also locks runs that are *not* kept (here:
    failed meanwhile, waiting for a retry): the lock is taken, never returned, never released,
    and the run's retries fail with runner.LockUnavailable until that session ends."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        runs = _running_runs(conn, 3)
        waiting = _running_runs(conn, 1, status="failed", first=100)
        kept = ledger.relock_runs(conn, NAMESPACE, runs + waiting)
        assert waiting[0] not in kept and kept == set(runs)
        assert _times_held(conn, waiting[0][0]) == 0


def test_a_lost_ctx_db_connection_goes_back_to_the_pool(db_url: str) -> None:
    """Found by the hostile outage test and the fault suite (handlers failing with
    psycopg_pool.PoolTimeout after connection kills, the runner stalled).

    runner/context.py ``JobContext._release``: when the handler's ``ctx.db`` connection was
    cut, ``rollback()`` raises, and so does ``conn.autocommit = True`` in the ``finally``
    block, so ``putconn`` is never called: the pool counts the dead connection as checked out
    for ever. After ``workers`` such losses (the pool's max_size) every later ``ctx.db`` waits
    30 s and fails with PoolTimeout: the process runs no ctx.db handler again until it is
    restarted."""
    from psycopg_pool import ConnectionPool

    from runner.context import JobContext

    with ConnectionPool(db_url, min_size=0, max_size=1, open=True, timeout=2.0,
                        kwargs={"autocommit": True, "application_name": "runner-worker"}) as pool:
        ctx = JobContext(SimpleNamespace(attempt=1), None, pool)  # type: ignore[arg-type]  # _release needs only the pool
        ctx.db.execute("SELECT 1")
        with psycopg.connect(db_url, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (ctx.db.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            ctx.db.execute("SELECT 1")
        # the handler's transaction is lost either way; the pool's slot must not be
        with contextlib.suppress(psycopg.OperationalError):
            ctx._release(commit=False)
        with pool.connection(timeout=2.0) as conn:  # PoolTimeout while the slot is leaked
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_heartbeat_while_holding_ctx_db_uses_the_control_pool(db_url: str) -> None:
    """``ctx.db`` may hold a handler-pool connection for the handler's whole transaction;
    ``ctx.heartbeat()`` (and ``ctx.effect()``) must not need a second one from that pool, or
    handlers all inside ctx.db would wait on each other for the pool's timeout. They use the
    runner's control pool: with a handler pool of one connection, held, the beat still lands."""
    from psycopg_pool import ConnectionPool

    from runner.context import JobContext

    with psycopg.connect(db_url, autocommit=True) as conn:
        ((run_id, fence),) = _running_runs(conn, 1)
        conn.execute("INSERT INTO runner.attempts (run_id, attempt, fence, trigger, owner_host, owner_pid,"
                     " owner_instance, lock_key) VALUES (%s, 1, %s, 'schedule', 'h', 1, gen_random_uuid(), 1)",
                     (run_id, fence))

    class Run:
        id = run_id

    Run.fence = fence
    Run.attempt = 1
    kwargs = {"autocommit": True}
    with ConnectionPool(db_url, min_size=0, max_size=1, open=True, timeout=2.0, kwargs=kwargs) as pool, \
            ConnectionPool(db_url, min_size=0, max_size=1, open=True, timeout=2.0, kwargs=kwargs) as control:
        ctx = JobContext(Run(), None, pool, control)  # type: ignore[arg-type]
        ctx.db.execute("SELECT 1")  # the handler's transaction holds the handler pool's one connection
        ctx.heartbeat(processed=1)
        ctx._release(commit=True)
    assert scalar(db_url, "SELECT processed_count FROM runner.job_runs WHERE id = %s", (run_id,)) == 1


def test_a_session_cut_while_relocking_does_not_end_the_runner(db_url: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Read from runner/worker/loop.py while tracing the suite's reconnects (no suite run has hit
    the window yet; this forces it).

    ``run()`` calls ``_reconnect()`` from inside its ``except psycopg.OperationalError``
    handler; ``_reconnect`` retries only the ``connect``. If the new session is cut before or
    during ``ledger.relock_runs`` (a connection kill, a server restart: exactly when sessions
    die in bursts), that OperationalError leaves the loop, ``shutdown()`` runs, and the
    process exits instead of reconnecting again."""
    import threading

    from runner import Runner
    from runner.store import ledger as ledger_module
    from runner.worker.loop import LoopConfig, Worker

    app = Runner()

    @app.job("tick", every="1s")
    def tick(ctx) -> None:  # type: ignore[no-untyped-def]
        pass

    calls: list[int] = []
    relock = ledger_module.relock_runs

    def cut_once(conn, namespace, runs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 1:
            raise psycopg.OperationalError("the connection is lost (injected while relocking)")
        return relock(conn, namespace, runs)

    monkeypatch.setattr(ledger_module, "relock_runs", cut_once)
    worker = Worker(app, db_url, LoopConfig(workers=2, poll_interval=0.05, grace=0.5))
    worker.start()
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 1,
                   timeout=20)
        worker.session.conn().close()  # the lock session dies: the next tick reconnects
        eventually(lambda: len(calls) >= 2, timeout=10, message="a second reconnection after the cut")
        done = scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'")
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs"
                                          " WHERE status = 'succeeded'") > done, timeout=10)
        assert thread.is_alive()
    finally:
        worker.stop()
        thread.join(30)
    assert_ledger_clean(db_url)
