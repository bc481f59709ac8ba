"""The gap scan, runner.missing_slots: every expected slot (x partition) in a job's tracked range
that no run accounts for, judged by the schedule then in force, listed with its state; the
watermarks that keep its cost independent of the ledger's age; `runner gaps`; and slots missed
while no runner was alive, end to end."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner import Runner
from runner.model.schedule import parse_schedule
from runner.store import ledger
from tests.support import RunnerProcess, eventually, executed_plans, plan_nodes, rows, run_cli, scalar

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
US = timedelta(microseconds=1)
ACCOUNTED = ("succeeded", "skipped", "coalesced", "cancelled")
UNACCOUNTED = ("pending", "running", "failed", "dead", "awaiting_approval")

Gap = tuple[str, datetime, str | None, str]  # job, slot (UTC), partition, state


def sync(conn: psycopg.Connection[Any], now: datetime | None = None, **jobs: dict[str, Any]) -> None:
    """Register jobs (name -> @app.job keyword arguments) as a runner start would."""
    app = Runner()
    for name, kw in jobs.items():
        app.job(name, **kw)(lambda ctx: None)
    if not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        # open the fixture's transaction first: sync_jobs' own conn.transaction() would
        # otherwise be a top-level one and commit
        conn.execute("SELECT 1")
    ledger.sync_jobs(conn, list(app.jobs.values()), now=now)


RUN = ("INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date,"
       " window_start, window_end, status, trigger, attempt, fence, idempotency_key, started_at)"
       " VALUES (%s, %s, %s, %s, %s, %s, %s, 'schedule', 1, 1, %s, %s) RETURNING id")
ATTEMPT = ("INSERT INTO runner.attempts (run_id, attempt, fence, trigger, owner_host, owner_pid,"
           " owner_instance, lock_key, started_at, heartbeat_at)"
           " VALUES (%s, 1, 1, 'schedule', 'host', 1, gen_random_uuid(), 0, %s, %s)")


def make_run(conn: psycopg.Connection[Any], job: str, slot: datetime, partition: str = "",
             status: str = "succeeded", heartbeat_at: datetime | None = None,
             started_at: datetime | None = None) -> int:
    """A run in any status; a running one gets its attempt row with ``heartbeat_at``."""
    (run_id,) = make_runs(conn, [(job, slot, partition, status)], heartbeat_at, started_at)
    return run_id


def make_runs(conn: psycopg.Connection[Any], runs: list[tuple[str, datetime, str, str]],
              heartbeat_at: datetime | None = None, started_at: datetime | None = None) -> list[int]:
    """make_run for each (job, slot, partition, status), in one pipeline of statements
    (executemany) rather than a round trip each; their ids in order."""
    if not runs:
        return []
    with conn.cursor() as cur:
        cur.executemany(RUN, [(job, slot, key, slot.date(), slot, slot, status, f"{job}|{slot}|{key}",
                               started_at or slot) for job, slot, key, status in runs], returning=True)
        ids = []
        while True:
            row = cur.fetchone()
            assert row is not None
            ids.append(int(row[0]))
            if not cur.nextset():
                break
        running = [(run_id, started_at or slot, heartbeat_at or slot)
                   for run_id, (_, slot, _, status) in zip(ids, runs, strict=True) if status == "running"]
        if running:
            cur.executemany(ATTEMPT, running)
    return ids


def gaps(conn: psycopg.Connection[Any], as_of: datetime, job: str | None = None) -> set[Gap]:
    found = conn.execute(
        "SELECT job_name, schedule_slot, partition_key, state FROM runner.missing_slots_v1(%s, %s)",
        (as_of, job)).fetchall()
    listed = [(j, s.astimezone(UTC), p, state) for j, s, p, state in found]
    assert len(listed) == len(set(listed)), "a slot x partition listed twice"
    return set(listed)


def unwatermarked(conn: psycopg.Connection[Any], as_of: datetime, job: str | None = None) -> set[Gap]:
    """The answer computed from the whole tracked range (watermarks and holes set aside)."""
    with conn.transaction(force_rollback=True):
        conn.execute("DELETE FROM runner.gap_watermarks")
        conn.execute("DELETE FROM runner.gap_holes")
        return gaps(conn, as_of, job)


def advance(conn: psycopg.Connection[Any], as_of: datetime | None = None) -> int:
    row = conn.execute("SELECT runner.advance_watermarks_v1(%s)", (as_of,)).fetchone()
    assert row is not None
    return int(row[0])


def bounded(conn: psycopg.Connection[Any], as_of: datetime | None, span: timedelta | None,
            probes: int | None = None, tidy: bool = True) -> tuple[int, int]:
    """One call of runner.advance_watermarks_v3: (moved, behind)."""
    row = conn.execute("SELECT moved, behind FROM runner.advance_watermarks_v3(%s, %s, %s, %s)",
                       (as_of, span, probes, tidy)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def watermark(conn: psycopg.Connection[Any], job: str) -> datetime | None:
    row = conn.execute("SELECT complete_through FROM runner.gap_watermarks WHERE job_name = %s", (job,)).fetchone()
    return None if row is None or row[0] is None else row[0].astimezone(UTC)


def scalar_in(conn: psycopg.Connection[Any], sql: str, *params: Any) -> Any:
    row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


def rows_in(conn: psycopg.Connection[Any], sql: str) -> list[Any]:
    return [r[0].astimezone(UTC) if isinstance(r[0], datetime) else r[0]
            for r in conn.execute(sql + " ORDER BY 1").fetchall()]


def every(spec: str, start: datetime, end: datetime) -> list[datetime]:
    return parse_schedule(every=spec).slots_between(start, end)


def never_started(job: str, slots: Iterable[datetime], partitions: Iterable[str | None] = ("",)) -> set[Gap]:
    return {(job, s, p, "never_started") for s in slots for p in partitions}


# --------------------------------------------------------------------------------------------
# what is expected


def test_slots_missed_while_no_runner_was_alive_are_listed_as_never_started(
        tx: psycopg.Connection[Any]) -> None:
    row = tx.execute("SELECT now()").fetchone()
    assert row is not None
    now = row[0].astimezone(UTC)
    since = now - timedelta(minutes=30)
    sync(tx, gap_rollup={"cron": "*/5 * * * *", "timezone": "Asia/Seoul", "track_from": since},
         gap_tick={"every": "1m", "partitions": ["a", "b"], "track_from": since})
    listed = tx.execute(
        "SELECT job_name, schedule_slot, partition_key, state, run_id, lateness, paused"
        " FROM runner.missing_slots WHERE job_name LIKE 'gap\\_%%'").fetchall()
    rollup = parse_schedule(cron="*/5 * * * *", timezone="Asia/Seoul").slots_between(since - US, now)
    tick = every("1m", since - US, now)
    assert len(rollup) >= 6 and len(tick) >= 30
    assert {(j, s.astimezone(UTC), p, st) for j, s, p, st, *_ in listed} == (
        never_started("gap_rollup", rollup) | never_started("gap_tick", tick, ["a", "b"]))
    assert all(run_id is None and lateness == now - s and paused is False
               for _, s, _, _, run_id, lateness, paused in listed)


def test_accounted_runs_are_not_listed_and_the_others_show_their_state(tx: psycopg.Connection[Any]) -> None:
    sync(tx, now=T0, job={"every": "1m"})
    as_of = T0 + timedelta(minutes=20)
    slots = every("1m", T0 - US, as_of)
    statuses = [*ACCOUNTED, "failed", "dead", "awaiting_approval", "pending"]
    ids = {make_run(tx, "job", slot, status=status): (slot, status) for slot, status in zip(slots, statuses, strict=False)}
    fresh = make_run(tx, "job", slots[10], status="running", heartbeat_at=as_of - timedelta(seconds=5))
    stale = make_run(tx, "job", slots[11], status="running", heartbeat_at=as_of - timedelta(minutes=2))
    found = tx.execute("SELECT schedule_slot, state, run_id FROM runner.missing_slots_v1(%s, 'job')",
                       (as_of,)).fetchall()
    by_slot = {s.astimezone(UTC): (state, run_id) for s, state, run_id in found}
    for run_id, (slot, status) in ids.items():
        if status in ACCOUNTED:
            assert slot not in by_slot, status
        else:
            assert by_slot[slot] == (status, run_id)
    assert by_slot[slots[10]] == ("running", fresh)
    assert by_slot[slots[11]] == ("running_stale", stale)  # the synced lease is 60s
    assert {s for s, (state, _) in by_slot.items() if state == "never_started"} == {*slots[8:10], *slots[12:]}


@pytest.mark.parametrize(("lease", "synced"), [(timedelta(seconds=60), True), (timedelta(minutes=5), False)])
def test_running_turns_stale_exactly_past_the_lease(tx: psycopg.Connection[Any], lease: timedelta,
                                                    synced: bool) -> None:
    sync(tx, now=T0, job={"every": "1h"})  # the default lease, 60s, is synced as lease_seconds
    if not synced:  # a job synced without a lease: the documented 5 minutes
        tx.execute("UPDATE runner.jobs SET options = options - 'lease_seconds' WHERE job_name = 'job'")
    as_of = T0 + timedelta(hours=3)
    on_time = make_run(tx, "job", T0 + timedelta(hours=1), status="running", heartbeat_at=as_of - lease)
    late = make_run(tx, "job", T0 + timedelta(hours=2), status="running", heartbeat_at=as_of - lease - US)
    states = dict(tx.execute("SELECT run_id, state FROM runner.missing_slots_v1(%s, 'job')"
                             " WHERE run_id IS NOT NULL", (as_of,)).fetchall())
    assert states == {on_time: "running", late: "running_stale"}


def test_static_partitions_are_expected_per_slot(tx: psycopg.Connection[Any]) -> None:
    sync(tx, now=T0, job={"every": "10m", "partitions": ["a", "b", "c"]})
    as_of = T0 + timedelta(minutes=30)
    slots = every("10m", T0 - US, as_of)
    for slot in slots:
        make_run(tx, "job", slot, "a")
    dead = make_run(tx, "job", slots[0], "b", status="dead")
    assert gaps(tx, as_of) == ({("job", slots[0], "b", "dead")}
                               | never_started("job", slots[1:], ["b"]) | never_started("job", slots, ["c"]))
    assert scalar_in(tx, "SELECT count(*) FROM runner.missing_slots_v1(%s) WHERE run_id = %s", as_of, dead) == 1


def test_dynamic_partitions_show_once_until_fanned_out(tx: psycopg.Connection[Any]) -> None:
    sync(tx, now=T0, job={"every": "10m", "partitions": lambda slot: ["x", "y"]})
    as_of = T0 + timedelta(minutes=30)
    s0, s1, s2, s3 = every("10m", T0 - US, as_of)
    make_run(tx, "job", s1, "x")
    make_run(tx, "job", s1, "y", status="failed")
    make_run(tx, "job", s2, "x")
    make_run(tx, "job", s2, "y", status="skipped")
    assert gaps(tx, as_of) == ({("job", s1, "y", "failed")}
                               | never_started("job", [s0, s3], [None]))


def test_a_slot_exactly_at_now_is_expected_and_one_after_is_not(tx: psycopg.Connection[Any]) -> None:
    sync(tx, now=T0, job={"every": "1m", "track_from": T0})
    last = T0 + timedelta(minutes=5)
    assert gaps(tx, last) == never_started("job", [T0 + timedelta(minutes=i) for i in range(6)])
    assert gaps(tx, last - US) == never_started("job", [T0 + timedelta(minutes=i) for i in range(5)])


def test_the_tracked_range_starts_at_track_from_inclusive(tx: psycopg.Connection[Any]) -> None:
    sync(tx, now=T0, at={"every": "1m", "track_from": T0}, after={"every": "1m", "track_from": T0 + US})
    as_of = T0 + timedelta(minutes=1)
    assert gaps(tx, as_of) == (never_started("at", [T0, as_of]) | never_started("after", [as_of]))


def test_a_schedule_change_judges_each_slot_by_the_schedule_then_in_force(tx: psycopg.Connection[Any]) -> None:
    changed = T0 + timedelta(minutes=65)
    sync(tx, now=T0, job={"every": "10m"})
    sync(tx, now=changed, job={"cron": "*/15 * * * *", "timezone": "America/New_York", "partitions": ["p"]})
    as_of = T0 + timedelta(hours=2)
    old = every("10m", T0 - US, changed - US)
    new = parse_schedule(cron="*/15 * * * *").slots_between(changed - US, as_of)
    assert gaps(tx, as_of) == never_started("job", old) | never_started("job", new, ["p"])
    advance(tx, as_of)
    assert gaps(tx, as_of) == never_started("job", old) | never_started("job", new, ["p"])
    # Runs an old runner made by the old schedule after the change (a rolling deploy) are not
    # expected: done ones are ignored, one left dead is listed all the same (it needs a human).
    make_run(tx, "job", T0 + timedelta(minutes=70), status="succeeded")
    make_run(tx, "job", T0 + timedelta(minutes=80), status="dead")
    assert gaps(tx, as_of) == ({("job", T0 + timedelta(minutes=80), "", "dead")}
                               | never_started("job", old) | never_started("job", new, ["p"]))


def test_paused_jobs_are_listed_and_flagged(tx: psycopg.Connection[Any]) -> None:
    sync(tx, now=T0, job={"every": "1h", "paused": True})
    found = tx.execute("SELECT state, paused FROM runner.missing_slots_v1(%s, 'job')",
                       (T0 + timedelta(hours=2),)).fetchall()
    assert found == [("never_started", True)] * 3


# --------------------------------------------------------------------------------------------
# watermarks


def test_the_watermark_moves_and_old_slots_are_no_longer_expanded(tx: psycopg.Connection[Any]) -> None:
    sync(tx, now=T0, job={"every": "1m"})
    as_of = T0 + timedelta(minutes=10)
    slots = every("1m", T0 - US, as_of)
    for slot in slots[:5]:
        make_run(tx, "job", slot)
    before = gaps(tx, as_of)
    assert before == never_started("job", slots[5:])
    assert advance(tx, as_of) >= 1  # (other tests' jobs may share the database)
    assert advance(tx, as_of) == 0  # nothing left to move
    row = tx.execute("SELECT complete_through FROM runner.gap_watermarks WHERE job_name = 'job'").fetchone()
    assert row is not None and row[0] == as_of
    assert rows_in(tx, "SELECT schedule_slot FROM runner.gap_holes WHERE job_name = 'job'") == slots[5:]
    assert gaps(tx, as_of) == before
    # Below the watermark, accounted slots are not looked at again: a pruned succeeded run
    # does not come back as never started (it would without the watermark).
    tx.execute("DELETE FROM runner.job_runs WHERE job_name = 'job' AND schedule_slot = %s", (slots[0],))
    assert gaps(tx, as_of) == before
    assert ("job", slots[0], "", "never_started") in unwatermarked(tx, as_of)


def test_below_the_watermark_reopened_and_new_runs_show_at_once(tx: psycopg.Connection[Any]) -> None:
    sync(tx, now=T0, job={"every": "1m", "partitions": lambda slot: ["x"]})
    as_of = T0 + timedelta(minutes=10)
    slots = every("1m", T0 - US, as_of)
    done = {slot: make_run(tx, "job", slot, "x") for slot in slots[:8]}
    failing = make_run(tx, "job", slots[8], "x", status="failed")
    advance(tx, as_of)
    assert gaps(tx, as_of) == {("job", slots[8], "x", "failed")} | never_started("job", slots[9:], [None])
    # a rerun reopens a succeeded run; the failed one is out of attempts; a backfill runs a hole
    tx.execute("UPDATE runner.job_runs SET status = 'pending' WHERE id = %s", (done[slots[2]],))
    tx.execute("UPDATE runner.job_runs SET status = 'dead' WHERE id = %s", (failing,))
    make_run(tx, "job", slots[9], "x", status="running", heartbeat_at=as_of)
    make_run(tx, "job", slots[10], "x", status="succeeded")
    expected = {("job", slots[2], "x", "pending"), ("job", slots[8], "x", "dead"),
                ("job", slots[9], "x", "running")}
    assert gaps(tx, as_of) == expected == unwatermarked(tx, as_of)
    advance(tx, as_of + US)  # holes that got a run are forgotten
    assert scalar_in(tx, "SELECT count(*) FROM runner.gap_holes WHERE job_name = 'job'") == 0
    assert gaps(tx, as_of) == expected


def test_a_schedule_row_the_watermark_did_not_see_is_honoured(tx: psycopg.Connection[Any]) -> None:
    """A sync whose transaction started before an advance can commit a schedule change with a
    valid_from below the watermark: slots after that change are judged by it."""
    sync(tx, now=T0, job={"every": "10m"})
    as_of = T0 + timedelta(hours=1)
    advance(tx, as_of)
    change = T0 + timedelta(minutes=25)
    tx.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval,"
               " timezone, partitions) VALUES ('job', %s, 'every', '15 minutes', 'UTC', %s)",
               (change, ["p"]))
    expected = (never_started("job", every("10m", T0 - US, change - US))
                | never_started("job", every("15m", change - US, as_of), ["p"]))
    assert gaps(tx, as_of) == expected == unwatermarked(tx, as_of)
    advance(tx, as_of + US)
    assert gaps(tx, as_of) == expected


def test_moving_track_from_earlier_sets_the_watermark_aside(tx: psycopg.Connection[Any]) -> None:
    sync(tx, now=T0, job={"every": "10m"})
    as_of = T0 + timedelta(minutes=30)
    advance(tx, as_of)
    earlier = T0 - timedelta(minutes=20)
    sync(tx, now=T0 + timedelta(minutes=30), job={"every": "10m", "track_from": earlier})
    expected = never_started("job", every("10m", earlier - US, as_of))
    assert gaps(tx, as_of) == expected
    advance(tx, as_of + US)
    assert gaps(tx, as_of) == expected


STATUS_OR_NONE = st.sampled_from([None, None, *ACCOUNTED, *UNACCOUNTED])


@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_watermarks_never_change_the_answer(tx: psycopg.Connection[Any], data: st.DataObject) -> None:
    """Whatever the ledger and however often the watermarks move, the answer is the one
    computed from the whole tracked range; also after runs are reopened or added."""
    start = datetime(2024, 11, 2, 23, 0, tzinfo=UTC)  # New York falls back on 2024-11-03
    end = start + timedelta(hours=12)
    jobs = {
        "static": ({"every": "20m", "partitions": ["a", "b"]}, ["a", "b"]),
        "dynamic": ({"every": "30m", "partitions": lambda s: ["x"]}, ["x", "y"]),
        "cron": ({"cron": "*/30 0-3 * * *", "timezone": "America/New_York"}, [""]),
    }
    with tx.transaction(force_rollback=True):
        sync(tx, now=start, **{name: kw for name, (kw, _) in jobs.items()})
        drawn = []
        for name, (kw, keys) in jobs.items():
            sched = parse_schedule(every=kw.get("every"), cron=kw.get("cron"), timezone=kw.get("timezone"))
            for slot in sched.slots_between(start - US, end):
                for key in keys:
                    status = data.draw(STATUS_OR_NONE)
                    if status is not None:
                        drawn.append((name, slot, key, status))
        run_ids = make_runs(tx, drawn, heartbeat_at=end)
        marks = sorted(data.draw(st.lists(st.integers(0, 12 * 60), max_size=3)))
        for minute in marks:
            # uncapped (v1) or one bounded call (v2) that may stop anywhere short of the mark
            span = data.draw(st.sampled_from([None, None, 7, 60, 300]))
            probes = data.draw(st.sampled_from([None, None, 3, 40]))
            if span is None and probes is None:
                advance(tx, start + timedelta(minutes=minute))
            else:
                bounded(tx, start + timedelta(minutes=minute), span and timedelta(minutes=span), probes)
        cap = data.draw(st.sampled_from([None, None, None, 3, 40]))
        if cap is not None:
            # a whole catch-up to the end under a small probe cap, as the duty makes it: many
            # calls, each moving some jobs a little, until none is behind
            calls = 0
            while bounded(tx, end, None, cap)[1]:
                calls += 1
                assert calls < 1000
            if not marks and cap == 3:  # 12 hours of three jobs from no watermark at all
                assert calls > 10
        assert gaps(tx, end) == unwatermarked(tx, end)
        # reruns and backfills: runs change status, holes get runs; then maybe another advance
        for run_id in data.draw(st.lists(st.sampled_from(run_ids), max_size=5)) if run_ids else []:
            tx.execute("UPDATE runner.job_runs SET status = %s WHERE id = %s",
                       (data.draw(st.sampled_from([*ACCOUNTED, *UNACCOUNTED])), run_id))
        holes = sorted((j, s, p) for j, s, p, state in gaps(tx, end) if state == "never_started")
        for job, slot, key in data.draw(st.lists(st.sampled_from(holes), max_size=5, unique=True)) if holes else []:
            make_run(tx, job, slot, key or "x", status=data.draw(st.sampled_from([*ACCOUNTED, *UNACCOUNTED])),
                     heartbeat_at=end)
        assert gaps(tx, end) == unwatermarked(tx, end)
        if data.draw(st.booleans()):
            advance(tx, end - timedelta(minutes=data.draw(st.integers(0, 60))))
            assert gaps(tx, end) == unwatermarked(tx, end)


def test_a_bounded_advance_catches_up_a_long_history_over_several_calls(tx: psycopg.Connection[Any]) -> None:
    """Three days of a job every minute with two partitions, some runs missing or failed: with
    a 6-hour cap each call moves the watermark exactly 6 hours (from track_from), says the job
    is behind until the last (whose microsecond is not written), and after every call the gap scan answers what it answers with
    no watermark at all. At the end the holes are those of one uncapped advance."""
    sync(tx, now=T0, job={"every": "1m", "partitions": ["a", "b"]})
    as_of = T0 + timedelta(days=3)
    slots = every("1m", T0 - US, as_of)
    tx.execute("INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date,"
               " window_start, window_end, status, trigger, attempt, fence, idempotency_key, started_at)"
               " SELECT 'job', s, p, s::date, s, s, CASE WHEN k %% 97 = 0 THEN 'failed' ELSE 'succeeded' END,"
               " 'schedule', 1, 1, 'job|' || s || '|' || p, s"
               " FROM unnest(%s::timestamptz[]) WITH ORDINALITY AS u(s, k) CROSS JOIN unnest(ARRAY['a', 'b']) AS p"
               " WHERE NOT (k %% 31 = 0 AND p = 'a') AND k %% 53 <> 0", (slots,))
    expected = unwatermarked(tx, as_of)
    assert len(expected) > 100  # holes and failed runs in every 6-hour span
    calls = []
    filled = None
    while True:
        moved, behind = bounded(tx, as_of, timedelta(hours=6))
        calls.append((moved, behind, watermark(tx, "job")))
        assert gaps(tx, as_of) == expected
        if len(calls) == 3:  # a backfill runs a hole under the watermark mid-way
            filled = min(s for j, s, p, state in expected if state == "never_started")
            part = next(p for j, s, p, state in expected if state == "never_started" and s == filled)
            make_run(tx, "job", filled, part)
            expected = {g for g in expected if g[1:3] != (filled, part)}
            assert gaps(tx, as_of) == expected
        if not behind:
            break
        assert len(calls) < 20, calls
    # the hole that got a run is forgotten in the job's last step (cleanup; the view looked
    # for a run itself meanwhile)
    assert filled is not None and scalar_in(
        tx, "SELECT count(*) FROM runner.gap_holes WHERE job_name = 'job' AND schedule_slot = %s", filled) == 0
    marks = [m for _, _, m in calls]
    # the last call's step, one microsecond, is under the job's minute: its row is not written
    # (runner.advance_watermarks_v3 writes a row only when it moves by a step or more)
    assert marks == [min(as_of - US, T0 - US + timedelta(hours=6) * (i + 1)) for i in range(len(calls))]
    assert len(calls) == 13  # 12 spans of 6 hours from track_from - 1us, and the last microsecond
    assert [m for m, _, _ in calls] == [1] * 12 + [0]
    assert bounded(tx, as_of, timedelta(hours=6)) == (0, 0)  # nothing left to move
    holes = rows_in(tx, "SELECT schedule_slot || '|' || partition_key || '|' || whole_slot FROM runner.gap_holes"
                        " WHERE job_name = 'job'")
    with tx.transaction(force_rollback=True):
        tx.execute("DELETE FROM runner.gap_holes WHERE job_name = 'job'")
        tx.execute("DELETE FROM runner.gap_watermarks WHERE job_name = 'job'")
        advance(tx, as_of)
        assert rows_in(tx, "SELECT schedule_slot || '|' || partition_key || '|' || whole_slot FROM runner.gap_holes"
                           " WHERE job_name = 'job'") == holes


def test_a_bounded_advance_rejects_caps_that_are_not_positive(tx: psycopg.Connection[Any]) -> None:
    sync(tx, now=T0, job={"every": "1m"})
    before = rows_in(tx, "SELECT complete_through FROM runner.gap_watermarks")
    for span, probes, message in ((timedelta(0), None, "max_span must be a positive interval"),
                                  (timedelta(minutes=-5), None, "max_span must be a positive interval"),
                                  (None, 0, "max_probes must be a positive number"),
                                  (None, -10, "max_probes must be a positive number")):
        with tx.transaction(force_rollback=True), pytest.raises(psycopg.errors.InvalidParameterValue,
                                                                 match=message):
            bounded(tx, T0 + timedelta(hours=1), span, probes)
    assert rows_in(tx, "SELECT complete_through FROM runner.gap_watermarks") == before


def test_a_probe_budget_is_shared_by_water_filling_over_the_jobs_behind(db_url: str) -> None:
    """max_probes goes first to the jobs that need least (revision 0022_probes): an hourly job
    behind by 2 slots takes its 2 probes and is caught up; the rest share what is left evenly
    (298 / 3 probes each), turned into a span by each job's rate: a job every minute with 10
    partitions moves 596 s; a job whose share is less than one slot (250 partitions) still
    moves one slot; a second such job, whose turn would pass the budget, is not taken and stays
    behind. The answer is the same after the calls (read every 25th and at the end), and the
    calls catch everything up (to less than a step, a minute, from as_of: a last move shorter
    than that is not written): stepping without tidy as the loop's duty does, then one tidy
    call that moves nothing and leaves the answer as it was."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        start = T0
        # 250 partitions: more than the share (99.3) and 2 + 99.3 + 250 > 300, as 500 was, at
        # half the slot x partitions to expand and read
        sync(conn, now=start, dense={"every": "1m", "partitions": [f"p{i}" for i in range(10)]},
             sparse={"every": "1h"}, huge={"every": "1m", "partitions": [f"t{i}" for i in range(250)]},
             huge2={"every": "1m", "partitions": [f"u{i}" for i in range(250)]})
        as_of = start + timedelta(hours=2)
        expected = unwatermarked(conn, as_of)
        assert bounded(conn, as_of, None, 300) == (3, 3)
        assert watermark(conn, "sparse") == as_of
        # the level: the sparse job's 2 probes first, then (300 - 2) / 3 for each of the rest
        level_span = timedelta(seconds=(300 - 2) / 3 / (10 / 60))
        assert abs(watermark(conn, "dense") - (start - US + level_span)) < timedelta(milliseconds=1)  # type: ignore[operator]
        assert watermark(conn, "huge") == start - US + timedelta(minutes=1)  # one slot: 250 probes
        assert watermark(conn, "huge2") is None  # its turn comes after 2 + 99 + 250 probes > 300
        with conn.transaction():
            assert gaps(conn, as_of) == expected
        calls = 1
        while True:
            # (tidy off, as the duty steps: a tidy call re-probes every hole of each job already
            # at as_of, 30,000 per huge job here, on every call)
            moved, behind = bounded(conn, as_of, None, 300, tidy=False)
            calls += 1
            # (a call that only takes jobs the last seconds to as_of writes no row: less than a
            # step each, runner.advance_watermarks_v3)
            assert moved >= 1 or not behind
            # (the whole answer, 61,200 slot x partitions, every 25th call and at the end: read
            # after each call it made this the suite's longest test by minutes)
            if calls % 25 == 0 or not behind:
                with conn.transaction():
                    assert gaps(conn, as_of) == expected
            if not behind:
                break
            assert calls < 400
        # every job at as_of, but for less than its step (one minute) that no call wrote
        for job in ("dense", "sparse", "huge", "huge2"):
            mark = watermark(conn, job)
            assert mark is not None and as_of - timedelta(minutes=1) < mark <= as_of, (job, mark)
        assert bounded(conn, as_of, None, 300) == (0, 0)  # the tidy call: nothing to move
        with conn.transaction():
            assert gaps(conn, as_of) == expected


