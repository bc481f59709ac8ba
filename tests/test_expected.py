"""One definition of *expected* (issue 26): the slots of a job's schedule history that are
tracked, not retired, not paused and due (runner.expected_spans_v1, runner.expected_slots_v1),
used by the misfire duty and misfire tiers. A pause is not an outage, and the slots between a
retirement and its end are never decided, whatever the policy."""

from __future__ import annotations

import contextlib
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, run_cli, scalar
from tests.test_operators import make_run

APPS = "tests.apps.expected"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = timedelta(seconds=1)


def _job(tx: psycopg.Connection[Any], every: str = "10 seconds") -> None:
    tx.execute("INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, timezone, track_from,"
               " first_registered_at, synced_at, max_attempts, version, options)"
               " VALUES ('j', 'every', %s::interval, 'UTC', %s, %s, %s, 3, 'v', '{}')", (every, T0, T0, T0))
    tx.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval, timezone)"
               " VALUES ('j', %s, 'every', %s::interval, 'UTC')", (T0, every))


def _slots(tx: psycopg.Connection[Any], as_of: datetime) -> list[tuple[int, bool]]:
    """(seconds after T0, paused) of every owed slot."""
    return [(int((s - T0).total_seconds()), p) for s, p in tx.execute(
        "SELECT schedule_slot, paused FROM runner.expected_slots_v1('j', '-infinity', 'infinity', %s)",
        (as_of,)).fetchall()]


# -- the definition ---------------------------------------------------------------------------


def test_expected_is_tracked_not_retired_not_paused_and_due(tx: psycopg.Connection[Any]) -> None:
    _job(tx)
    # retired for (20 s, 40 s): 20 and 40 are owed; paused for [60 s, 80 s): 60 and 70 are not
    tx.execute("INSERT INTO runner.job_retirements VALUES ('j', %s, %s)", (T0 + 20 * S, T0 + 40 * S))
    tx.execute("INSERT INTO runner.job_pauses VALUES ('j', %s, %s)", (T0 + 60 * S, T0 + 80 * S))
    assert _slots(tx, T0 + 120 * S) == [
        (0, False), (10, False), (20, False), (40, False), (50, False), (60, True), (70, True),
        (80, False), (90, False), (100, False), (110, False), (120, False)]
    # due by as_of: a slot exactly at as_of is due, one after is not
    assert _slots(tx, T0 + 119 * S)[-1] == (110, False)
    # a window [from, to] of the range only
    assert [s for s, in tx.execute("SELECT extract(epoch FROM schedule_slot - %s)::int FROM"
                                   " runner.expected_slots_v1('j', %s, %s, %s)",
                                   (T0, T0 + 10 * S, T0 + 60 * S, T0 + 120 * S)).fetchall()] == [10, 20, 40, 50, 60]


def test_an_open_retirement_and_an_open_pause_owe_nothing_after_them(tx: psycopg.Connection[Any]) -> None:
    _job(tx)
    tx.execute("INSERT INTO runner.job_pauses VALUES ('j', %s, NULL)", (T0 + 30 * S,))
    assert _slots(tx, T0 + 50 * S) == [(0, False), (10, False), (20, False), (30, True), (40, True), (50, True)]
    tx.execute("INSERT INTO runner.job_retirements VALUES ('j', %s, NULL)", (T0 + 40 * S,))
    assert _slots(tx, T0 + 50 * S) == [(0, False), (10, False), (20, False), (30, True), (40, True)]


def test_the_outage_of_a_range_leaves_out_paused_and_retired_time(tx: psycopg.Connection[Any]) -> None:
    from runner.sqlfiles import queries
    from runner.worker import misfire

    _job(tx)
    tx.execute("INSERT INTO runner.job_pauses VALUES ('j', %s, %s)", (T0 + 10 * S, T0 + 33 * S))
    tx.execute("INSERT INTO runner.job_retirements VALUES ('j', %s, %s)", (T0 + 40 * S, T0 + 50 * S))
    outage = tx.execute(queries("misfire")["outage"], {"job_name": "j", "since": T0, "now": T0 + 60 * S}).fetchone()
    # 60 s since T0, of which 23 paused and 10 retired
    assert outage == (timedelta(seconds=27),)
    assert misfire.EPSILON  # (the duty's own unit, for the reader: slots are microsecond instants)


