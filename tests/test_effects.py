"""The effect log: a confirmed effect is never repeated, an unknown one is resolved by the
handler's check or the run goes dead, a stale owner sends nothing, stages are visible.

Scenarios run through an in-process worker (as tests/test_worker.py); the statements
themselves and the races are driven directly on a claimed run."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from runner import JobContext, LostOwnership, Runner
from runner.errors import AttemptTimedOut, UnresolvedEffect
from runner.model.schedule import idempotency_key
from runner.store import ledger
from runner.store.ledger import Owner, SlotClaim
from runner.worker.effects import Q, lookup
from tests.support import assert_ledger_clean, eventually, one_late_slot, rows, run_cli, scalar
from tests.test_worker import FAST, running

EFFECT_COLUMNS = "status, send_count, attempt, fence, confirmed_by, result, error"


def daily() -> dict[str, Any]:
    """One slot (30 minutes ago, daily: tests/support.py one_late_slot) in the job's tracked
    range, none due during the test: one run per partition."""
    return one_late_slot()


def effect_row(url: str, key: str) -> Any:
    found = rows(url, f"SELECT {EFFECT_COLUMNS} FROM runner.effects WHERE effect_key = %s", (key,))
    return found[0] if found else None


def run_of(url: str, run_id: int) -> tuple[Any, ...]:
    return rows(url, "SELECT status, attempt, last_error FROM runner.job_runs WHERE id = %s", (run_id,))[0]


# -- through a worker ---------------------------------------------------------------------


def test_confirmed_effect_is_never_repeated_on_retry(db_url: str) -> None:
    app = Runner()
    sends: Counter[str] = Counter()
    returned: list[tuple[int, Any]] = []
    done: list[int] = []

    @app.job("mail", **daily(), max_attempts=2, backoff=FAST)
    def handler(ctx: JobContext) -> None:
        key = f"{ctx.idempotency_key}:mail"

        def send() -> dict[str, Any]:
            sends[key] += 1
            return {"message_id": "m-1", "to": ["a@example.com"]}

        returned.append((ctx.attempt, ctx.effect(key, send)))
        if ctx.attempt == 1:
            raise RuntimeError("fails after the effect")
        done.append(ctx.run_id)

    with running(app, db_url):
        eventually(lambda: done, message="the retry succeeded")
    run_id = done[0]
    key = scalar(db_url, "SELECT idempotency_key FROM runner.job_runs WHERE id = %s", (run_id,)) + ":mail"
    assert sends[key] == 1
    receipt = {"message_id": "m-1", "to": ["a@example.com"]}
    assert returned[:2] == [(1, receipt), (2, receipt)]  # the retry got the stored result
    assert effect_row(db_url, key) == ("confirmed", 1, 1, 1, "send", receipt, None)
    assert run_of(db_url, run_id)[:2] == ("succeeded", 2)


def test_timeout_is_unknown_and_a_check_confirms_it_without_resending(db_url: str) -> None:
    app = Runner()
    sends: list[int] = []
    seen_before: list[Any] = []
    checked: list[str] = []
    done: list[int] = []

    @app.job("pay", **daily(), max_attempts=3, backoff=FAST)
    def handler(ctx: JobContext) -> None:
        key = f"{ctx.idempotency_key}:pay"

        def send() -> str:
            sends.append(ctx.attempt)
            if ctx.attempt == 1:
                raise TimeoutError("gateway did not answer")
            return "paid"

        def check(k: str) -> bool:
            checked.append(k)
            return True  # the gateway says the first payment went through

        if ctx.attempt > 1:
            seen_before.append(effect_row(db_url, key))
        ctx.effect(key, send, check=check)
        done.append(ctx.run_id)

    with running(app, db_url):
        eventually(lambda: done)
    key = scalar(db_url, "SELECT idempotency_key FROM runner.job_runs WHERE id = %s", (done[0],)) + ":pay"
    assert sends == [1]
    assert seen_before == [("unknown", 1, 1, 1, None, None, "TimeoutError: gateway did not answer")]
    assert checked == [key]
    # confirmed by the check: no result, the timeout kept as history, the checker's attempt
    assert effect_row(db_url, key) == (
        "confirmed", 1, 2, 2, "check", None, "TimeoutError: gateway did not answer")
    assert run_of(db_url, done[0])[:2] == ("succeeded", 2)


def test_check_saying_not_delivered_sends_again_once(db_url: str) -> None:
    app = Runner()
    sends: list[int] = []
    done: list[int] = []

    @app.job("pay", **daily(), max_attempts=3, backoff=FAST)
    def handler(ctx: JobContext) -> None:
        def send() -> str:
            sends.append(ctx.attempt)
            if ctx.attempt == 1:
                raise TimeoutError("no answer")
            return "paid"

        assert ctx.effect(f"{ctx.idempotency_key}:pay", send, check=lambda k: False) == "paid"
        done.append(ctx.run_id)

    with running(app, db_url):
        eventually(lambda: done)
    key = scalar(db_url, "SELECT idempotency_key FROM runner.job_runs WHERE id = %s", (done[0],)) + ":pay"
    assert sends == [1, 2]
    assert effect_row(db_url, key) == ("confirmed", 2, 2, 2, "send", "paid", None)


@pytest.mark.parametrize("check", [None, lambda k: None, lambda k: "yes"], ids=["no-check", "none", "str"])
def test_unresolved_effect_sends_the_run_to_dead(db_url: str, check: Any) -> None:
    app = Runner()
    sends: list[int] = []
    raised: list[BaseException] = []

    @app.job("pay", **daily(), max_attempts=5, backoff=FAST)
    def handler(ctx: JobContext) -> None:
        def send() -> str:
            sends.append(ctx.attempt)
            raise TimeoutError("no answer")

        try:
            ctx.effect(f"{ctx.idempotency_key}:pay", send, check=check)
        except UnresolvedEffect as exc:
            raised.append(exc)
            raise

    with running(app, db_url):
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'dead'"))
    attempt, last_error = rows(db_url, "SELECT attempt, last_error FROM runner.job_runs"
                                       " WHERE status = 'dead'")[0]
    assert attempt == 2  # dead at once, not by running out of attempts
    assert last_error.startswith("runner.errors.UnresolvedEffect: effect ")
    assert sends == [1] and len(raised) == 1
    assert rows(db_url, "SELECT status, send_count FROM runner.effects") == [("unknown", 1)]


def test_a_check_that_raises_leaves_the_effect_unknown_and_the_run_retries(db_url: str) -> None:
    app = Runner()
    sends: list[int] = []
    done: list[int] = []

    @app.job("pay", **daily(), max_attempts=4, backoff=FAST)
    def handler(ctx: JobContext) -> None:
        def send() -> str:
            sends.append(ctx.attempt)
            raise TimeoutError("no answer")

        def check(k: str) -> bool:
            if ctx.attempt == 2:
                raise ConnectionError("status API down")
            return True

        ctx.effect(f"{ctx.idempotency_key}:pay", send, check=check)
        done.append(ctx.attempt)

    with running(app, db_url):
        eventually(lambda: done)
    assert sends == [1] and done == [3]
    assert rows(db_url, "SELECT status, send_count, attempt, confirmed_by FROM runner.effects") == [
        ("confirmed", 1, 3, "check")]
    assert [r[0] for r in rows(db_url, "SELECT error_class FROM runner.attempts ORDER BY attempt")] == [
        "TimeoutError", "ConnectionError", None]


def test_stale_owner_cannot_send(db_url: str) -> None:
    app = Runner()
    sends: list[int] = []
    raised: list[BaseException] = []
    done = threading.Event()

    @app.job("fenced", **daily())
    def handler(ctx: JobContext) -> None:
        with psycopg.connect(db_url, autocommit=True) as other:  # someone takes the run over
            other.execute("UPDATE runner.job_runs SET fence = fence + 1 WHERE id = %s", (ctx.run_id,))
        try:
            ctx.effect(f"{ctx.idempotency_key}:mail", lambda: sends.append(1))
        except LostOwnership as exc:
            raised.append(exc)
            raise
        finally:
            done.set()

    with running(app, db_url):
        eventually(done.is_set)
        eventually(lambda: scalar(db_url, "SELECT status FROM runner.attempts") == "stale")
    assert sends == [] and raised
    assert "not sent" in str(raised[0])
    assert scalar(db_url, "SELECT count(*) FROM runner.effects") == 0


def test_multi_stage_completion_is_visible_per_run(db_url: str) -> None:
    app = Runner()

    @app.job("report", **daily(), partitions=["done", "stuck"], max_attempts=1)
    def handler(ctx: JobContext) -> None:
        base = ctx.idempotency_key
        ctx.effect(f"{base}:generated", stage="generated")  # planned up front
        for to in ("a", "b"):
            ctx.effect(f"{base}:delivered:{to}", stage="delivered")
        ctx.effect(f"{base}:generated", lambda: {"file": "report.pdf"})
        if ctx.partition == "stuck":
            raise RuntimeError("mail server refused")
        for to in ("a", "b"):
            ctx.effect(f"{base}:delivered:{to}", lambda: "queued")

    with running(app, db_url):
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs"
                                          " WHERE status IN ('succeeded', 'dead')") >= 2)
    stages = rows(db_url, "SELECT partition_key, run_status, position, stage, status, effects, confirmed,"
                          " sends, confirmed_at IS NOT NULL FROM runner.run_stages"
                          " ORDER BY partition_key, position")
    assert stages == [
        ("done", "succeeded", 1, "generated", "confirmed", 1, 1, 1, True),
        ("done", "succeeded", 2, "delivered", "confirmed", 2, 2, 2, True),
        ("stuck", "dead", 1, "generated", "confirmed", 1, 1, 1, True),
        ("stuck", "dead", 2, "delivered", "planned", 2, 0, 0, False),
    ]


def test_keys_and_stages_with_quotes_and_unicode_are_stored_verbatim(db_url: str) -> None:
    app = Runner()
    sends: Counter[str] = Counter()
    keys: list[str] = []

    @app.job("it's \"quoted\"", **daily(), partitions=["테넌트 ✉", "'; DROP TABLE runner.effects; --"],
             max_attempts=2, backoff=FAST)
    def handler(ctx: JobContext) -> None:
        key = f"{ctx.idempotency_key}:메일 'x' \"y\" \\ %s %(k)s ✉"
        keys.append(key)

        def send() -> str:
            sends[key] += 1
            return "보냄"

        assert ctx.effect(key, send, stage="배달 'stage'") == "보냄"
        if ctx.attempt == 1:
            raise RuntimeError("retry")

    with running(app, db_url):
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 2)
    stored = rows(db_url, "SELECT e.effect_key, e.stage, e.partition_key, e.job_name, e.send_count,"
                          " r.partition_key FROM runner.effects e JOIN runner.job_runs r ON r.id = e.run_id")
    assert len(stored) == 2
    for key, stage, partition, job, send_count, run_partition in stored:
        assert key in keys and sends[key] == 1 and send_count == 1
        assert stage == "배달 'stage'" and partition == run_partition and job == "it's \"quoted\""
    assert scalar(db_url, "SELECT count(DISTINCT stage) FROM runner.run_stages") == 1


# -- on a claimed run, directly -----------------------------------------------------------

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def ctx(db_url: str) -> Iterator[JobContext]:
    """The context of attempt 1 of a claimed run, with a pool like the worker's."""
    app = Runner()

    @app.job("direct", every="1m")
    def direct(ctx: JobContext) -> None: ...

    job = app.jobs["direct"]
    start, end = T0 - timedelta(minutes=1), T0
    claim = SlotClaim("direct", T0, "", T0.date(), start, end, idempotency_key("direct", start, end, "", "1"))
    with psycopg.connect(db_url, autocommit=True) as conn:
        ledger.sync_jobs(conn, [job], now=T0 - timedelta(hours=1))
        _, (run,) = ledger.claim_slots(conn, Owner(uuid4(), "host", 1, 21077), [claim], now=T0)
    pool: ConnectionPool[Any] = ConnectionPool(db_url, min_size=0, max_size=2, open=True,
                                               kwargs={"autocommit": True})
    try:
        yield JobContext(run, job, pool)
    finally:
        pool.close()