def test_a_cron_job_s_density_is_read_from_its_fields(db_url: str) -> None:
    """A cron every 15 minutes counts 4 slots an hour (not one a minute): with a budget of 12
    probes and nothing else behind, it moves 3 hours in one call."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        sync(conn, now=T0, quarter={"cron": "*/15 * * * *"})
        as_of = T0 + timedelta(hours=12)
        expected = unwatermarked(conn, as_of)
        assert bounded(conn, as_of, None, 12) == (1, 1)
        assert abs(watermark(conn, "quarter") - (T0 - US + timedelta(hours=3))) < timedelta(milliseconds=1)  # type: ignore[operator]
        with conn.transaction():
            assert gaps(conn, as_of) == expected


def test_holes_above_the_bounded_target_are_judged_when_their_slots_are_expanded(
        tx: psycopg.Connection[Any]) -> None:
    """A schedule change below the watermark sets it aside from the change on; a bounded call
    then judges only the holes up to its target, and each later call the next ones: the holes
    end as one uncapped advance leaves them, the answer unchanged throughout."""
    sync(tx, now=T0, job={"every": "10m", "partitions": ["a", "b", "c"]})
    as_of = T0 + timedelta(hours=12)
    slots = every("10m", T0 - US, as_of)
    for slot in slots[::3]:
        make_run(tx, "job", slot, "a")
    advance(tx, as_of)
    change = T0 + timedelta(hours=2)
    tx.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval,"
               " timezone, partitions) VALUES ('job', %s, 'every', '20 minutes', 'UTC', %s)", (change, ["b"]))
    expected = unwatermarked(tx, as_of)
    assert gaps(tx, as_of) == expected
    marks = []
    while True:
        _, behind = bounded(tx, as_of, timedelta(hours=3))
        marks.append(watermark(tx, "job"))
        assert gaps(tx, as_of) == expected
        # holes at or below the watermark are exactly the expected never-started slots there
        below = {(s.astimezone(UTC), p or None) for s, p, w in tx.execute(
            "SELECT schedule_slot, CASE WHEN whole_slot THEN NULL ELSE partition_key END, whole_slot"
            " FROM runner.gap_holes WHERE job_name = 'job' AND schedule_slot <= %s", (marks[-1],)).fetchall()}
        assert below == {(s, p) for j, s, p, st_ in expected if st_ == "never_started" and s <= marks[-1]}
        if not behind:
            break
    assert marks[0] == change - US + timedelta(hours=3)
    assert marks[-1] == as_of and len(marks) == 4


def test_the_duty_catches_up_in_short_calls_and_stops_when_asked(db_url: str) -> None:
    """runner/worker/gapscan.py's Advancer, on an autocommit connection as the loop gives it: a job
    tracked from 20 days ago is caught up over several calls (each its own transaction), the
    budget it learned kept; with its stop event set it makes one call and returns, the scan
    still correct."""
    from runner.worker import gapscan
    with psycopg.connect(db_url, autocommit=True) as conn:
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        sync(conn, now=now - timedelta(days=20), late={"every": "1h", "track_from": now - timedelta(days=20)},
             other={"every": "1h", "track_from": now - timedelta(days=20)})
        stopped = threading.Event()
        stopped.set()
        # two hourly jobs: a budget of 48 probes is 24 of each, 24 hours
        first = gapscan.Advancer(stopped, budget=48, target=60.0)
        first(conn)
        assert first.calls == 1
        mark = watermark(conn, "late")
        assert mark is not None and mark < now - timedelta(days=18)
        with conn.transaction():
            assert gaps(conn, now) == unwatermarked(conn, now)
        # a backfill runs the first hole under the watermark; steps without tidy keep its row
        hole = conn.execute("SELECT min(schedule_slot) FROM runner.gap_holes WHERE job_name = 'late'").fetchone()[0]  # type: ignore[index]
        make_run(conn, "late", hole)
        gapscan.run_once(conn, 48, tidy=False)
        assert scalar_in(conn, "SELECT count(*) FROM runner.gap_holes WHERE job_name = 'late' AND schedule_slot = %s",
                         hole) == 1
        duty = gapscan.Advancer(threading.Event(), budget=96, target=60.0)
        duty(conn)
        # quick calls double the budget: 48, 96, 192, then 384 hours: 4 calls over the 18 days
        # left, and the tidy one that forgets the filled hole
        assert duty.calls == 5 and duty.budget == 768
        assert scalar_in(conn, "SELECT count(*) FROM runner.gap_holes WHERE job_name = 'late' AND schedule_slot = %s",
                         hole) == 0
        assert bounded(conn, None, timedelta(minutes=1))[1] == 0  # caught up: nothing behind
        assert watermark(conn, "late") >= now  # type: ignore[operator]
        with conn.transaction():
            assert gaps(conn, now) == unwatermarked(conn, now)
        slow = gapscan.Advancer(threading.Event(), budget=4000, target=0.0)
        slow(conn)  # every step "too slow": the budget halves, never below the minimum
        assert slow.calls == 2 and slow.budget == 2000  # one step (caught up already), the tidy call
        slow.budget = gapscan.MIN_BUDGET
        slow(conn)
        assert slow.budget == gapscan.MIN_BUDGET


def test_advance_is_safe_from_several_processes_at_once(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        sync(conn, **{f"j{i}": {"every": "1s", "track_from": now - timedelta(minutes=2)} for i in range(5)})
        advance(conn)
    holder = psycopg.connect(db_url)
    try:
        advance(holder)  # its transaction keeps every watermark row locked
        with psycopg.connect(db_url, autocommit=True) as other:
            other.execute("SET statement_timeout = '5s'")
            assert advance(other) == 0  # skips locked jobs instead of waiting
            # and so does a bounded call, with no job of its own to share the budget among
            # (its even share once divided by zero: the duty failed beside a second runner)
            assert bounded(other, None, None, 1000) == (0, 0)
            assert bounded(other, None, timedelta(hours=1), 1000) == (0, 0)
        holder.commit()
    finally:
        holder.close()

    errors: list[BaseException] = []
    stop = threading.Event()

    def advancing() -> None:
        try:
            with psycopg.connect(db_url, autocommit=True) as conn:
                while not stop.is_set():
                    advance(conn)
        except BaseException as exc:  # reported below
            errors.append(exc)

    def writing() -> None:
        try:
            with psycopg.connect(db_url, autocommit=True) as conn:
                for k, slot in enumerate(every("1s", now - timedelta(minutes=2) - US, now)):
                    make_run(conn, f"j{k % 5}", slot, status=("succeeded", "failed", "dead")[k % 3])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=advancing) for _ in range(4)]
    for t in threads:
        t.start()
    writing()
    stop.set()
    for t in threads:
        t.join(30)
    assert errors == []
    with psycopg.connect(db_url, autocommit=True) as conn:
        as_of = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        advance(conn)
        with conn.transaction():
            assert gaps(conn, as_of) == unwatermarked(conn, as_of)


def test_a_second_call_never_waits_for_the_first_s_new_watermark_rows(db_url: str) -> None:
    """Two runners' first calls at once (issue 32: 42 s of a call waiting during a 100,000-run
    slot): the first creates the new jobs' watermark rows and holds its transaction open; the
    second neither waits for it nor moves those jobs (the first does), and returns at once."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        sync(conn, **{f"j{i}": {"every": "1s", "track_from": now - timedelta(minutes=1)} for i in range(3)})
    first = psycopg.connect(db_url)
    try:
        assert bounded(first, None, None, 1000)[0] == 3  # rows created, its transaction open
        with psycopg.connect(db_url, autocommit=True) as second:
            second.execute("SET statement_timeout = '20s'")  # a wait is the whole first transaction
            assert bounded(second, None, None, 1000) == (0, 0)
            assert second.execute("SHOW lock_timeout").fetchone() == ("0",)  # its own setting back
        first.commit()
    finally:
        first.close()