def test_the_gap_scan_lists_every_owed_slot_the_definition_gives(tx: psycopg.Connection[Any]) -> None:
    """The gap scan keeps its own watermarked expansion (for speed); it lists exactly the owed
    slots without a run, paused ones included (README: a pause's slots stay listed)."""
    _job(tx)
    tx.execute("INSERT INTO runner.job_retirements VALUES ('j', %s, %s)", (T0 + 20 * S, T0 + 40 * S))
    tx.execute("INSERT INTO runner.job_pauses VALUES ('j', %s, %s)", (T0 + 60 * S, T0 + 80 * S))
    listed = tx.execute("SELECT schedule_slot FROM runner.missing_slots_v1(%s, 'j') ORDER BY 1",
                        (T0 + 120 * S,)).fetchall()
    owed = tx.execute("SELECT schedule_slot FROM runner.expected_slots_v1('j', '-infinity', 'infinity', %s)",
                      (T0 + 120 * S,)).fetchall()
    assert listed == owed and len(owed) == 12


def test_covered_is_one_rule_that_the_status_lists_and_the_gap_scan_agree_with(
        tx: psycopg.Connection[Any]) -> None:
    """runner.run_settled_v1 names the statuses that need no more work; the partial index the
    gap scan reads (job_runs_unaccounted) holds exactly the others of the status constraint.
    And over every status, with a coalesced run's cover in every status, a run is listed by
    the gap scan exactly when runner.run_covered_v1 says it does not cover its slot."""
    statuses = set(re.findall(r"'(\w+)'::text", scalar_of(tx,
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'job_runs_status_check'")))
    settled = {s for s in statuses if scalar_of(tx, "SELECT runner.run_settled_v1(%s)", (s,))}
    unaccounted = set(re.findall(r"'(\w+)'::text", scalar_of(tx,
        "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i"
        " WHERE i.indexrelid = 'runner.job_runs_unaccounted'::regclass")))
    assert settled == {"succeeded", "skipped", "coalesced", "cancelled"}
    assert settled | unaccounted == statuses and not settled & unaccounted
    _job(tx)
    cover_statuses = sorted(statuses - {"coalesced"})
    for k, cover_status in enumerate(cover_statuses):
        cover, coalesced = T0 + (20 * k + 10) * S, T0 + 20 * k * S
        make_run(tx, "j", cover, status=cover_status)
        run = make_run(tx, "j", coalesced, status="coalesced")
        tx.execute("UPDATE runner.job_runs SET coalesced_into_slot = %s, status_reason = 'planted'"
                   " WHERE id = %s", (cover, run))
    as_of = T0 + 20 * len(cover_statuses) * S
    listed = {r[0] for r in tx.execute("SELECT run_id FROM runner.missing_slots_v1(%s, 'j')"
                                       " WHERE run_id IS NOT NULL", (as_of,))}
    judged = dict(tx.execute("SELECT id, runner.run_covered_v1(job_name, partition_key, status, coalesced_into_slot)"
                             " FROM runner.job_runs WHERE job_name = 'j'").fetchall())
    covers = dict(tx.execute("SELECT r.id, t.id FROM runner.job_runs r JOIN runner.job_runs t"
                             " ON t.job_name = r.job_name AND t.schedule_slot = r.coalesced_into_slot"
                             " WHERE r.job_name = 'j' AND r.status = 'coalesced'").fetchall())
    flagged = {r[0] for r in tx.execute("SELECT run_id FROM runner.check_v1(%s)"
                                        " WHERE invariant = 'coalesced_into_nothing'", (as_of,))}
    # a run that does not cover its slot is listed by the gap scan, or its cover is listed (the
    # work that will cover it is in progress), or the audit flags a cover that cannot cover it
    not_covered = {i for i, covered in judged.items() if not covered}
    assert not_covered == listed | {i for i, c in covers.items() if c in listed} | flagged
    assert listed | flagged <= not_covered
    assert flagged == {i for i, c in covers.items() if judged[c] and c not in listed and not judged[i]}
    # the coalesced run into the succeeded cover covers; the one into a dead cover is listed itself
    by_cover = {tx.execute("SELECT status FROM runner.job_runs WHERE id = %s", (c,)).fetchone()[0]: i
                for i, c in covers.items()}
    assert judged[by_cover["succeeded"]] and by_cover["dead"] in listed and by_cover["skipped"] in flagged


def scalar_of(tx: psycopg.Connection[Any], sql: str, params: tuple[Any, ...] = ()) -> Any:
    row = tx.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


# -- defect 3: a pause is not an outage ---------------------------------------------------------


def _succeeded_after(db_url: str, job: str, after: datetime) -> int:
    return int(scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = %s AND status = 'succeeded'"
                              " AND schedule_slot > %s", (job, after)))


def _older_than(db_url: str, instant: datetime, seconds: float) -> None:
    """Wait until the database clock is ``seconds`` past ``instant`` (time passing is the
    scenario here: a pause, an outage)."""
    eventually(lambda: scalar(db_url, "SELECT now() - %s > make_interval(secs => %s)", (instant, seconds)),
               timeout=seconds + 30, message=f"{seconds}s past {instant}")


@pytest.mark.slow
def test_a_pause_is_not_an_outage_for_misfire_tiers(db_url: str, tmp_path: Path) -> None:
    """Defect 3 of issue 26: paused 14 s, resumed while no runner was up, about 3 s of real
    outage; tiers ("10s", catch_up), (None, approve|skip). The late slots after the resume are
    caught up (the outage is seconds), not held for approval or skipped (before: lateness
    counted the pause, "missed for 17.6s"); the slots of the pause are decided by no tier and
    stay listed by the gap scan. One job per long tier (tests/apps/expected.py: paused-approve,
    paused-skip), paused and resumed together: the same scenario for both, each checked on its
    own and named in what fails."""
    from tests.apps.expected import LONG_TIERS

    jobs = [f"paused-{long_tier}" for long_tier in LONG_TIERS]
    a = RunnerProcess(f"{APPS}:pause_app", db_url, "--poll-interval", "0.2", log=tmp_path / "a.log")
    visible: dict[str, Any] = {}
    try:
        for job in jobs:
            eventually(lambda job=job: _succeeded_after(db_url, job, T0) >= 2, timeout=60, message=f"{job} ran")
        for job in jobs:
            out = run_cli("pause", job, "--reason", "maintenance", "--yes", url=db_url)
            assert out.returncode == 0, out.stderr
            visible[job] = scalar(db_url, "SELECT now()")  # the pause has committed: every claim from here sees it
    finally:
        assert a.terminate() == 0, a.output()
    paused_at = dict(rows(db_url, "SELECT job_name, paused_from FROM runner.job_pauses"))
    _older_than(db_url, max(paused_at.values()), 14)
    for job in jobs:
        out = run_cli("resume", job, "--reason", "maintenance done", "--yes", url=db_url)
        assert out.returncode == 0, out.stderr
    resumed = dict(rows(db_url, "SELECT job_name, paused_until FROM runner.job_pauses"))
    _older_than(db_url, max(resumed.values()), 3)  # the runner is still down: a real outage of seconds
    b = RunnerProcess(f"{APPS}:pause_app", db_url, "--poll-interval", "0.2", log=tmp_path / "b.log")
    try:
        for job in jobs:
            eventually(lambda job=job: scalar(db_url, "SELECT count(*) FROM runner.misfire_decisions"
                                                      " WHERE job_name = %s", (job,)) > 0, timeout=60,
                       message=f"{job}: the downtime decided")
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE trigger = 'catch_up'"
                                          " AND status NOT IN ('succeeded', 'skipped', 'awaiting_approval')") == 0,
                   timeout=30, message="the caught-up slots ran")
    finally:
        assert b.terminate() == 0, b.output()
    for job in jobs:
        decided = rows(db_url, "SELECT d.tier, d.action, r.status, d.lateness, r.schedule_slot"
                               " FROM runner.misfire_decisions d JOIN runner.job_runs r ON r.id = d.run_id"
                               " WHERE r.job_name = %s ORDER BY 5", (job,))
        assert decided, f"{job}: the late slots after the resume were decided"
        assert {(t, act, st) for t, act, st, _, _ in decided} == {("catch_up", "catch_up", "succeeded")}, \
            (job, decided)
        assert all(lateness < timedelta(seconds=10) for _, _, _, lateness, _ in decided), (job, decided)
        assert all(slot >= resumed[job] for *_, slot in decided), (job, decided)  # no tier decided a paused slot
        assert scalar(db_url, "SELECT count(*) FROM runner.alerts WHERE kind = 'misfire_tier'"
                              " AND job_name = %s", (job,)) == 0, job
        # the slots of the pause are not late, and not dropped: the gap scan lists them. A
        # pause takes effect when it commits: paused_from is its clock inside the transaction,
        # so a claim whose statement began between the two (under load, a slot of this 1 s job
        # can fall due there) may start a slot just after paused_from; no claim made after the
        # commit does
        raced = rows(db_url, "SELECT schedule_slot, scheduled_at, trigger FROM runner.job_runs"
                             " WHERE job_name = %s AND schedule_slot > %s AND schedule_slot < %s",
                     (job, paused_at[job], resumed[job]))
        assert all(at < visible[job] and trigger == "schedule" for _, at, trigger in raced), \
            (job, visible[job], raced)
        assert scalar(db_url, "SELECT count(*) FROM runner.missing_slots WHERE state = 'never_started'"
                              " AND job_name = %s AND schedule_slot > %s AND schedule_slot < %s",
                      (job, paused_at[job], resumed[job])) >= 12, job
    assert_ledger_clean(db_url)