def next_attempt(url: str, ctx: JobContext) -> JobContext:
    """The run's next attempt (attempt + 1, fence + 1), as a retry or takeover makes it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE runner.job_runs SET attempt = attempt + 1, fence = fence + 1 WHERE id = %s",
                     (ctx.run_id,))
    return JobContext(ctx._run._replace(attempt=ctx.attempt + 1, fence=ctx.fence + 1), ctx._job, ctx._pool)


def mark_sent(conn: psycopg.Connection[Any], ctx: JobContext, key: str, seen: tuple[Any, Any] = (None, None),
              fence: int | None = None) -> tuple[Any, ...]:
    row = conn.execute(Q["mark_sent"], {
        "effect_key": key, "run_id": ctx.run_id, "job_name": ctx.job_name, "partition_key": ctx.partition,
        "attempt": ctx.attempt, "fence": ctx.fence if fence is None else fence, "stage": None,
        "seen_status": seen[0], "seen_send_count": seen[1], "now": None}).fetchone()
    assert row is not None
    return tuple(row)


def test_sent_mark_is_fence_checked_and_compare_and_set(ctx: JobContext, db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        # a stale fence writes nothing
        assert mark_sent(conn, ctx, "k", fence=ctx.fence - 1) == (False, None)
        assert mark_sent(conn, ctx, "k", fence=ctx.fence + 1) == (False, None)
        assert lookup(conn, "k") is None
        # the owner's fence: a new key is inserted as sent, send_count 1
        assert mark_sent(conn, ctx, "k") == (True, 1)
        # a caller that read the row before it changed loses the race
        assert mark_sent(conn, ctx, "k") == (True, None)  # it thought there was no row
        assert mark_sent(conn, ctx, "k", seen=("failed", 1)) == (True, None)
        assert mark_sent(conn, ctx, "k", seen=("sent", 0)) == (True, None)
        assert mark_sent(conn, ctx, "k", seen=("sent", 1)) == (True, 2)
        effect = lookup(conn, "k")
        assert effect is not None and (effect.status, effect.send_count, effect.run_id) == ("sent", 2, ctx.run_id)
        # a run that is no longer running refuses, even under its own fence
        conn.execute("UPDATE runner.job_runs SET status = 'succeeded' WHERE id = %s", (ctx.run_id,))
        assert mark_sent(conn, ctx, "k2") == (False, None)


def test_sent_mark_waits_for_a_takeover_in_flight_and_then_refuses(ctx: JobContext, db_url: str) -> None:
    takeover = psycopg.connect(db_url)
    marker = psycopg.connect(db_url, autocommit=True)
    try:
        takeover.execute("UPDATE runner.job_runs SET fence = fence + 1 WHERE id = %s", (ctx.run_id,))
        result: list[tuple[Any, ...]] = []
        thread = threading.Thread(target=lambda: result.append(mark_sent(marker, ctx, "k")))
        thread.start()
        pid = marker.info.backend_pid
        eventually(lambda: scalar(db_url, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                  (pid,)) == "Lock", message="the sent mark waits for the run's row")
        takeover.commit()
        thread.join(10)
        assert result == [(False, None)]
        assert scalar(db_url, "SELECT count(*) FROM runner.effects") == 0
    finally:
        takeover.close()
        marker.close()


def test_a_takeover_waits_for_a_sent_mark_and_the_next_owner_sees_it(ctx: JobContext, db_url: str) -> None:
    marker = psycopg.connect(db_url)  # a transaction held open, as if the statement were slow
    takeover = psycopg.connect(db_url, autocommit=True)
    try:
        assert mark_sent(marker, ctx, "k") == (True, 1)
        thread = threading.Thread(target=lambda: takeover.execute(
            "UPDATE runner.job_runs SET fence = fence + 1, attempt = attempt + 1 WHERE id = %s", (ctx.run_id,)))
        thread.start()
        pid = takeover.info.backend_pid
        eventually(lambda: scalar(db_url, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                  (pid,)) == "Lock", message="the takeover waits for the sent mark")
        marker.commit()
        thread.join(10)
    finally:
        marker.close()
        takeover.close()
    nxt = JobContext(ctx._run._replace(attempt=2, fence=2), ctx._job, ctx._pool)
    with pytest.raises(UnresolvedEffect):
        nxt.effect("k", lambda: pytest.fail("sent again"))


def test_sent_left_behind_needs_a_check(ctx: JobContext, db_url: str, monkeypatch: Any) -> None:
    import runner.worker.effects as effects

    sends: list[int] = []

    def lose_the_database(*args: Any) -> None:
        raise psycopg.OperationalError("connection lost")

    with monkeypatch.context() as m:  # the send happens, its outcome is never recorded
        m.setattr(effects, "_record", lose_the_database)
        with pytest.raises(psycopg.OperationalError):
            ctx.effect("k", lambda: sends.append(ctx.attempt))
    assert effect_row(db_url, "k")[:2] == ("sent", 1)
    second = next_attempt(db_url, ctx)
    with pytest.raises(UnresolvedEffect, match="is sent after 1 send"):
        second.effect("k", lambda: sends.append(second.attempt))
    assert second.effect("k", lambda: sends.append(second.attempt), check=lambda k: True) is None
    assert sends == [1]
    assert effect_row(db_url, "k") == ("confirmed", 1, 2, 2, "check", None, None)


class Declined(Exception):
    pass


class SlowGateway(Exception):
    pass


def test_failed_send_is_sent_again_and_unknown_on_is_the_handlers(ctx: JobContext, db_url: str) -> None:
    def declined() -> None:
        raise Declined("card declined")

    def slow() -> None:
        raise SlowGateway("504")

    with pytest.raises(Declined):
        ctx.effect("a", declined)
    assert effect_row(db_url, "a") == ("failed", 1, 1, 1, None, None, "tests.test_effects.Declined: card declined")
    assert ctx.effect("a", lambda: 42) == 42
    assert effect_row(db_url, "a") == ("confirmed", 2, 1, 1, "send", 42, None)

    with pytest.raises(SlowGateway):
        ctx.effect("b", slow, unknown_on=(TimeoutError, SlowGateway))
    assert effect_row(db_url, "b")[:2] == ("unknown", 1)
    with pytest.raises(SlowGateway):
        ctx.effect("c", slow, unknown_on=SlowGateway)
    assert effect_row(db_url, "c")[:2] == ("unknown", 1)


def test_stored_result_is_json_or_nothing(ctx: JobContext, db_url: str) -> None:
    marker = object()
    assert ctx.effect("tuple", lambda: (1, "ü")) == (1, "ü")
    assert ctx.effect("tuple", lambda: pytest.fail("sent again")) == [1, "ü"]
    assert ctx.effect("object", lambda: marker) is marker
    assert ctx.effect("object", lambda: pytest.fail("sent again")) is None
    for key, value in [("nan", float("nan")), ("nul", "a\x00b"), ("surrogate", "\udcff"),
                       ("huge", "x" * 300_000)]:
        assert ctx.effect(key, lambda v=value: v) is value
        assert effect_row(db_url, key)[:2] == ("confirmed", 1)
        assert scalar(db_url, "SELECT result IS NULL FROM runner.effects WHERE effect_key = %s", (key,))


def test_planning_is_fence_checked_and_keeps_the_first_plan(ctx: JobContext, db_url: str) -> None:
    assert ctx.effect("k", stage="generated") is None
    assert ctx.effect("k", stage="other") is None
    assert rows(db_url, "SELECT status, send_count, stage FROM runner.effects") == [("planned", 0, "generated")]
    assert ctx.effect("k", lambda: "done") == "done"
    assert rows(db_url, "SELECT status, send_count, stage FROM runner.effects") == [("confirmed", 1, "generated")]
    next_attempt(db_url, ctx)  # ctx is now stale
    with pytest.raises(LostOwnership):
        ctx.effect("k2", stage="delivered")
    with pytest.raises(LostOwnership):
        ctx.effect("k3", lambda: pytest.fail("a stale owner sent"))
    # a confirmed key is still answered to a stale owner: nothing is sent either way
    assert ctx.effect("k", lambda: pytest.fail("sent again")) == "done"
    assert scalar(db_url, "SELECT count(*) FROM runner.effects") == 1


def test_an_attempt_the_runner_gave_up_on_sends_nothing(ctx: JobContext, db_url: str) -> None:
    ctx.cancel("timed out after 0:00:01")  # the fence has not moved yet
    with pytest.raises(AttemptTimedOut, match="timed out after"):
        ctx.effect("k", lambda: pytest.fail("sent after the timeout"))
    with pytest.raises(AttemptTimedOut):
        ctx.effect("k", stage="delivered")
    assert scalar(db_url, "SELECT count(*) FROM runner.effects") == 0


@pytest.mark.parametrize(("key", "error"), [
    ("", ValueError), ("a\x00b", ValueError), ("\udcff", ValueError), ("é" * 1001, ValueError),
    (42, TypeError),
])
def test_bad_keys_are_refused_before_any_write(ctx: JobContext, db_url: str, key: Any,
                                               error: type[Exception]) -> None:
    with pytest.raises(error):
        ctx.effect(key, lambda: pytest.fail("sent"))
    with pytest.raises(error):
        ctx.effect("ok", lambda: pytest.fail("sent"), stage=key)
    assert scalar(db_url, "SELECT count(*) FROM runner.effects") == 0


def test_longest_key_is_stored(ctx: JobContext, db_url: str) -> None:
    key = "é" * 1000  # 2000 bytes
    assert ctx.effect(key, lambda: 1) == 1
    assert scalar(db_url, "SELECT octet_length(effect_key) FROM runner.effects") == 2000


# -- retention (issue 26, defect 5) --------------------------------------------------------------


def test_a_confirmed_key_is_not_sent_again_after_its_run_was_pruned(db_url: str) -> None:
    """Issue 26, defect 5: retention deleted a pruned run's effects, so running its slot
    again (a backfill --force) sent the confirmed key a second time. The handler runs for a
    slot three days back (the real claim, attempt and outcome: runner.testing.run_once), its
    effect is confirmed; the run ages past its retention and `runner prune` deletes it; a
    forced backfill of that slot runs the handler again in a real loop: the key is still
    confirmed (runner.effect_keys), `send` is not called again, and the audit is clean."""
    from runner.actions import backfill
    from runner.testing import run_once

    slot = datetime.now(UTC).replace(hour=3, minute=0, second=0, microsecond=0) - timedelta(days=3)
    app = Runner()
    sends: Counter[str] = Counter()
    got: list[tuple[str, Any]] = []

    @app.job("pruned-mail", cron="0 3 * * *", retention="1h", track_from=slot, misfire="skip")
    def handler(ctx: JobContext) -> None:
        key = f"{ctx.idempotency_key}:mail"

        def send() -> dict[str, str]:
            sends[key] += 1
            return {"message_id": "m-1"}

        got.append((key, ctx.effect(key, send)))

    first = run_once(app, "pruned-mail", slot, db_url)
    key = next(iter(sends))
    assert first.status == "succeeded" and sends[key] == 1 and got == [(key, {"message_id": "m-1"})]
    with psycopg.connect(db_url, autocommit=True) as conn:
        # the run ages past its retention (it finished just now): as if it had run at its slot
        conn.execute("UPDATE runner.job_runs SET started_at = %s, finished_at = %s", (slot, slot))
        conn.execute("SELECT runner.advance_watermarks_v1()")
    out = run_cli("prune", url=db_url)
    assert out.returncode == 0, out.stderr
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE schedule_slot = %s", (slot,)) == 0
    assert effect_row(db_url, key) is None
    assert rows(db_url, "SELECT job_name, confirmed_at IS NOT NULL FROM runner.effect_keys"
                        " WHERE effect_key = %s", (key,)) == [("pruned-mail", True)]

    with psycopg.connect(db_url, autocommit=True) as conn:
        spec = backfill.Spec("pruned-mail", slot, slot + timedelta(seconds=1), force=True)
        plan = backfill.create(conn, backfill.plan(conn, app.jobs["pruned-mail"], spec), "defect 5", "tester")
    plan_id = plan["backfill"]["id"]
    with running(app, db_url):
        eventually(lambda: scalar(db_url, "SELECT status FROM runner.backfills WHERE id = %s", (plan_id,))
                   == "completed", timeout=30, message="the forced backfill of the pruned slot ran")
    assert scalar(db_url, "SELECT status FROM runner.job_runs WHERE schedule_slot = %s", (slot,)) == "succeeded"
    assert sends[key] == 1, f"the confirmed key was sent {sends[key]} times"
    # confirmed by the pruned run: ctx.effect returns no result (only the key is kept)
    assert [r for k, r in got if k == key] == [{"message_id": "m-1"}, None]
    assert effect_row(db_url, key) is None  # nothing recorded again under the kept key
    assert_ledger_clean(db_url, since=slot + timedelta(seconds=1))