def test_a_job_caught_up_keeps_its_watermark_row_until_it_moves_a_step(db_url: str) -> None:
    """The duty calls the advance back to back in a catch-up and every interval after: a job
    at as_of but for less than its step (10 minutes here, a minute for a cron) keeps its row as
    it is (no new row version: 528,000 dead ones after one 10M-run catch-up when every call
    rewrote every row), and the answer is the same; once a step has passed, the row moves."""
    with psycopg.connect(db_url, autocommit=True) as conn:  # each call its own transaction
        sync(conn, now=T0, job={"every": "10m"}, cron={"cron": "*/5 * * * *"})
        as_of = T0 + timedelta(hours=1)
        bounded(conn, as_of, None, 1000)

        def versions() -> dict[str, str]:
            return dict(conn.execute("SELECT job_name, xmin::text FROM runner.gap_watermarks").fetchall())

        written = versions()
        for seconds in (1, 30, 59):
            later = as_of + timedelta(seconds=seconds)
            assert bounded(conn, later, None, 1000) == (0, 0)
            assert versions() == written
            assert watermark(conn, "job") == as_of and watermark(conn, "cron") == as_of
            with conn.transaction():
                assert gaps(conn, later) == unwatermarked(conn, later)
        assert bounded(conn, as_of + timedelta(minutes=1), None, 1000) == (1, 0)  # the cron's step
        assert watermark(conn, "cron") == as_of + timedelta(minutes=1) and watermark(conn, "job") == as_of
        assert versions()["job"] == written["job"]
        assert bounded(conn, as_of + timedelta(minutes=10), None, 1000) == (2, 0)
        assert watermark(conn, "job") == as_of + timedelta(minutes=10)