# -- defect 4: the retired span is never decided ------------------------------------------------


@pytest.mark.slow
def test_a_restart_after_unretire_decides_nothing_in_the_retired_span(db_url: str, tmp_path: Path) -> None:
    """Defect 4 of issue 26: a job is retired while its runner runs, the runner stops, the job
    is unretired 8 s later and a runner starts. README: the slots between the retirement and
    its end are never expected. Before, the misfire duty read pauses but not retirements and
    decided the span by the policy: coalesce ran one catch_up covering it (coalesced rows in
    it), replay ran some and held the rest for approval (listed by the gap scan), skip skipped
    them, tiers held them for approval with an alert. Now: no run, decision or alert there.
    One job per policy (tests/apps/expected.py: span-coalesce, span-replay, span-skip,
    span-tiers), retired and unretired together: the same scenario for each, each checked on
    its own and named in what fails."""
    from tests.apps.expected import POLICIES

    jobs = [f"span-{policy}" for policy in POLICIES]
    a = RunnerProcess(f"{APPS}:retire_app", db_url, "--poll-interval", "0.2", log=tmp_path / "a.log")
    try:
        for job in jobs:
            eventually(lambda job=job: _succeeded_after(db_url, job, T0) >= 2, timeout=60, message=f"{job} ran")
        for job in jobs:
            out = run_cli("retire", job, "--reason", "moved to another service", "--yes", url=db_url)
            assert out.returncode == 0, out.stderr
    finally:
        assert a.terminate() == 0, a.output()
    retired = dict(rows(db_url, "SELECT job_name, retired_from FROM runner.job_retirements"))
    _older_than(db_url, max(retired.values()), 8)
    for job in jobs:
        out = run_cli("unretire", job, "--reason", "moved back", "--yes", url=db_url)
        assert out.returncode == 0, out.stderr
    unretired = dict(rows(db_url, "SELECT job_name, retired_until FROM runner.job_retirements"))
    b = RunnerProcess(f"{APPS}:retire_app", db_url, "--poll-interval", "0.2", log=tmp_path / "b.log")
    try:
        for job in jobs:
            eventually(lambda job=job: _succeeded_after(db_url, job, unretired[job] + 2 * S) >= 3, timeout=60,
                       message=f"{job} runs again")
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs r"
                                          " JOIN runner.job_retirements t ON t.job_name = r.job_name"
                                          " WHERE r.status IN ('pending', 'running')"
                                          " AND r.schedule_slot < t.retired_until") == 0, timeout=30,
                   message="whatever was started before the unretirement ended")
    finally:
        assert b.terminate() == 0, b.output()
    for job in jobs:
        span = (job, retired[job], unretired[job])
        in_span = rows(db_url, "SELECT schedule_slot, status, trigger, status_reason FROM runner.job_runs"
                               " WHERE job_name = %s AND schedule_slot > %s AND schedule_slot < %s ORDER BY 1", span)
        assert in_span == [], (job, in_span)
        assert scalar(db_url, "SELECT count(*) FROM runner.misfire_decisions WHERE job_name = %s"
                              " AND schedule_slot > %s AND schedule_slot < %s", span) == 0, job
        # nothing owed there: nothing listed, nothing alerted, no run covers the span's windows
        assert scalar(db_url, "SELECT count(*) FROM runner.missing_slots WHERE job_name = %s"
                              " AND schedule_slot > %s AND schedule_slot < %s", span) == 0, job
        assert scalar(db_url, "SELECT count(*) FROM runner.alerts WHERE kind IN ('misfire_tier', 'dead')"
                              " AND job_name = %s", (job,)) == 0, job
        assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'awaiting_approval'"
                              " AND job_name = %s", (job,)) == 0, job
        # (a run after it covers no window reaching into it: the first slot after it has its own)
        assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = %s AND schedule_slot > %s"
                              " AND window_start < %s - interval '1 second'", (job, unretired[job], unretired[job])) == 0, job
    assert_ledger_clean(db_url)


