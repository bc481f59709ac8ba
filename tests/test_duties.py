"""The loop's duties (runner/worker/duties.py): each has its own error boundary, so one that fails is
retried and never stops the others; their order is the documented one."""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from runner import JobContext, Runner
from runner.store import ledger
from runner.worker import orphans as takeover
from runner.worker.duties import Duties, Duty
from runner.worker.loop import Worker
from tests.support import assert_ledger_clean, eventually, running_worker, scalar


def test_a_failing_duty_is_retried_and_the_others_go_on() -> None:
    ran: list[str] = []
    calls = {"bad": 0}

    def bad() -> None:
        calls["bad"] += 1
        raise RuntimeError("boom\nattempt_succeeded forged")

    failed: list[str] = []
    duties = Duties([Duty("first", lambda: ran.append("first")), Duty("bad", bad),
                     Duty("last", lambda: ran.append("last"))],
                    session_alive=lambda: True, on_failure=failed.append, retry_after=60.0)
    duties.run_due()
    duties.run_due()  # "bad" waits for its retry; the others run on every tick
    assert ran == ["first", "last", "first", "last"]
    assert calls["bad"] == 1 and failed == ["bad"]
    assert duties["bad"].failures == 1 and duties.next_due() is not None
    duties["bad"].soon()
    duties.run_due()
    assert calls["bad"] == 2 and duties["bad"].failures == 2


def test_a_lost_session_goes_up_to_the_loop() -> None:
    def lost() -> None:
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    duties = Duties([Duty("lost", lost)], session_alive=lambda: False)
    try:
        duties.run_due()
    except psycopg.OperationalError:
        pass
    else:
        raise AssertionError("a lost lock session must reach the loop, which reconnects")


def test_the_order_is_the_documented_one(db_url: str) -> None:
    app = Runner()

    @app.job("any", every="1h")
    def handler(ctx: JobContext) -> None: ...

    worker = Worker(app, db_url)
    names = [d.name for d in worker.duties.order]
    assert names == ["timeouts", "fan_out", "steal", "claims", "misfire", "requeue_waiting", "shares",
                     "takeover", "retries", "lane", "beats", "instance_beat", "copy", "history", "clock",
                     "prepare"]
    doc = Worker._make_duties.__doc__ or ""
    positions = [doc.index(f"``{n}``") for n in names]
    assert positions == sorted(positions), "the docstring lists the duties in another order"


def test_a_takeover_pass_that_raises_does_not_stop_claims(db_url: str, monkeypatch: Any) -> None:
    """The takeover duty fails on every pass (a bug, a transient error): slots keep being
    claimed and run, the duties after it (retries, beats) still run, and the failure is
    counted per duty. (When the tick was one method, a raising takeover pass skipped every
    later step: retries, the lane and every heartbeat.)"""
    def broken(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("takeover is broken")

    monkeypatch.setattr(takeover, "run_once", broken)
    app = Runner()

    @app.job("tick", every="1s", max_attempts=3, backoff="0.1s")
    def handler(ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")

    with running_worker(app, db_url, instance_heartbeat=0.2) as worker:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'"
                                          " AND attempt = 2") >= 3,
                   timeout=30, message="slots ran, and were retried, while the takeover duty failed")
        first = scalar(db_url, "SELECT heartbeat_at FROM runner.instances")
        eventually(lambda: scalar(db_url, "SELECT heartbeat_at > %s FROM runner.instances", (first,)),
                   timeout=30, message="the instance kept beating")
        assert worker.duties["takeover"].failures >= 1
        failures = worker.metrics.registry.get_sample_value("runner_duty_failures_total", {"duty": "takeover"})
        assert failures is not None and failures >= 1
    assert_ledger_clean(db_url)


def test_ending_hung_owners_never_holds_up_claims(db_url: str, monkeypatch: Any) -> None:
    """Ending hung owners reads the server's whole lock table (12 s a call seen during a slot of
    100,000 runs, issue 32). It runs beside the loop, on a connection of its own with a
    statement timeout: while one pass is stuck, slots keep being claimed and run on the lock
    session, which it never judges. (On the lock session, a stuck pass stopped every claim.)"""
    stuck = threading.Event()
    release = threading.Event()
    seen: dict[str, Any] = {}

    def slow(conn: psycopg.Connection[Any], *args: Any, **kw: Any) -> list[Any]:
        seen.update(pid=conn.info.backend_pid, lock_pid=kw.get("lock_pid"),
                    timeout=conn.execute("SHOW statement_timeout").fetchone())
        stuck.set()
        release.wait(60)
        return []

    monkeypatch.setattr(ledger, "end_hung_owners", slow)
    app = Runner()

    @app.job("tick", every="1s")
    def handler(ctx: JobContext) -> None:
        pass

    try:
        with running_worker(app, db_url) as worker:
            assert stuck.wait(30), "no pass of end_hung_owners"
            done = scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'")
            eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs"
                                              " WHERE status = 'succeeded'") >= done + 3,
                       timeout=30, message="slots claimed and run while the pass is stuck")
            lock_pid = worker.session.conn().info.backend_pid
            assert seen["pid"] != lock_pid and seen["lock_pid"] == lock_pid
            assert seen["timeout"] == ("5s",)
            release.set()
    finally:
        release.set()
    assert_ledger_clean(db_url)


def test_a_duty_beside_the_loop_survives_raises_and_a_lost_connection(db_url: str) -> None:
    """``on_own_connection`` (gap-scan watermarks, retention, pause conditions): a pass that
    raises is counted and retried; a connection the server drops is opened again; ``stop``
    ends the thread and closes its connection."""
    import threading

    from runner.worker.duties import on_own_connection

    seen: list[int] = []  # backend pid of each pass that succeeded
    calls = {"n": 0}
    failed: list[str] = []

    def work(conn: psycopg.Connection[Any]) -> None:
        calls["n"] += 1
        if calls["n"] in (2, 3):
            raise RuntimeError("a user callable raised")
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        seen.append(row[0])

    stop = threading.Event()
    thread = on_own_connection("probe", lambda: psycopg.connect(db_url, autocommit=True,
                                                                application_name="probe-duty"),
                               work, stop, 0.01, first_now=True, on_failure=failed.append,
                               max_retry_after=0.02)
    try:
        eventually(lambda: len(seen) >= 2, message="passes after two that raised")
        assert failed == ["probe", "probe"] and thread.is_alive()
        first = seen[0]
        assert scalar(db_url, "SELECT pg_terminate_backend(%s)", (first,)) is True
        eventually(lambda: seen[-1] != first, message="a pass on a new connection")
        # one failed pass when the dropped connection was used, then a new one
        assert failed.count("probe") == 3 and thread.is_alive()
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    eventually(lambda: scalar(db_url, "SELECT count(*) FROM pg_stat_activity"
                                      " WHERE application_name = 'probe-duty'") == 0,
               message="its connection closed")