def test_each_cron_is_parsed_once_per_call(tx: psycopg.Connection[Any]) -> None:
    """The watermark advance parses each distinct cron of its jobs once per call, not once for
    the job's density and again for each expansion (issue 32: 1,000 parses a call for 500 cron
    jobs, most of a short call's fixed part)."""
    sync(tx, now=T0, a={"cron": "*/5 * * * *"}, b={"cron": "*/5 * * * *"}, c={"cron": "0 * * * *"},
         d={"every": "1m"})
    tx.execute("SET LOCAL track_functions = 'all'")
    bounded(tx, T0 + timedelta(days=2), timedelta(hours=6), None)
    calls = scalar_in(tx, "SELECT pg_stat_get_xact_function_calls('runner.cron_spec_v1(text)'::regprocedure)")
    assert calls == 2


def test_slots_coalesced_into_a_dead_or_held_cover_are_reached_from_the_covers(db_url: str) -> None:
    """The gap scan's branch for runs coalesced into a cover that is dead or awaiting approval
    starts from the covers (job_runs_unaccounted) and seeks each cover's coalesced runs by its
    whole key in job_runs_coalesced_into: it reads the coalesced runs it lists, not every
    coalesced run of the ledger (commit 08dcdb4's plain join did, ANDed with the whole of
    job_runs_slot_order: 96,629 buffers read on a 10M-run ledger). Read from the function's
    own plan (auto_explain, nested, with actual rows), on a ledger of 4,000 runs coalesced into
    2,000 covers of which three are dead or held."""
    slots = 6000
    as_of = T0 + timedelta(minutes=slots - 1)  # the last slot's instant
    held = {T0 + timedelta(minutes=m): status
            for m, status in ((2, "dead"), (3002, "dead"), (5999, "awaiting_approval"))}
    with psycopg.connect(db_url, autocommit=True) as conn:
        sync(conn, now=T0, j={"every": "1m", "track_from": T0})
        # every third slot a cover that succeeded, the two before it coalesced into it
        conn.execute(
            "INSERT INTO runner.job_runs (job_name, schedule_slot, business_date, window_start, window_end,"
            " status, trigger, attempt, fence, idempotency_key, coalesced_into_slot, status_reason)"
            " SELECT 'j', s, s::date, s, s, CASE WHEN i %% 3 = 2 THEN 'succeeded' ELSE 'coalesced' END,"
            "        'schedule', 1, 1, 'j|' || i, CASE WHEN i %% 3 < 2 THEN s + (2 - i %% 3) * interval '1 minute' END,"
            "        CASE WHEN i %% 3 < 2 THEN 'coalesced by catch_up' END"
            " FROM generate_series(0, %s - 1) AS i, LATERAL (SELECT %s + i * interval '1 minute' AS s) AS t",
            (slots, T0))
        for cover, status in held.items():
            conn.execute("UPDATE runner.job_runs SET status = %s, last_error = 'boom' WHERE job_name = 'j'"
                         " AND schedule_slot = %s", (status, cover))
        conn.execute("ANALYZE runner.job_runs")
        advance(conn, as_of)
        listed = {(s.astimezone(UTC), state) for s, state in conn.execute(
            "SELECT schedule_slot, state FROM runner.missing_slots_v1(%s)", (as_of,))}
        coalesced = {(c - k * timedelta(minutes=1), status) for c, status in held.items() for k in (1, 2)}
        assert listed == coalesced | {(c, status) for c, status in held.items()}
        [scan] = [p for p in executed_plans(conn, "SELECT count(*) FROM runner.missing_slots_v1(%s)", (as_of,),
                                            analyze=True)
                  if "WITH jobs AS MATERIALIZED" in p.get("Query Text", "")]
    # every scan that reads coalesced runs (by their index, or filtering on the status) reads
    # only those listed: 6, where a plain join read all 4,000 (the whole index, or on a ledger
    # this small the key's index per cover: 12,000)
    reads = [n for n in plan_nodes(scan["Plan"]) if n.get("Index Name") == "job_runs_coalesced_into"
             or any("'coalesced'" in n.get(k, "") for k in ("Filter", "Recheck Cond", "Index Cond"))]
    assert sum(n["Actual Rows"] * n["Actual Loops"] for n in reads) == len(coalesced), [
        (n["Node Type"], n.get("Index Name"), n["Actual Rows"], n["Actual Loops"]) for n in reads]
    # each a seek by a cover's whole key, the inner side of a loop over the covers, which are
    # read through their partial index
    assert reads and all(n.get("Index Name") == "job_runs_coalesced_into"
                         and "coalesced_into_slot = " in n.get("Index Cond", "") for n in reads), reads
    loops = [n for n in plan_nodes(scan["Plan"]) if n["Node Type"] == "Nested Loop" and n["Plans"][1] in reads]
    assert loops and all(any(o.get("Index Name") == "job_runs_unaccounted" for o in plan_nodes(n["Plans"][0]))
                         for n in loops), [n["Plans"][0] for n in loops]