# -- one registry of misfire policies -----------------------------------------------------------


def test_every_list_of_misfire_policies_comes_from_the_registry(tx: psycopg.Connection[Any]) -> None:
    from runner.model import app, policies
    from runner.model.tiers import ACTIONS, RUNS

    assert app.MISFIRE_POLICIES == ("skip", "coalesce", "replay", "manual")
    assert ACTIONS == ("skip", "catch_up", "coalesce", "backfill", "approve")
    assert RUNS == ("catch_up", "coalesce", "backfill")
    assert {a: policies.by_tier_action(a).name for a in ACTIONS} == {
        "skip": "skip", "catch_up": "catch_up", "coalesce": "coalesce", "backfill": "backfill",
        "approve": "manual"}
    # the one SQL word list: the actions runner.misfire_decisions accepts
    check = tx.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                       " WHERE conname = 'misfire_decisions_action_check'").fetchone()
    assert check is not None
    assert tuple(re.findall(r"'(\w+)'::text", check[0])) == ACTIONS, check[0]


# -- suspicion: a tier ruling kept only in memory ------------------------------------------------


@pytest.mark.slow
def test_a_restart_midway_through_a_range_keeps_its_tier_ruling(db_url: str, tmp_path: Path) -> None:
    """A 25-slot x 100-partition outage (3 misfire passes) is ruled catch_up (late ~27 s, tier
    up to 40 s). The runner is killed (kill -9) after the first pass committed, and a runner
    starts once the range is over 40 s old. The rest of the range must be decided by the same
    ruling (catch_up, the same lateness), not ruled again (approve) nor left undecided."""
    base = scalar(db_url, "SELECT date_trunc('second', now())").astimezone(UTC)  # a slot instant
    mark = tmp_path / "held"
    env = {"EXPECTED_BASE": base.isoformat()}
    a = RunnerProcess(f"{APPS}:midway_app", db_url, "--poll-interval", "0.2",
                      env={**env, "EXPECTED_HOLD_MARK": str(mark)}, log=tmp_path / "a.log")
    try:
        eventually(mark.exists, timeout=60, message="the second misfire pass reached the held slot")
        first = rows(db_url, "SELECT tier, count(*), min(lateness), max(lateness) FROM runner.misfire_decisions"
                             " GROUP BY 1")
        assert [(t, n) for t, n, _, _ in first] == [("catch_up", 1000)], first
    finally:
        a.kill()
    ruled = first[0][2]
    _older_than(db_url, base - 25 * S, 45)  # the range is now past the catch_up tier's 40 s
    b = RunnerProcess(f"{APPS}:midway_app", db_url, "--poll-interval", "0.2", env=env, log=tmp_path / "b.log")
    rest_query = ("SELECT coalesce(d.tier, '(none)'), coalesce(r.status, 'no run'), count(*)"
                  " FROM generate_series(%s::timestamptz, %s::timestamptz, interval '1 second') AS s(slot)"
                  " CROSS JOIN generate_series(0, 99) AS p(i)"
                  " LEFT JOIN runner.job_runs r ON r.schedule_slot = s.slot"
                  "  AND r.partition_key = 'p' || lpad(p.i::text, 3, '0')"
                  " LEFT JOIN runner.misfire_decisions d ON d.run_id = r.id"
                  " GROUP BY 1, 2 ORDER BY 1, 2")
    rest: list[tuple[Any, ...]] = []
    try:
        started = scalar(db_url, "SELECT now()")
        eventually(lambda: _succeeded_after(db_url, "midway", started + 2 * S) >= 3, timeout=90,
                   message="b runs on-time slots")

        def rest_decided() -> bool:
            rest[:] = rows(db_url, rest_query, (base - 15 * S, base - S))
            return sum(n for tier, _, n in rest if tier != "(none)") == 1500
        with contextlib.suppress(AssertionError):  # what was decided is shown below
            eventually(rest_decided, timeout=60, message="the rest of the range decided")
    finally:
        assert b.terminate() == 0, b.output()
    # the 15 slots x 100 partitions the first runner did not reach: decided by the same tier
    # (their runs caught up, or still queued behind each other in the correction lane)
    assert {tier for tier, _, _ in rest} == {"catch_up"}, rest
    assert {status for _, status, _ in rest} <= {"pending", "running", "succeeded"}, rest
    assert sum(n for _, _, n in rest) == 1500, rest
    assert scalar(db_url, "SELECT count(DISTINCT lateness) FROM runner.misfire_decisions"
                          " WHERE schedule_slot < %s", (base,)) == 1
    assert scalar(db_url, "SELECT min(lateness) FROM runner.misfire_decisions WHERE schedule_slot < %s",
                  (base,)) == ruled
    # the range's row in the ledger: resumed and closed
    assert rows(db_url, "SELECT first_slot, tier, action, lateness, closed_at IS NOT NULL FROM runner.misfire_ranges"
                        " WHERE first_slot < %s", (base,)) == [(base - 25 * S, "catch_up", "catch_up", ruled, True)]
    assert_ledger_clean(db_url)
