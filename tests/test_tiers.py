"""Misfire tiers (runner/tiers.py): the tier is chosen by how long the job was missing, each
decided slot records its tier and why, a backfill tier makes one audited plan however many
runners decide, an approval tier runs nothing before a person approves."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner import JobDefinitionError, Runner, ledger, misfire, tiers
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


def test_side_effects_of_unknown_delivery_hold_the_range(conn: Any) -> None:
    app = tiered_app(side_effects=True)
    ledger.sync_jobs(conn, list(app.jobs.values()), now=T0 - MIN)
    conn.execute("INSERT INTO runner.effects (effect_key, job_name, status, attempt, fence, send_count)"
                 " VALUES ('late:mail', 'late', 'unknown', 1, 1, 1)")
    counts = decide(conn, app, T0 + 3 * MIN)
    assert counts.counts == {"awaiting_approval": 3}
    assert decisions(conn) == [("catch_up", "approve", 3, 3 * MIN, 1)]
    reason = scalar_of(conn, "SELECT reason FROM runner.misfire_decisions LIMIT 1")
    assert "side effects not checked: 1 effect(s) of the job of unknown delivery (e.g. 'late:mail')" in reason
    assert scalar_of(conn, "SELECT count(*) FROM runner.alerts WHERE kind = 'misfire_tier'") == 1


def test_side_effects_checked_clean_let_the_tier_apply(conn: Any) -> None:
    conn.execute("SELECT 1")
    counts = decide(conn, tiered_app(side_effects=True), T0 + 3 * MIN)
    assert counts.counts == {"pending": 3}
    reason = scalar_of(conn, "SELECT reason FROM runner.misfire_decisions LIMIT 1")
    assert "side effects checked (no effect of unknown delivery)" in reason


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