def test_a_partition_is_probed_for_a_run_by_the_whole_key(db_url: str) -> None:
    """The gap scan asks whether a slot x partition has a run with one seek of the run's whole
    key (job, slot, partition: runner.slot_run_v1, inlined), above the watermark and for the
    holes below it: it reads at most the run it finds. The single form `p.key IS NULL OR
    r.partition_key = p.key` sought (job, slot) and read the slot's runs until it met the
    partition, 190 runs for each partition without one here (issue 32). Read from the
    function's own plan (auto_explain, nested, with actual rows) on one job of 200 partitions
    over 20 slots, 190 partitions of each with a run, the watermark half-way."""
    keys = [f"p{i:03}" for i in range(200)]
    as_of = T0 + timedelta(minutes=19)  # the last slot's instant
    with psycopg.connect(db_url, autocommit=True) as conn:
        sync(conn, now=T0, j={"every": "1m", "partitions": keys, "track_from": T0})
        conn.execute(
            "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date, window_start,"
            " window_end, status, trigger, attempt, fence, idempotency_key)"
            " SELECT 'j', s, k, s::date, s, s, 'succeeded', 'schedule', 1, 1, 'j|' || s || '|' || k"
            " FROM generate_series(%s::timestamptz, %s, interval '1 minute') AS s, unnest(%s::text[]) AS k",
            (T0, as_of, keys[:190]))
        conn.execute("ANALYZE runner.job_runs")
        advance(conn, T0 + timedelta(minutes=9))  # slots 0-9 by their holes, 10-19 expanded
        assert scalar_in(conn, "SELECT count(*) FROM runner.gap_holes") == 100
        expected = {("j", T0 + timedelta(minutes=m), k, "never_started") for m in range(20) for k in keys[190:]}
        assert gaps(conn, as_of) == expected
        [scan] = [p for p in executed_plans(conn, "SELECT count(*) FROM runner.missing_slots_v1(%s)", (as_of,),
                                            analyze=True)
                  if "WITH jobs AS MATERIALIZED" in p.get("Query Text", "")]
    # the probes: every read of job_runs but the unaccounted runs' and the coalesced runs'
    # partial indexes; each one executed seeks the whole key and finds at most its run
    probes = [n for n in plan_nodes(scan["Plan"]) if n.get("Relation Name") == "job_runs"
              and n.get("Index Name") not in ("job_runs_unaccounted", "job_runs_coalesced_into")
              and n["Actual Loops"] > 0]
    assert probes and all("partition_key = " in n.get("Index Cond", "") and n["Actual Rows"] <= 1
                          and not n.get("Rows Removed by Filter") for n in probes), [
        (n["Node Type"], n.get("Index Name"), n.get("Index Cond"), n.get("Filter"), n["Actual Rows"],
         n["Actual Loops"], n.get("Rows Removed by Filter")) for n in probes]
    # above the watermark 10 slots x 200 partitions, below it the 100 holes
    assert sum(n["Actual Loops"] for n in probes) == 10 * 200 + 100


