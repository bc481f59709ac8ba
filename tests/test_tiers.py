"""Misfire tiers (runner/model/tiers.py): the tier is chosen by how long the job was missing, each
decided slot records its tier and why, a backfill tier makes one audited plan however many
runners decide, an approval tier runs nothing before a person approves."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner import JobDefinitionError, Runner, tiers
from runner.model.schedule import idempotency_key
from runner.store import ledger
from runner.worker import misfire
from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, run_cli, scalar

T0 = datetime(2026, 5, 4, 3, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
US = timedelta(microseconds=1)
TIER_APPS = "tests/apps/tiers.py"


def tiered_app(*items: Any, every: str = "1m", side_effects: bool = False, **options: Any) -> Runner:
    app = Runner()
    app.job("late", every=every, track_from=T0, grace="1s", owner="settlement-platform",
            misfire=tiers(*items, side_effects=side_effects), **options)(lambda ctx: None)
    return app


@pytest.fixture
def conn(db_url: str) -> Any:
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


def decide(conn: Any, app: Runner, now: datetime) -> misfire.Decisions:
    """Every late slot of a runner starting at ``now`` (a downtime since T0), decided."""
    ledger.sync_jobs(conn, list(app.jobs.values()), now=T0 - MIN)
    job = app.jobs["late"]
    late = misfire.LateRange(None, job.schedule.latest_at_or_before(misfire.cutoff_for(job, now)))
    total = misfire.Decisions()
    while True:
        got = misfire.run_once(conn, job, now, late)
        for k, v in got.counts.items():
            total.counts[k] = total.counts.get(k, 0) + v
        if not got.more:
            return total


def decisions(conn: Any) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT tier, action, count(*), max(lateness), max(alert::int)"
                        " FROM runner.misfire_decisions GROUP BY 1, 2 ORDER BY 1").fetchall()


# -- the definition -------------------------------------------------------------------------


def test_the_defaults_are_the_notes_four_tiers() -> None:
    got = tiers()
    assert [(t.up_to, t.action, t.alert) for t in got.tiers] == [
        (timedelta(minutes=5), "catch_up", False), (timedelta(hours=1), "coalesce", False),
        (timedelta(hours=24), "backfill", True), (None, "approve", True)]
    assert got.tiers[2].lane == "correction"


@pytest.mark.parametrize(("items", "message"), [
    ((("1h", "coalesce"), ("5m", "catch_up"), (None, "approve")),
     "tier 2 ('catch_up'): up_to 5m must be more than the previous tier's 1h"),
    ((("5m", "catch_up"), ("5m", "coalesce"), (None, "approve")),
     "tier 2 ('coalesce'): up_to 5m must be more than the previous tier's 5m"),
    ((("5m", "catch_up"), ("1h", "coalesce")), "the last tier ('coalesce') needs up_to None"),
    (((None, "approve"), ("5m", "catch_up")), "tier 1 ('approve') has no bound (up_to None) but is not the last"),
    ((("5m", "run_it"), (None, "approve")), "tier 1: action must be one of skip, catch_up, coalesce"),
    ((("5m", "catch_up", {"lane": "bulk"}), (None, "approve")), "tier 1 (catch_up): lane only apply to a backfill"),
    ((("5m", "backfill", {"lanes": "bulk"}), (None, "approve")), "tier 1 (backfill): unknown option(s) lanes"),
    ((("5m", "backfill", {"concurrency": 0}), (None, "approve")), "concurrency must be an integer >= 1"),
    ((("5", "catch_up"), (None, "approve")), "tier 1 (catch_up): up_to:"),
    ((("5m", "catch_up"), ("1h", "catch_up"), (None, "approve")), "the name 'catch_up' is used twice"),
    (("5m",), "tier 1: give (up_to, action)"),
])
def test_bad_tiers_are_refused_at_registration_in_one_line(items: Any, message: str) -> None:
    app = Runner()
    with pytest.raises(JobDefinitionError) as err:
        app.job("j", every="1m", misfire=list(items))(lambda ctx: None)
    text = str(err.value)
    assert text.startswith("job 'j': misfire: ") and message in text and "\n" not in text
    assert app.jobs == {}


def test_a_single_policy_stays_valid_and_a_bad_one_names_tiers() -> None:
    app = Runner()
    app.job("a", every="1m", misfire="replay")(lambda ctx: None)
    assert app.jobs["a"].misfire == "replay" and app.jobs["a"].misfire_tiers is None
    with pytest.raises(JobDefinitionError, match="or tiers"):
        app.job("b", every="1m", misfire="later")(lambda ctx: None)


def test_the_tiers_are_stored_in_the_job_row(conn: Any) -> None:
    ledger.sync_jobs(conn, list(tiered_app().jobs.values()), now=T0 - MIN)
    stored = scalar_of(conn, "SELECT options -> 'misfire_tiers' FROM runner.jobs")
    assert stored["side_effects"] is False
    assert [(t["name"], t["up_to_seconds"]) for t in stored["tiers"]] == [
        ("catch_up", 300), ("coalesce", 3600), ("backfill", 86400), ("approve", None)]
    assert stored["tiers"][2]["lane"] == "correction" and stored["tiers"][2]["concurrency"] == 1


def scalar_of(conn: Any, sql: str, params: Any = None) -> Any:
    row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


# -- the boundaries: how late the oldest missed slot is when decided -------------------------


@pytest.mark.parametrize(("late_by", "tier"), [
    (5 * MIN, "catch_up"),           # exactly 5 minutes: the first tier
    (5 * MIN + US, "coalesce"),
    (60 * MIN, "coalesce"),          # exactly 1 hour: the second
    (60 * MIN + US, "backfill"),
    (24 * 60 * MIN, "backfill"),     # exactly 24 hours: the third
    (24 * 60 * MIN + US, "approve"),
])
def test_boundaries(conn: Any, late_by: timedelta, tier: str) -> None:
    decide(conn, tiered_app(every="5m"), T0 + late_by)
    got = decisions(conn)
    assert [(g[0], g[3]) for g in got] == [(tier, late_by)]


def test_each_tier_decides_the_whole_range_as_it_says(conn: Any, db_url: str) -> None:
    # 3 minutes: every slot caught up, one at a time
    app = tiered_app(every="30s")
    counts = decide(conn, app, T0 + 3 * MIN)
    assert counts.counts == {"pending": 6}  # T0 .. T0+2m30s (T0+3m is not late yet)
    assert {r[0] for r in rows(db_url, "SELECT trigger FROM runner.job_runs")} == {"catch_up"}
    assert decisions(conn) == [("catch_up", "catch_up", 6, 3 * MIN, 0)]
    reason = scalar_of(conn, "SELECT reason FROM runner.misfire_decisions ORDER BY schedule_slot LIMIT 1")
    assert reason.startswith("misfire tier 'catch_up' (late up to 5m), missed for 3m00s: late by 3m00s; caught up")


def test_coalesce_tier_runs_once_over_the_range(conn: Any) -> None:
    counts = decide(conn, tiered_app(), T0 + 30 * MIN)
    assert counts.counts == {"pending": 1, "coalesced": 29}
    assert decisions(conn) == [("coalesce", "coalesce", 30, 30 * MIN, 0)]


def test_approve_tier_holds_every_slot_and_alerts_the_owner(conn: Any) -> None:
    counts = decide(conn, tiered_app(every="1h"), T0 + 26 * 60 * MIN)
    assert counts.counts == {"awaiting_approval": 26}
    alert = conn.execute("SELECT owner, detail FROM runner.alerts WHERE kind = 'misfire_tier'").fetchall()
    assert len(alert) == 1 and alert[0][0] == "settlement-platform"
    assert "misfire tier 'approve' holds 26 run(s) awaiting approval" in alert[0][1]


def test_backfill_tier_makes_one_audited_plan_in_its_lane(conn: Any) -> None:
    app = tiered_app(("5m", "catch_up"), ("1h", "coalesce"),
                     ("24h", "backfill", {"lane": "bulk", "concurrency": 4, "rate": 10}), (None, "approve"))
    counts = decide(conn, app, T0 + 2 * 60 * MIN)
    assert counts.counts == {"backfill": 120}
    plan = conn.execute("SELECT id, lane, concurrency, rate, expected_runs, requested_by, range_from, range_to"
                        " FROM runner.backfills").fetchall()
    assert [p[1:] for p in plan] == [("bulk", 4, 10.0, 120, "runner (misfire tier backfill)",
                                      T0, T0 + 119 * MIN + US)]
    request = conn.execute("SELECT action, who, db_user = session_user, touched -> 'backfill' ->> 'id'"
                           " FROM runner.requests").fetchall()
    assert request == [("backfill", "runner (misfire tier backfill)", True, str(plan[0][0]))]
    assert scalar_of(conn, "SELECT count(*) FROM runner.job_runs WHERE trigger = 'backfill' AND lane = 'bulk'"
                           " AND status = 'pending'") == 120
    assert decisions(conn) == [("backfill", "backfill", 120, 120 * MIN, 1)]
    alert = conn.execute("SELECT owner, detail FROM runner.alerts WHERE kind = 'misfire_tier'").fetchall()
    assert alert[0][0] == "settlement-platform"
    assert f"misfire tier 'backfill' created backfill {plan[0][0]} (lane bulk, 120 run(s), running)" in alert[0][1]
    # deciding again (a restart) changes nothing; a minute later the one new late slot is
    # only a minute late: the first tier's
    assert decide(conn, app, T0 + 2 * 60 * MIN).counts == {}
    assert decide(conn, app, T0 + 2 * 60 * MIN + MIN).counts == {"pending": 1}
    assert scalar_of(conn, "SELECT count(*) FROM runner.backfills") == 1
    assert decisions(conn)[1][:3] == ("catch_up", "catch_up", 1)


def test_four_deciders_at_once_make_one_plan(db_url: str) -> None:
    app = tiered_app()
    with psycopg.connect(db_url, autocommit=True) as c:
        ledger.sync_jobs(c, list(app.jobs.values()), now=T0 - MIN)
    now = T0 + 2 * 60 * MIN
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def one() -> None:
        try:
            with psycopg.connect(db_url, autocommit=True) as c:
                job = app.jobs["late"]
                barrier.wait()
                misfire.run_once(c, job, now, misfire.LateRange(
                    None, job.schedule.latest_at_or_before(misfire.cutoff_for(job, now))))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert scalar(db_url, "SELECT count(*) FROM runner.backfills") == 1
    assert scalar(db_url, "SELECT count(*) FROM runner.requests") == 1
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs") == 120
    assert scalar(db_url, "SELECT count(*) FROM runner.misfire_decisions") == 120


def test_the_plan_function_refuses_slots_that_have_a_run(conn: Any) -> None:
    app = tiered_app()
    decide(conn, app, T0 + 2 * 60 * MIN)
    with pytest.raises(psycopg.errors.RaiseException, match="already has a run"):
        conn.execute("SELECT * FROM runner.tier_backfill_v1('late', 'backfill', '2 hours', ARRAY[%s::timestamptz],"
                     " ARRAY[''], ARRAY[%s::date], ARRAY[%s::timestamptz], ARRAY[%s::timestamptz], ARRAY['k'], 'r')",
                     (T0, T0.date(), T0 - MIN, T0))
    with pytest.raises(psycopg.errors.RaiseException, match="has no backfill tier 'coalesce'"):
        conn.execute("SELECT * FROM runner.tier_backfill_v1('late', 'coalesce', '2 hours', ARRAY[%s::timestamptz],"
                     " ARRAY[''], ARRAY[%s::date], ARRAY[%s::timestamptz], ARRAY[%s::timestamptz], ARRAY['k'], 'r')",
                     (T0 + 500 * MIN, T0.date(), T0 - MIN, T0))


# -- side effects ---------------------------------------------------------------------------


def seed_run(conn: Any, job: Any, slot: datetime, partition: str, status: str,
             effect: str | None = None, effect_status: str = "unknown") -> int:
    """An earlier run of ``job`` at ``slot`` x ``partition`` (one attempt), and an effect its
    attempt left (``effect_status``: unknown, sent or confirmed)."""
    start, end = job.window_for(slot)
    key = idempotency_key(job.name, start, end, partition, job.version)
    attempt_status = {"succeeded": "succeeded"}.get(status, "failed")
    run_id = conn.execute(
        "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date, window_start,"
        " window_end, status, trigger, attempt, fence, idempotency_key, started_at, finished_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, 'schedule', 1, 1, %s, %s, %s) RETURNING id",
        (job.name, slot, partition, job.schedule.business_date(start), start, end, status, key, slot,
         slot + timedelta(seconds=1))).fetchone()[0]
    conn.execute("INSERT INTO runner.attempts (run_id, attempt, fence, trigger, owner_host, owner_pid,"
                 " owner_instance, lock_key, started_at, heartbeat_at, finished_at, status)"
                 " VALUES (%s, 1, 1, 'schedule', 'seed', 1, gen_random_uuid(), runner.lock_key_v1(21077, %s),"
                 " %s, %s, %s, %s)", (run_id, run_id, slot, slot, slot + timedelta(seconds=1), attempt_status))
    if effect is not None:
        confirmed = effect_status == "confirmed"
        conn.execute("INSERT INTO runner.effects (effect_key, run_id, job_name, partition_key, status, attempt,"
                     " fence, send_count, confirmed_by, confirmed_at)"
                     " VALUES (%s, %s, %s, %s, %s, 1, 1, 1, %s, %s)",
                     (effect, run_id, job.name, partition, effect_status, "send" if confirmed else None,
                      slot if confirmed else None))
    return int(run_id)


def decide_from(conn: Any, app: Runner, first: datetime, now: datetime) -> misfire.Decisions:
    """The late slots [first, now - grace] of ``late``, decided."""
    ledger.sync_jobs(conn, list(app.jobs.values()), now=T0 - 20 * MIN)
    job = app.jobs["late"]
    late = misfire.LateRange(first, job.schedule.latest_at_or_before(misfire.cutoff_for(job, now)))
    total = misfire.Decisions()
    while True:
        got = misfire.run_once(conn, job, now, late)
        for k, v in got.counts.items():
            total.counts[k] = total.counts.get(k, 0) + v
        if not got.more:
            return total


def by_slot(conn: Any) -> dict[tuple[datetime, str], tuple[str, str]]:
    return {(s, p): (a, st) for s, p, a, st in conn.execute(
        "SELECT d.schedule_slot, d.partition_key, d.action, r.status FROM runner.misfire_decisions d"
        " JOIN runner.job_runs r ON r.id = d.run_id").fetchall()}


def test_side_effects_hold_only_the_slots_whose_own_attempts_left_them_unknown(conn: Any) -> None:
    """Slot T0+1m's partition a ran and left an effect of unknown delivery; its partition b is
    late. Only that slot is held; the job's other unknown effects (a slot outside the range, a
    run pruned) and a confirmed one hold nothing: the other slots follow their tier."""
    app = tiered_app(partitions=["a", "b"], side_effects=True)
    job = app.jobs["late"]
    ledger.sync_jobs(conn, list(app.jobs.values()), now=T0 - 20 * MIN)
    seed_run(conn, job, T0 + MIN, "a", "dead", "late:T0+1m:a:mail")
    seed_run(conn, job, T0 + 2 * MIN, "a", "succeeded", "late:T0+2m:a:mail", "confirmed")
    seed_run(conn, job, T0 - 10 * MIN, "a", "dead", "late:T0-10m:a:mail", "sent")
    conn.execute("INSERT INTO runner.effects (effect_key, job_name, status, attempt, fence, send_count)"
                 " VALUES ('late:pruned:mail', 'late', 'unknown', 1, 1, 1)")
    counts = decide_from(conn, app, T0, T0 + 3 * MIN)
    assert counts.counts == {"awaiting_approval": 1, "pending": 3}
    assert by_slot(conn) == {
        (T0, "a"): ("catch_up", "pending"), (T0, "b"): ("catch_up", "pending"),
        (T0 + MIN, "b"): ("approve", "awaiting_approval"), (T0 + 2 * MIN, "b"): ("catch_up", "pending")}
    reasons = dict(conn.execute("SELECT action, reason FROM runner.misfire_decisions").fetchall())
    assert ("side effects not checked for this slot: 1 effect(s) of its earlier attempts of unknown delivery"
            " (e.g. 'late:T0+1m:a:mail'): resolve them, then runner approve") in reasons["approve"]
    assert "side effects checked (no effect of unknown delivery left by this slot's attempts)" in reasons["catch_up"]
    assert scalar_of(conn, "SELECT count(*) FROM runner.alerts WHERE kind = 'misfire_tier'") == 1


def test_side_effects_of_a_run_with_the_slots_key_hold_it(conn: Any) -> None:
    """Slots of one hour share their window (and so their idempotency key): an unknown effect
    of the hour's earlier run holds every late slot of that hour, not the next hour's."""
    def hourly(slot: datetime) -> tuple[datetime, datetime]:
        start = slot.replace(minute=0, second=0, microsecond=0)
        return start, start + timedelta(hours=1)

    app = tiered_app(("1d", "catch_up"), (None, "approve"), every="20m", window=hourly, side_effects=True)
    job = app.jobs["late"]
    ledger.sync_jobs(conn, list(app.jobs.values()), now=T0 - 20 * MIN)
    seed_run(conn, job, T0 - 20 * MIN, "", "dead", "late:hour-2:mail")  # window [T0 - 1h, T0): none late
    seed_run(conn, job, T0 + 40 * MIN, "", "dead", "late:hour-3:mail")  # window [T0, T0 + 1h)
    counts = decide_from(conn, app, T0, T0 + 90 * MIN)  # T0, +20m (the hour's); +60m, +80m (the next)
    assert counts.counts == {"awaiting_approval": 2, "pending": 2}
    assert {s: a for (s, _), (a, _) in by_slot(conn).items()} == {
        T0: "approve", T0 + 20 * MIN: "approve", T0 + 60 * MIN: "catch_up", T0 + 80 * MIN: "catch_up"}


def test_a_coalesce_tier_runs_at_the_newest_slot_not_held(conn: Any) -> None:
    """30 minutes missed: coalesced. The newest late slot is held for its own effect, so the
    run that covers the range is the slot before it."""
    app = tiered_app(partitions=["a", "b"], side_effects=True)
    job = app.jobs["late"]
    ledger.sync_jobs(conn, list(app.jobs.values()), now=T0 - 20 * MIN)
    seed_run(conn, job, T0 + 29 * MIN, "a", "dead", "late:T0+29m:a:mail")
    counts = decide_from(conn, app, T0, T0 + 30 * MIN)
    assert counts.counts == {"awaiting_approval": 1, "pending": 2, "coalesced": 56}
    got = by_slot(conn)
    assert got[(T0 + 29 * MIN, "b")] == ("approve", "awaiting_approval")
    assert got[(T0 + 28 * MIN, "a")] == ("coalesce", "pending") == got[(T0 + 28 * MIN, "b")]
    assert conn.execute("SELECT DISTINCT coalesced_into_slot FROM runner.job_runs WHERE status = 'coalesced'"
                        ).fetchall() == [(T0 + 28 * MIN,)]
    assert conn.execute("SELECT min(window_start) FROM runner.job_runs WHERE schedule_slot = %s",
                        (T0 + 28 * MIN,)).fetchone()[0] == T0 - MIN  # it covers the range from its start


def test_side_effects_checked_clean_let_the_tier_apply(conn: Any) -> None:
    conn.execute("SELECT 1")
    counts = decide(conn, tiered_app(side_effects=True), T0 + 3 * MIN)
    assert counts.counts == {"pending": 3}
    reason = scalar_of(conn, "SELECT reason FROM runner.misfire_decisions LIMIT 1")
    assert "side effects checked (no effect of unknown delivery left by this slot's attempts)" in reason


# -- a backfill tier's pause condition, when its plan is made ---------------------------------


@pytest.mark.parametrize(("condition", "roles", "status", "cause"), [
    ("SELECT true", True, "paused", "condition"),
    ("SELECT false", True, "running", None),
    ("SELECT true", False, "paused", "condition_error"),  # before sql/roles.sql: the function refuses
])
def test_a_backfill_tiers_pause_condition_is_evaluated_when_its_plan_is_made(
        db_url: str, db_roles: Any, condition: str, roles: bool, status: str, cause: str | None) -> None:
    if roles:
        db_roles.apply(db_url)
    app = tiered_app(("5m", "catch_up"), ("1h", "coalesce"), ("24h", "backfill", {"pause_when": condition}),
                     (None, "approve"))
    with psycopg.connect(db_url, autocommit=True) as c:
        decide(c, app, T0 + 2 * 60 * MIN)
        plan = c.execute("SELECT status, pause_cause, pauses, pause_reason, paused_at = created_at,"
                         " pause_checked_at = created_at FROM runner.backfills").fetchall()
    assert len(plan) == 1 and plan[0][:2] == (status, cause)
    if status == "paused":
        # paused in the transaction that made it (one timestamp), counted like every pause
        assert plan[0][2] == {cause: 1} and plan[0][4] is True and plan[0][5] is True
        assert plan[0][3].startswith("pause_when returned true when the plan was created" if cause == "condition"
                                     else "pause_when failed when the plan was created: ")
    else:
        assert plan[0][2] == {} and plan[0][3] is None


# -- real runner start processes --------------------------------------------------------------


def _base(db_url: str) -> dict[str, str]:
    return {"TIERS_BASE": scalar(db_url, "SELECT now()").astimezone(UTC).isoformat()}


def test_real_runner_applies_each_tier_and_runs_the_held_slots_only_once_approved(
        db_url: str, tmp_path: Path) -> None:
    env = _base(db_url)
    proc = RunnerProcess(f"{TIER_APPS}:outages_app", db_url, "--poll-interval", "0.2", env=env,
                         log=tmp_path / "runner.log")
    try:
        def decided() -> bool:
            by_job = dict(rows(db_url, "SELECT job_name, array_agg(DISTINCT tier ORDER BY tier)"
                                       " FROM runner.misfire_decisions GROUP BY 1"))
            done = scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name IN ('recent', 'hour')"
                                  " AND trigger = 'catch_up' AND status NOT IN ('succeeded', 'coalesced')")
            return by_job.get("day-plus") == ["approve"] and by_job.get("hour") == ["coalesce"] \
                and by_job.get("recent") == ["catch_up"] and done == 0
        eventually(decided, timeout=60, message="every outage decided by its tier, the runs done")
        # 3 minutes of 10 s slots: each caught up; 30 minutes: one run covers them
        assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'recent'"
                              " AND trigger = 'catch_up' AND status = 'succeeded'") >= 17
        assert rows(db_url, "SELECT status, count(*) FROM runner.job_runs WHERE job_name = 'hour'"
                            " AND trigger = 'catch_up' GROUP BY 1 ORDER BY 1")[-1] == ("succeeded", 1)
        # over 24 hours: nothing ran, the owner is alerted
        held = rows(db_url, "SELECT min(schedule_slot), max(schedule_slot), count(*) FROM runner.job_runs"
                            " WHERE job_name = 'day-plus' AND status = 'awaiting_approval'")[0]
        assert held[2] >= 25
        assert scalar(db_url, "SELECT count(*) FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id"
                              " WHERE r.job_name = 'day-plus'") == 0
        assert rows(db_url, "SELECT owner FROM runner.alerts WHERE kind = 'misfire_tier'") == [("settlement-platform",)]
        shown = run_cli("runs", "--job", "day-plus", "--limit", "3", url=db_url)
        assert shown.returncode == 0 and "misfire_tier" in shown.stdout and "approve" in shown.stdout, shown.stdout
        status = run_cli("status", url=db_url)
        assert "misfire_tier" in status.stdout and "settlement-platform" in status.stdout, status.stdout
        out = run_cli("approve", "day-plus", "--from", held[0].isoformat(),
                      "--to", (held[1] + US).isoformat(), "--reason", "upstream is back", "--yes", url=db_url)
        assert out.returncode == 0, out.stderr
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'day-plus'"
                                          " AND status = 'succeeded' AND trigger = 'manual'") == held[2],
                   timeout=30, message="the approved runs ran")
    finally:
        assert proc.terminate() == 0, proc.output()
    # each approved slot ran once, and the alert is gone
    assert rows(db_url, "SELECT count(*), count(DISTINCT a.run_id) FROM runner.attempts a"
                        " JOIN runner.job_runs r ON r.id = a.run_id WHERE r.job_name = 'day-plus'") == [(held[2], held[2])]
    assert scalar(db_url, "SELECT count(*) FROM runner.alerts WHERE kind = 'misfire_tier'") == 0
    assert_ledger_clean(db_url)


def test_two_runners_back_after_a_two_hour_outage_make_one_plan(db_url: str, tmp_path: Path) -> None:
    env = _base(db_url)
    procs = [RunnerProcess(f"{TIER_APPS}:backfill_app", db_url, "--poll-interval", "0.2", env=env,
                           log=tmp_path / f"runner-{i}.log") for i in range(2)]
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL") == 2,
                   timeout=30, message="both runners up")
        eventually(lambda: scalar(db_url, "SELECT status FROM runner.backfills") == "completed", timeout=60,
                   message="the tier's plan ran to the end")
    finally:
        for p in procs:
            assert p.terminate() == 0, p.output()
    plans = rows(db_url, "SELECT id, lane, concurrency, requested_by, expected_runs FROM runner.backfills")
    assert len(plans) == 1 and plans[0][1:4] == ("correction", 4, "runner (misfire tier backfill)")
    assert plans[0][4] >= 23  # the 5-minute slots of the 2 hours (one may have been on time)
    assert rows(db_url, "SELECT action, who, db_user FROM runner.requests") == [
        ("backfill", "runner (misfire tier backfill)", "postgres")]
    # one run per slot, each started once, each decided by the tier
    assert scalar(db_url, "SELECT count(*) FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id"
                          " WHERE r.replay_group_id IS NOT NULL") == plans[0][4]
    assert scalar(db_url, "SELECT count(*) FROM runner.misfire_decisions WHERE backfill_id = %s",
                  (plans[0][0],)) == plans[0][4]
    assert scalar(db_url, "SELECT count(*) FROM runner.alerts WHERE kind = 'misfire_tier'") == 0
    assert_ledger_clean(db_url)


def test_real_runner_holds_only_the_slot_whose_attempts_left_effects_unknown(db_url: str, tmp_path: Path) -> None:
    """A job with side effects missed 6 minutes. Before the outage, slot S1 ran (both
    partitions) and left an unknown effect, slot S2's partition a left one, slot S3's a
    confirmed one. The runner that comes back holds S2's partition b alone; S3's and every
    other slot are caught up, though the job has two effects of unknown delivery."""
    from tests.apps.tiers import effects_app_for

    env = _base(db_url)
    base = datetime.fromisoformat(env["TIERS_BASE"])
    app = effects_app_for(base)
    job = app.jobs["mailer"]
    s1 = base.replace(second=0, microsecond=0) - 5 * MIN
    s2, s3 = s1 + 2 * MIN, s1 + 3 * MIN
    with psycopg.connect(db_url, autocommit=True) as c:
        ledger.sync_jobs(c, [job])
        seed_run(c, job, s1, "a", "dead", "mail:s1:a")
        seed_run(c, job, s1, "b", "succeeded")
        seed_run(c, job, s2, "a", "dead", "mail:s2:a")
        seed_run(c, job, s3, "a", "succeeded", "mail:s3:a", "confirmed")
    proc = RunnerProcess(f"{TIER_APPS}:effects_app", db_url, "--poll-interval", "0.2", env=env,
                         log=tmp_path / "runner.log")
    try:
        # the downtime is the slots up to s3 + 1 min (over a minute late whenever the runner
        # starts); a slot falling due while the test runs may be late too, and is not judged here
        last = s3 + MIN

        def caught_up() -> bool:
            # in this order: the downtime's first and last slots decided, then every decided run
            # of the downtime done (a decision made between two reads would otherwise slip by)
            return scalar(db_url, "SELECT count(*) FROM runner.misfire_decisions WHERE schedule_slot = %s",
                          (s1 + MIN,)) == 2 \
                and scalar(db_url, "SELECT count(*) FROM runner.misfire_decisions WHERE schedule_slot = %s",
                           (last,)) == 2 \
                and scalar(db_url, "SELECT count(*) FROM runner.misfire_decisions d JOIN runner.job_runs r"
                                   " ON r.id = d.run_id WHERE r.status NOT IN ('succeeded', 'awaiting_approval')"
                                   " AND d.schedule_slot <= %s", (last,)) == 0
        eventually(caught_up, timeout=40, message="the downtime decided and caught up")
    finally:
        assert proc.terminate() == 0, proc.output()
    got = rows(db_url, "SELECT d.schedule_slot, d.partition_key, d.action, r.status, d.reason"
                       " FROM runner.misfire_decisions d JOIN runner.job_runs r ON r.id = d.run_id"
                       " WHERE d.schedule_slot <= %s ORDER BY 1, 2", (last,))
    held = [(s, p) for s, p, action, _, _ in got if action == "approve"]
    assert held == [(s2, "b")]
    assert {(a, st) for s, p, a, st, _ in got if (s, p) != (s2, "b")} == {("catch_up", "succeeded")}, [(str(s), p, a, st) for s, p, a, st, _ in got]
    assert (s3, "b") in {(s, p) for s, p, *_ in got} and (s1 + MIN, "a") in {(s, p) for s, p, *_ in got}
    reasons = {(s, p): reason for s, p, _, _, reason in got}
    assert "side effects not checked for this slot: 1 effect(s) of its earlier attempts of unknown delivery " \
           "(e.g. 'mail:s2:a')" in reasons[(s2, "b")]
    assert "side effects checked (no effect of unknown delivery left by this slot's attempts)" in reasons[(s3, "b")]
    assert scalar(db_url, "SELECT count(*) FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id"
                          " WHERE r.schedule_slot = %s AND r.partition_key = 'b'", (s2,)) == 0
    assert_ledger_clean(db_url)


def test_real_runner_makes_a_tier_plan_paused_when_its_condition_holds(
        db_url: str, db_roles: Any, tmp_path: Path) -> None:
    """Two hours missed, an incident open: the backfill tier's plan is made paused (cause
    condition, in the transaction that made it), nothing of it runs; once the incident is
    closed and the plan resumed, it runs to the end."""
    db_roles.apply(db_url)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE tiers_incident (id int)")
        c.execute("INSERT INTO tiers_incident VALUES (1)")
        c.execute(f"GRANT SELECT ON tiers_incident TO {db_roles.groups['condition']}")
    env = _base(db_url)
    proc = RunnerProcess(f"{TIER_APPS}:paused_app", db_url, "--poll-interval", "0.2", env=env,
                         log=tmp_path / "runner.log")
    try:
        plan = eventually(lambda: rows(db_url, "SELECT id, status, pause_cause, pauses, pause_reason,"
                                               " paused_at = created_at FROM runner.backfills"), timeout=30,
                          message="the tier's plan made")[0]
        assert plan[1:] == ("paused", "condition", {"condition": 1},
                            "pause_when returned true when the plan was created", True)
        # the runner goes on (live slots on time) and starts nothing of the paused plan
        made = scalar(db_url, "SELECT created_at FROM runner.backfills")
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'beat'"
                                          " AND status = 'succeeded' AND schedule_slot > %s", (made,)) >= 3,
                   timeout=15, message="live slots after the plan was made")
        assert scalar(db_url, "SELECT count(*) FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id"
                              " WHERE r.trigger = 'backfill'") == 0
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("DELETE FROM tiers_incident")
        out = run_cli("backfill", "resume", str(plan[0]), "--reason", "incident closed", "--yes", url=db_url)
        assert out.returncode == 0, out.stderr
        eventually(lambda: scalar(db_url, "SELECT status FROM runner.backfills") == "completed", timeout=30,
                   message="the resumed plan ran to the end")
    finally:
        assert proc.terminate() == 0, proc.output()
    assert scalar(db_url, "SELECT pauses FROM runner.backfills") == {"condition": 1}
    assert_ledger_clean(db_url)