# --------------------------------------------------------------------------------------------
# runner gaps


def test_runner_gaps_lists_the_scan_as_json_and_advances_the_watermarks(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        start = (now - timedelta(minutes=10)).replace(second=0, microsecond=0)
        sync(conn, report={"every": "1m", "partitions": ["t'1", "t 2"], "track_from": start},
             other={"every": "1h", "track_from": start})
        slots = every("1m", start - US, now)
        for slot in slots[:3]:
            make_run(conn, "report", slot, "t'1")
        make_run(conn, "report", slots[3], "t'1", status="dead")
    out = run_cli("gaps", "--json", "--job", "report", url=db_url)
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    got = {(g["schedule_slot"], g["partition_key"], g["state"]) for g in listed}
    assert ((slots[3].isoformat(), "t'1", "dead") in got and (slots[0].isoformat(), "t 2", "never_started") in got)
    assert (slots[0].isoformat(), "t'1", "never_started") not in got
    assert {g["job_name"] for g in listed} == {"report"}
    assert len(listed) == len(slots) * 2 - 3
    assert [g["schedule_slot"] for g in listed] == sorted(g["schedule_slot"] for g in listed)
    assert set(listed[0]) >= {"job_name", "schedule_slot", "partition_key", "state", "run_id",
                              "lateness", "paused"}
    assert scalar(db_url, "SELECT count(*) FROM runner.gap_watermarks WHERE complete_through IS NOT NULL") == 2

    since = run_cli("gaps", "--json", "--since", slots[-2].isoformat(), "--limit", "2", url=db_url)
    assert since.returncode == 0, since.stderr
    # every job's gaps from that slot on, by slot, job and partition (the hourly job's slot
    # is among them when an hour began in the last two minutes)
    expected_since = sorted([(s, "report", p) for s in slots[-2:] for p in ("t 2", "t'1")]
                            + [(s, "other", "") for s in every("1h", start - US, now) if s >= slots[-2]])[:2]
    assert [(g["schedule_slot"], g["job_name"], g["partition_key"]) for g in json.loads(since.stdout)] == [
        (s.isoformat(), j, p) for s, j, p in expected_since]
    assert "more" in since.stderr

    table = run_cli("gaps", "--job", "report", url=db_url)
    assert table.returncode == 0 and "never_started" in table.stdout and "t'1" in table.stdout

    bad = run_cli("gaps", "--since", "yesterday", url=db_url)
    assert bad.returncode == 2


# --------------------------------------------------------------------------------------------
# end to end: a real runner, then none


@pytest.mark.slow
def test_seconds_missed_after_the_last_runner_stopped_are_listed(db_url: str) -> None:
    proc = RunnerProcess("tests/apps/hello.py:app", db_url)
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs"
                                          " WHERE job_name = 'hello' AND status = 'succeeded'") >= 3,
                   timeout=30, message="the runner completes a few slots")
    finally:
        assert proc.terminate() == 0
    ran = {r[0].astimezone(UTC): r[1] for r in rows(db_url, "SELECT schedule_slot, status"
                                                           " FROM runner.job_runs WHERE job_name = 'hello'")}
    assert set(ran.values()) == {"succeeded"}
    last_run = max(ran)

    def missed_after_stop() -> list[datetime]:
        found = rows(db_url, "SELECT schedule_slot FROM runner.missing_slots"
                             " WHERE job_name = 'hello' AND schedule_slot > %s", (last_run,))
        return [r[0] for r in found] if len(found) >= 3 else []

    eventually(missed_after_stop, timeout=15, message="slots pass with no runner alive")
    with psycopg.connect(db_url, autocommit=True) as conn:
        as_of, track_from = conn.execute(
            "SELECT now(), track_from FROM runner.jobs WHERE job_name = 'hello'").fetchone()  # type: ignore[misc]
        listed = gaps(conn, as_of, "hello")
    expected = every("1s", track_from - US, as_of)
    assert {s for s in expected if s <= last_run} <= set(ran), "the runner skipped a slot while alive"
    assert listed == never_started("hello", [s for s in expected if s > last_run])
    assert not {s for _, s, _, _ in listed} & set(ran)


def test_the_duty_under_a_small_probe_cap_catches_up_in_many_calls_to_the_uncapped_answer(db_url: str) -> None:
    """The duty's probe cap (``LoopConfig.watermark_max_probes``, issue 32: no statement of the
    catch-up may grow with the ledger's age) set to 40: two days of four jobs of every kind
    (static partitions, dynamic, a cron in a zone, an hourly one; about 2,000 slot x
    partition probes) take dozens of calls, none over the cap however fast the calls are,
    and leave the gap scan's answer and the recorded holes what one uncapped advance gives."""
    from runner.worker import gapscan
    with psycopg.connect(db_url, autocommit=True) as conn:
        now = conn.execute("SELECT now()").fetchone()[0].astimezone(UTC)  # type: ignore[index]
        since = now - timedelta(days=2)
        kinds: dict[str, tuple[dict[str, Any], list[str]]] = {
            "dense": ({"every": "5m", "partitions": ["a", "b", "c"]}, ["a", "b", "c"]),
            "dynamic": ({"every": "30m", "partitions": lambda s: ["x"]}, ["x", "y"]),
            "cron": ({"cron": "*/20 * * * *", "timezone": "Asia/Kolkata"}, [""]),
            "hourly": ({"every": "1h"}, [""]),
        }
        sync(conn, now=since, **{name: {**kw, "track_from": since} for name, (kw, _) in kinds.items()})
        drawn = []
        for name, (kw, keys) in kinds.items():
            sched = parse_schedule(every=kw.get("every"), cron=kw.get("cron"), timezone=kw.get("timezone"))
            for k, slot in enumerate(sched.slots_between(since - US, now)):
                for key in keys:
                    if k % 13 != 5:  # a slot x partition in 13 has no run: a hole
                        drawn.append((name, slot, key, "failed" if k % 17 == 3 else "succeeded"))
        make_runs(conn, drawn)
        duty = gapscan.Advancer(threading.Event(), budget=1000, target=60.0, max_budget=40)
        assert duty.budget == 40  # the first call is under the cap too
        duty(conn)
        # quick calls would double the budget (target 60 s): the cap holds it
        assert duty.budget == 40
        assert len(duty.took) == duty.calls >= 30
        assert bounded(conn, None, timedelta(minutes=1))[1] == 0  # caught up
        as_of = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        with conn.transaction():
            answer = gaps(conn, as_of)
            assert answer == unwatermarked(conn, as_of)
        assert {"failed", "never_started"} <= {state for _, _, _, state in answer}
        holes = "SELECT job_name || schedule_slot || partition_key || whole_slot FROM runner.gap_holes" \
                " WHERE schedule_slot <= %s ORDER BY 1"
        capped = [r[0] for r in conn.execute(holes, (now,)).fetchall()]
        assert len(capped) > 100
        with conn.transaction(force_rollback=True):
            conn.execute("DELETE FROM runner.gap_holes")
            conn.execute("DELETE FROM runner.gap_watermarks")
            advance(conn, now)
            assert [r[0] for r in conn.execute(holes, (now,)).fetchall()] == capped
    with pytest.raises(ValueError, match="max_budget must be >= 1"):
        gapscan.Advancer(max_budget=0)


def test_the_duty_s_budget_follows_the_target_without_a_dead_zone() -> None:
    """A call at 40 % of the target grows the budget 2.5-fold, capped at double; one at 80 %
    by a quarter; one at twice the target halves it, one at 1.25 times takes a fifth off; no
    growth once nothing is behind; the bounds hold. (Before revision 0022's round, calls
    between a quarter of the target and the target left the budget where it was for good.)"""
    from runner.worker import gapscan
    duty = gapscan.Advancer(budget=100_000, target=1.0)
    duty.adapt(0.4, behind=5)
    assert duty.budget == 200_000
    duty.adapt(0.8, behind=5)
    assert duty.budget == 250_000
    duty.adapt(2.0, behind=5)
    assert duty.budget == 125_000
    duty.adapt(1.25, behind=5)
    assert duty.budget == 100_000
    duty.adapt(0.5, behind=0)
    assert duty.budget == 100_000
    duty.adapt(0.0, behind=1)
    assert duty.budget == 200_000
    duty.budget = gapscan.MAX_BUDGET
    duty.adapt(0.01, behind=1)
    assert duty.budget == gapscan.MAX_BUDGET
    duty.budget = gapscan.MIN_BUDGET
    duty.adapt(100.0, behind=1)
    assert duty.budget == gapscan.MIN_BUDGET
