"""The ledger audit, `runner check` (runner.check_v1, runner.violations): each invariant is
reported, with the right rows, on a ledger built to break exactly that one, and stays silent
on the state next to it that the runner writes on purpose; a ledger written by real loops
reports nothing; the command's exit codes and JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from runner import Runner
from runner.actions import audit
from runner.store import ledger
from tests.support import assert_ledger_clean, eventually, run_cli, running_worker, scalar

HOUR = timedelta(hours=1)
Found = tuple[str, str | None, datetime | None, str | None, int | None, int | None]


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


def db_now(conn: psycopg.Connection[Any]) -> datetime:
    return ledger.db_now(conn)


def sync(conn: psycopg.Connection[Any], name: str = "job", **kw: Any) -> datetime:
    """Register a job as a runner start would (hourly, tracked from three hours before the
    current hour unless told otherwise); returns its track_from."""
    app = Runner()
    now = db_now(conn)
    kw.setdefault("every", "1h")
    kw.setdefault("track_from", now.replace(minute=0, second=0, microsecond=0) - 3 * HOUR)
    app.job(name, **kw)(lambda ctx: None)
    return ledger.sync_jobs(conn, list(app.jobs.values()))[name]


def make_run(conn: psycopg.Connection[Any], job: str, slot: datetime, partition: str = "", *,
             status: str = "succeeded", attempts: tuple[tuple[str, str], ...] = (("succeeded", "schedule"),),
             fence: int | None = None, attempt: int | None = None, uncounted: int = 0,
             reason: str | None = None, coalesced_into: datetime | None = None,
             next_attempt_at: datetime | None = None, trigger: str = "schedule",
             started: datetime | None = None, heartbeat: datetime | None = None,
             lock_key: int = 0) -> tuple[int, list[int]]:
    """A run and its attempts (status, trigger) at fences 1, 2, ...; the run's fence and
    attempt default to its number of attempts. Running attempts started and beaten at
    ``started``/``heartbeat`` (default: the database's now). Returns (run id, attempt ids)."""
    n = len(attempts)
    if status in ("pending", "failed") and next_attempt_at is None:
        next_attempt_at = db_now(conn)
    run = conn.execute(
        "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date,"
        " window_start, window_end, status, trigger, attempt, fence, uncounted_attempts,"
        " idempotency_key, status_reason, coalesced_into_slot, next_attempt_at, started_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, now()) RETURNING id",
        (job, slot, partition, slot.date(), slot - HOUR, slot, status, trigger,
         n if attempt is None else attempt, n if fence is None else fence, uncounted,
         f"{job}|{slot.isoformat()}|{partition}", reason, coalesced_into, next_attempt_at)).fetchone()
    assert run is not None
    ids = []
    for i, (a_status, a_trigger) in enumerate(attempts, start=1):
        row = conn.execute(
            "INSERT INTO runner.attempts (run_id, attempt, fence, trigger, owner_host, owner_pid,"
            " owner_instance, lock_key, status, started_at, heartbeat_at, finished_at)"
            " VALUES (%s, %s, %s, %s, 'host', 1, gen_random_uuid(), %s, %s,"
            " coalesce(%s, now()), coalesce(%s, now()), CASE WHEN %s = 'running' THEN NULL ELSE now() END)"
            " RETURNING id",
            (run[0], i, i, a_trigger, lock_key + i, a_status, started, heartbeat, a_status)).fetchone()
        assert row is not None
        ids.append(row[0])
    return run[0], ids


def found(conn: psycopg.Connection[Any], **kw: Any) -> set[Found]:
    rows = audit.violations(conn, **kw)
    return {(r["invariant"], r["job_name"], r["schedule_slot"], r["partition_key"], r["run_id"],
             r["attempt_id"]) for r in rows}


def raw(conn: psycopg.Connection[Any], as_of: datetime | None = None) -> set[Found]:
    """runner.check_v1 itself, as psql users see it (no confirmation of orphans)."""
    rows = conn.execute("SELECT invariant, job_name, schedule_slot, partition_key, run_id, attempt_id"
                        " FROM runner.check_v1(%s)", (as_of,)).fetchall()
    return {(r[0], r[1], r[2].astimezone(UTC) if r[2] else None, *r[3:]) for r in rows}


def kinds(conn: psycopg.Connection[Any], **kw: Any) -> set[str]:
    return {r["invariant"] for r in audit.violations(conn, **kw)}


def slots_of(conn: psycopg.Connection[Any], job: str = "job") -> list[datetime]:
    """The job's expected slots so far (hourly from its track_from)."""
    row = conn.execute("SELECT track_from FROM runner.jobs WHERE job_name = %s", (job,)).fetchone()
    assert row is not None
    first, now = row[0].astimezone(UTC), db_now(conn)
    return [first + i * HOUR for i in range(int((now - first) / HOUR) + 1)]


def settle(conn: psycopg.Connection[Any], job: str = "job", partitions: tuple[str, ...] = ("",),
           skip: tuple[datetime, ...] = ()) -> None:
    """A succeeded run for every expected slot x partition, but the slots in ``skip``."""
    for slot in slots_of(conn, job):
        if slot not in skip:
            for p in partitions:
                make_run(conn, job, slot, p)


# -- each invariant, on a ledger built to break it ------------------------------------------


def test_an_empty_ledger_and_a_settled_one_report_nothing(conn: psycopg.Connection[Any]) -> None:
    assert found(conn) == set()
    sync(conn, partitions=["a", "b"])
    settle(conn, partitions=("a", "b"))
    assert found(conn) == set()
    assert conn.execute("SELECT count(*) FROM runner.violations").fetchone() == (0,)


def test_two_successes_without_an_operator_between_them(conn: psycopg.Connection[Any]) -> None:
    sync(conn)
    s = slots_of(conn)
    bad, (_, second) = make_run(conn, "job", s[0], attempts=(("succeeded", "schedule"), ("succeeded", "retry")))
    # a forced rerun's success is a second success on purpose: its attempt is triggered manual
    make_run(conn, "job", s[1], attempts=(("succeeded", "schedule"), ("succeeded", "manual")))
    make_run(conn, "job", s[2], attempts=(("succeeded", "schedule"), ("abandoned", "backfill"),
                                          ("succeeded", "recovery")))
    assert found(conn) == {("two_successes", "job", s[0], "", bad, second)}


def test_stale_success_in_each_of_its_shapes(conn: psycopg.Connection[Any]) -> None:
    sync(conn)
    s = slots_of(conn)
    # the run says succeeded, its attempt at that fence was refused as stale
    a, (_, a2) = make_run(conn, "job", s[0], attempts=(("failed", "schedule"), ("stale", "retry")))
    # the run went on to a recovery after a recorded success
    b, (b1, _) = make_run(conn, "job", s[1], status="running",
                          attempts=(("succeeded", "schedule"), ("running", "recovery")))
    # a success at the run's fence, the run failed
    c, (c1,) = make_run(conn, "job", s[2], status="failed")
    # next to them, on purpose: a succeeded run queued again by `runner rerun --force`, not
    # yet claimed (pending, trigger manual, its fence still the success's)
    make_run(conn, "job", s[3], status="pending", trigger="manual")
    assert found(conn) == {("stale_success", "job", s[0], "", a, a2),
                           ("stale_success", "job", s[1], "", b, b1),
                           ("stale_success", "job", s[2], "", c, c1)}


def test_coalesced_into_nothing(conn: psycopg.Connection[Any]) -> None:
    sync(conn, partitions=["p"], track_from=db_now(conn) - 10 * HOUR)
    s = slots_of(conn)
    settle(conn, partitions=("p",), skip=tuple(s[:6]))
    why = "misfire=coalesce: covered"
    nowhere, _ = make_run(conn, "job", s[0], "p", status="coalesced", attempts=(), reason=why,
                          coalesced_into=s[0] - 5 * HOUR)
    unset, _ = make_run(conn, "job", s[1], "p", status="coalesced", attempts=(), reason=why)
    into_coalesced, _ = make_run(conn, "job", s[2], "p", status="coalesced", attempts=(), reason=why,
                                 coalesced_into=s[3])
    make_run(conn, "job", s[3], "p", status="coalesced", attempts=(), reason=why, coalesced_into=s[5])
    make_run(conn, "job", s[4], "p", status="coalesced", attempts=(), reason=why, coalesced_into=s[5])
    make_run(conn, "job", s[5], "p", status="pending", attempts=(), trigger="catch_up")  # live: fine
    assert found(conn) == {("coalesced_into_nothing", "job", s[0], "p", nowhere, None),
                           ("coalesced_into_nothing", "job", s[1], "p", unset, None),
                           ("coalesced_into_nothing", "job", s[2], "p", into_coalesced, None)}


def test_attempts_beyond_max_counts_as_the_runner_does(conn: psycopg.Connection[Any]) -> None:
    sync(conn, max_attempts=2, track_from=db_now(conn) - 10 * HOUR)
    s = slots_of(conn)
    settle(conn, skip=tuple(s[:6]))
    # a third retry of a job with max_attempts=2: nothing allows it
    retried, _ = make_run(conn, "job", s[0], status="dead",
                          attempts=(("failed", "schedule"), ("failed", "retry"), ("failed", "retry")))
    # a crash loop: a recovery counts like any attempt, so none may start past the budget
    looping, _ = make_run(conn, "job", s[1], status="running",
                          attempts=(("abandoned", "schedule"), ("abandoned", "recovery"),
                                    ("running", "recovery")))
    # the owner of the first attempt died, its recovery (the second counted attempt) ran
    make_run(conn, "job", s[2], attempts=(("abandoned", "schedule"), ("succeeded", "recovery")))
    # on purpose: released attempts do not count, nor those before a rerun (uncounted)
    make_run(conn, "job", s[3], attempts=(("released", "schedule"), ("failed", "recovery"),
                                          ("succeeded", "retry")), uncounted=1)
    make_run(conn, "job", s[4], attempts=(("failed", "schedule"), ("failed", "retry"),
                                          ("failed", "manual"), ("succeeded", "retry")), uncounted=2)
    # exactly max_attempts, all failed: dead, fine
    make_run(conn, "job", s[5], status="dead", attempts=(("failed", "schedule"), ("failed", "retry")))
    assert found(conn) == {("attempts_beyond_max", "job", s[0], "", retried, None),
                           ("attempts_beyond_max", "job", s[1], "", looping, None)}


def watermark_past_everything(conn: psycopg.Connection[Any], job: str = "job") -> None:
    """A gap-scan watermark that says every slot up to now had a run, with no hole recorded:
    a broken advance. The gap scan then trusts it and lists nothing below it."""
    conn.execute(
        "INSERT INTO runner.gap_watermarks (job_name, complete_through, schedule_from, track_from, advanced_at)"
        " SELECT j.job_name, now(), (SELECT max(valid_from) FROM runner.job_schedules s"
        " WHERE s.job_name = j.job_name), j.track_from, now() FROM runner.jobs j WHERE j.job_name = %s", (job,))


def test_unlisted_gap_of_static_partitions(conn: psycopg.Connection[Any]) -> None:
    sync(conn, partitions=["a", "b"])
    s = slots_of(conn)
    settle(conn, partitions=("a", "b"), skip=(s[1],))
    make_run(conn, "job", s[1], "a")
    # the gap scan lists the hole (never_started): nothing to report
    assert found(conn) == set()
    watermark_past_everything(conn)
    assert found(conn) == {("unlisted_gap", "job", s[1], "b", None, None)}
    # --since after the hole: not judged
    assert found(conn, since=s[2]) == set()


def test_unlisted_gap_of_dynamic_partitions(conn: psycopg.Connection[Any]) -> None:
    sync(conn, partitions=lambda slot: ["x", "y"])
    s = slots_of(conn)
    settle(conn, partitions=("x", "y"), skip=(s[0], s[1], s[2]))
    # fanned out to x and y, only x ran
    conn.execute("INSERT INTO runner.slot_fanouts (job_name, schedule_slot, partitions)"
                 " VALUES ('job', %s, '{x,y}')", (s[0],))
    make_run(conn, "job", s[0], "x")
    # never fanned out, no run: the slot is expected as a whole
    # a fan-out that failed: the slot too
    conn.execute("INSERT INTO runner.slot_fanouts (job_name, schedule_slot, partitions, error)"
                 " VALUES ('job', %s, '{}', 'ValueError: tenants unavailable')", (s[2],))
    for slot in s[3:]:
        conn.execute("INSERT INTO runner.slot_fanouts (job_name, schedule_slot, partitions)"
                     " VALUES ('job', %s, '{x,y}')", (slot,))
    watermark_past_everything(conn)
    assert found(conn) == {("unlisted_gap", "job", s[0], "y", None, None),
                           ("unlisted_gap", "job", s[1], None, None, None),
                           ("unlisted_gap", "job", s[2], None, None, None)}


def test_unlisted_gap_of_a_run_the_gap_scan_forgets(conn: psycopg.Connection[Any]) -> None:
    """A gap scan that drops failed runs (a broken runner.missing_slots_v1, installed here)."""
    sync(conn)
    s = slots_of(conn)
    settle(conn, skip=(s[0], s[1]))
    failed, _ = make_run(conn, "job", s[0], status="failed", attempts=(("failed", "schedule"),))
    make_run(conn, "job", s[1], status="dead", attempts=(("failed", "schedule"),) * 3)
    assert found(conn) == set()
    conn.execute("ALTER FUNCTION runner.missing_slots_v1(timestamptz, text, timestamptz)"
                 " RENAME TO missing_slots_whole")
    conn.execute("CREATE FUNCTION runner.missing_slots_v1(a timestamptz, j text DEFAULT NULL,"
                 " s timestamptz DEFAULT NULL) RETURNS TABLE (job_name text, schedule_slot timestamptz,"
                 " partition_key text, state text, run_id bigint) LANGUAGE sql STABLE AS $$"
                 " SELECT m.job_name, m.schedule_slot, m.partition_key, m.state, m.run_id"
                 " FROM runner.missing_slots_whole(a, j, s) m WHERE m.state <> 'failed' $$")
    assert found(conn) == {("unlisted_gap", "job", s[0], "", failed, None)}


def test_running_without_attempt(conn: psycopg.Connection[Any]) -> None:
    sync(conn)
    s = slots_of(conn)
    settle(conn, skip=(s[0], s[1], s[2]))
    # taken over (fence 2) but no attempt at fence 2
    missing, _ = make_run(conn, "job", s[0], status="running", attempts=(("abandoned", "schedule"),), fence=2,
                          attempt=2)
    # the attempt at the run's fence is closed
    closed, (closed_attempt,) = make_run(conn, "job", s[1], status="running", attempts=(("failed", "schedule"),))
    # fine: a running run, its attempt running and beating
    make_run(conn, "job", s[2], status="running", attempts=(("running", "schedule"),))
    assert found(conn) == {("running_without_attempt", "job", s[0], "", missing, None),
                           ("running_without_attempt", "job", s[1], "", closed, closed_attempt)}


def test_attempt_without_run_running(conn: psycopg.Connection[Any]) -> None:
    sync(conn)
    s = slots_of(conn)
    settle(conn, skip=(s[0], s[1]))
    failed, (a1,) = make_run(conn, "job", s[0], status="failed", attempts=(("running", "schedule"),))
    # taken over, the old attempt never closed
    taken, (b1, _) = make_run(conn, "job", s[1], status="running",
                              attempts=(("running", "schedule"), ("running", "recovery")))
    assert found(conn) == {("attempt_without_run_running", "job", s[0], "", failed, a1),
                           ("attempt_without_run_running", "job", s[1], "", taken, b1)}


def test_orphaned_running_on_both_sides_of_stale_after(conn: psycopg.Connection[Any], db_url: str) -> None:
    sync(conn)
    s = slots_of(conn)
    settle(conn, skip=(s[0], s[1]))
    now = db_now(conn)
    old = now - timedelta(seconds=10)
    orphan, (orphan_attempt,) = make_run(conn, "job", s[0], status="running", attempts=(("running", "schedule"),),
                                         started=old, heartbeat=old, lock_key=(7 << 40) + 5)
    held, (held_attempt,) = make_run(conn, "job", s[1], status="running", attempts=(("running", "schedule"),),
                                     started=old, heartbeat=old, lock_key=(9 << 40) + 5)
    # a live owner holds its lock (the one-bigint form, as the runner takes it)
    with psycopg.connect(db_url, autocommit=True) as owner:
        assert owner.execute("SELECT pg_try_advisory_lock(%s)", ((9 << 40) + 6,)).fetchone() == (True,)
        assert found(conn) == {("orphaned_running", "job", s[0], "", orphan, orphan_attempt)}
        assert raw(conn) == {("orphaned_running", "job", s[0], "", orphan, orphan_attempt)}
        # just before stale_after (2 s) has passed since the last beat: not yet
        assert found(conn, as_of=old + timedelta(seconds=1.9)) == set()
        assert found(conn, as_of=old + timedelta(seconds=2.1)) == {
            ("orphaned_running", "job", s[0], "", orphan, orphan_attempt)}
        # a recent heartbeat of a lockless attempt: a takeover is still due, not overdue
        conn.execute("UPDATE runner.attempts SET heartbeat_at = %s WHERE id = %s",
                     (now - timedelta(seconds=1), orphan_attempt))
        assert found(conn, as_of=now) == set()
    # the owner's session is gone: its attempt is orphaned too (once stale)
    conn.execute("UPDATE runner.attempts SET heartbeat_at = %s WHERE id = %s", (old, orphan_attempt))
    assert found(conn) == {("orphaned_running", "job", s[0], "", orphan, orphan_attempt),
                           ("orphaned_running", "job", s[1], "", held, held_attempt)}


def test_orphans_that_finish_during_the_audit_are_not_reported(conn: psycopg.Connection[Any]) -> None:
    """pg_locks is read live: the confirmation drops an attempt no longer running."""
    sync(conn)
    s = slots_of(conn)
    settle(conn, skip=(s[0],))
    old = db_now(conn) - timedelta(seconds=10)
    _, (attempt_id,) = make_run(conn, "job", s[0], status="running", attempts=(("running", "schedule"),),
                                started=old, heartbeat=old)
    first = ledger.dict_rows(conn, audit.Q["check"], {"as_of": None, "since": None, "stale_after": 2.0})
    assert [r["attempt_id"] for r in first] == [attempt_id]
    conn.execute("UPDATE runner.attempts SET status = 'succeeded', finished_at = now() WHERE id = %s",
                 (attempt_id,))
    assert ledger.dict_rows(conn, audit.Q["still_orphaned"], {"attempt_ids": [attempt_id]}) == []


def test_skipped_without_reason(conn: psycopg.Connection[Any]) -> None:
    sync(conn)
    s = slots_of(conn)
    settle(conn, skip=(s[0], s[1], s[2]))
    skipped, _ = make_run(conn, "job", s[0], status="skipped", attempts=())
    cancelled, _ = make_run(conn, "job", s[1], status="cancelled", attempts=(), reason="  ")
    make_run(conn, "job", s[2], status="skipped", attempts=(), reason="overlap=skip: run 1 was running")
    assert found(conn) == {("skipped_without_reason", "job", s[0], "", skipped, None),
                           ("skipped_without_reason", "job", s[1], "", cancelled, None)}


def test_fence_behind(conn: psycopg.Connection[Any]) -> None:
    sync(conn)
    s = slots_of(conn)
    settle(conn, skip=(s[0],))
    run, (_, ahead) = make_run(conn, "job", s[0], attempts=(("succeeded", "schedule"), ("stale", "recovery")),
                               fence=1, attempt=1)
    assert found(conn) == {("fence_behind", "job", s[0], "", run, ahead)}


def test_stranded_run(conn: psycopg.Connection[Any]) -> None:
    sync(conn)
    s = slots_of(conn)
    settle(conn, skip=(s[0], s[1], s[2]))
    stranded, _ = make_run(conn, "job", s[0], status="pending", attempts=(), trigger="backfill")
    conn.execute("UPDATE runner.job_runs SET next_attempt_at = NULL WHERE id = %s", (stranded,))
    # on purpose: a live plan's queued runs wait for the backfill lane, with no due time
    plan = conn.execute("INSERT INTO runner.backfills (job_name, range_from, range_to, requested_by, reason)"
                        " VALUES ('job', %s, %s, 'test', 'test') RETURNING replay_group_id, id",
                        (s[1], s[3])).fetchone()
    assert plan is not None
    for slot in (s[1], s[2]):
        run, _ = make_run(conn, "job", slot, status="pending", attempts=(), trigger="backfill")
        conn.execute("UPDATE runner.job_runs SET next_attempt_at = NULL, replay_group_id = %s WHERE id = %s",
                     (plan[0], run))
    assert found(conn) == {("stranded_run", "job", s[0], "", stranded, None)}
    # once the plan is cancelled, its queued runs must be too (cancel_plan_runs): not here
    conn.execute("UPDATE runner.backfills SET status = 'cancelled' WHERE id = %s", (plan[1],))
    assert kinds(conn) == {"stranded_run"}
    assert len(found(conn)) == 3


def test_effect_key_twice(db_url: str, conn: psycopg.Connection[Any]) -> None:
    """A confirmed key kept by retention (runner.effect_keys: its run was pruned) that
    runner.effects holds again as sent or confirmed: it was sent twice (issue 26, defect 5).
    A kept key alone, or planned again (announced, not sent), is not."""
    sync(conn)
    s = slots_of(conn)
    settle(conn)
    run, _ = make_run(conn, "job", s[0] - HOUR, attempts=(("succeeded", "backfill"),), trigger="backfill")
    conn.execute("INSERT INTO runner.effect_keys (effect_key, job_name, confirmed_at)"
                 " VALUES ('job|mail', 'job', now() - interval '3 days')")
    assert kinds(conn) == set()
    conn.execute("INSERT INTO runner.effects (effect_key, run_id, job_name, status, attempt, fence, send_count)"
                 " VALUES ('job|mail', %s, 'job', 'planned', 1, 1, 0)", (run,))
    assert kinds(conn) == set()
    conn.execute("UPDATE runner.effects SET status = 'confirmed', send_count = 1, sent_at = now(),"
                 " confirmed_at = now(), confirmed_by = 'send' WHERE effect_key = 'job|mail'")
    assert found(conn) == {("effect_key_twice", "job", s[0] - HOUR, "", run, None)}
    out = run_cli("check", "--json", url=db_url)
    assert out.returncode == 1, out.stderr
    [row] = json.loads(out.stdout)
    assert row["invariant"] == "effect_key_twice" and row["detail"]["effect_key"] == "job|mail"
    assert row["detail"]["status"] == "confirmed" and row["detail"]["kept_job"] == "job"


def test_history_unexplained(db_url: str, conn: psycopg.Connection[Any], db_roles: Any) -> None:
    """Issue 28, point 1, as the audit sees it: a row dating a schedule "every 100 years" a
    second after track_from makes the gap scan forget the slots missed since. The worker role
    can no longer write it (tests/security/test_schedule_history.py); a superuser still can,
    with a plain INSERT, and whatever explanation it writes the row is stamped by the trigger
    and reported as history_unexplained (back-dated), and `runner check` exits 1. Not
    reported: the rows of a runner's sync, and a row in force from now of the job's synced
    definition (a DBA's forward append)."""
    db_roles.apply(db_url)
    track_from = sync(conn)
    s = slots_of(conn)
    settle(conn, skip=(s[1], s[2]))  # two missed slots, listed by the gap scan
    assert kinds(conn) == set()
    listed = conn.execute("SELECT count(*) FROM runner.missing_slots").fetchone()
    assert listed == (2,)
    # a schedule change from now on, by the schema owner: runner.jobs, then the history
    conn.execute("UPDATE runner.jobs SET every_interval = '2 hours' WHERE job_name = 'job'")
    conn.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval,"
                 " timezone) VALUES ('job', now() + interval '1 second', 'every', '2 hours', 'UTC')")
    assert kinds(conn) == set()
    worker = db_roles.url(db_url, "worker")
    with psycopg.connect(worker, autocommit=True) as w, pytest.raises(psycopg.errors.InsufficientPrivilege):
        w.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval,"
                  " timezone) VALUES ('job', %s, 'every', '100 years', 'UTC')", (track_from + timedelta(seconds=1),))
    assert conn.execute("SELECT count(*) FROM runner.missing_slots").fetchone() == (2,)
    # the superuser's back-dated row, claiming to be a sync
    conn.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval,"
                 " timezone, explained_by, recorded_at) VALUES ('job', %s, 'every', '100 years', 'UTC', 'sync',"
                 " %s)", (track_from + timedelta(seconds=1), track_from))
    assert conn.execute("SELECT count(*) FROM runner.missing_slots").fetchone() == (0,)  # hidden
    assert found(conn) == {("history_unexplained", "job", track_from + timedelta(seconds=1), None, None, None)}
    out = run_cli("check", "--json", url=db_url)
    assert out.returncode == 1, out.stderr
    [row] = json.loads(out.stdout)
    assert row["invariant"] == "history_unexplained" and row["detail"]["explained_by"] == "schema owner"
    assert row["detail"]["schedule"] == "every 100 years UTC"
    assert "back-dated" in row["detail"]["problem"]


def test_every_invariant_is_named_in_the_sql_the_module_and_the_docs() -> None:
    import re

    from tests.support import ROOT

    sql = (ROOT / "sql" / "functions" / "check_v1.sql").read_text()
    produced = set(re.findall(r"SELECT '([a-z_]+)'", sql))
    assert produced == set(audit.INVARIANTS)
    page = (ROOT / "docs" / "explanation" / "ledger-audit.md").read_text()
    assert set(re.findall(r"^- `([a-z_]+)`:", page, re.MULTILINE)) == set(audit.INVARIANTS)


# -- real loops leave a clean ledger ---------------------------------------------------------


def test_a_ledger_written_by_real_loops_is_clean(db_url: str) -> None:
    app = Runner()
    now = datetime.now(UTC)

    @app.job("tick", every="1s", partitions=["a", "b"])
    def tick(ctx: Any) -> None:
        ctx.db.execute("SELECT 1")

    @app.job("flaky", every="1s", max_attempts=2, backoff="0.05s")
    def flaky(ctx: Any) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("first try fails")

    @app.job("broken", every="1h", max_attempts=2, backoff="0.05s", track_from=now - timedelta(hours=2))
    def broken(ctx: Any) -> None:
        raise RuntimeError("always")

    @app.job("late", every="10m", misfire="coalesce", track_from=now - timedelta(hours=1))
    def late(ctx: Any) -> None:
        pass

    with running_worker(app, db_url):
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'flaky'"
                                          " AND status = 'succeeded' AND attempt = 2") >= 2, timeout=20)
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'broken'"
                                          " AND status = 'dead'") >= 1, timeout=20)
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'late'"
                                          " AND status = 'succeeded'") >= 1, timeout=20)
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'coalesced'") >= 1
    assert_ledger_clean(db_url)
    # an operator reruns a succeeded run (--force): a second success of the same run, on purpose
    from runner.actions import operate

    with psycopg.connect(db_url, autocommit=True) as conn:
        run_id, slot = conn.execute("SELECT id, schedule_slot FROM runner.job_runs WHERE job_name = 'flaky'"
                                    " AND status = 'succeeded' ORDER BY id LIMIT 1").fetchone()
        plan = operate.plan_rerun(conn, "flaky", slot, force=True)
        operate.rerun(conn, plan, reason="audit test", who="test", force=True)
    with running_worker(app, db_url):
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.attempts WHERE run_id = %s"
                                          " AND status = 'succeeded'", (run_id,)) == 2, timeout=20)
    assert_ledger_clean(db_url)


# -- the command -------------------------------------------------------------------------------


def test_check_exit_codes_and_json(db_url: str, conn: psycopg.Connection[Any]) -> None:
    sync(conn)
    s = slots_of(conn)
    out = run_cli("check", url=db_url)
    assert out.returncode == 0, out.stderr
    assert "no violations" in out.stdout
    out = run_cli("check", "--json", url=db_url)
    assert (out.returncode, json.loads(out.stdout)) == (0, [])

    run, _ = make_run(conn, "job", s[0], status="skipped", attempts=())
    out = run_cli("check", "--json", url=db_url)
    assert out.returncode == 1, out.stderr
    assert json.loads(out.stdout) == [{
        "invariant": "skipped_without_reason", "job_name": "job",
        "schedule_slot": s[0].isoformat(), "partition_key": "", "run_id": run, "attempt_id": None,
        "detail": {"run_status": "skipped", "status_reason": None}}]
    out = run_cli("check", url=db_url)
    assert out.returncode == 1
    assert "skipped_without_reason" in out.stdout and "1 violation" in out.stdout
    # --since after the slot: not judged
    out = run_cli("check", "--json", "--since", (s[0] + HOUR).isoformat(), url=db_url)
    assert (out.returncode, json.loads(out.stdout)) == (0, [])


def test_check_usage_and_connection_errors(db_url: str) -> None:
    out = run_cli("check", "--since", "yesterday", url=db_url)
    assert out.returncode == 2
    assert "--since" in out.stderr
    out = run_cli("check", "--since", "2026-01-01T00:00:00", url=db_url)
    assert out.returncode == 2
    out = run_cli("check", url="postgresql://nobody@127.0.0.1:1/none")
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) == 1


def test_the_read_only_role_runs_the_audit(db_url: str, db_roles: Any, conn: psycopg.Connection[Any]) -> None:
    db_roles.apply(db_url)
    sync(conn)
    s = slots_of(conn)
    old = db_now(conn) - timedelta(seconds=10)
    run, (attempt_id,) = make_run(conn, "job", s[0], status="running", attempts=(("running", "schedule"),),
                                  started=old, heartbeat=old)
    out = run_cli("check", "--json", url=db_roles.url(db_url, "readonly"))
    assert out.returncode == 1, out.stderr
    assert [(r["invariant"], r["run_id"], r["attempt_id"]) for r in json.loads(out.stdout)] == [
        ("orphaned_running", run, attempt_id)]
    with psycopg.connect(db_roles.url(db_url, "readonly"), autocommit=True) as reader:
        assert reader.execute("SELECT count(*) FROM runner.violations").fetchone() == (1,)


# -- the classes of issue 26: each planted in a real ledger, `runner check` exits 1 -----------


def check_cli(db_url: str) -> set[tuple[str, int | None]]:
    """`runner check --json`: it exits 1, and the (invariant, run id) it reports."""
    out = run_cli("check", "--json", url=db_url)
    assert out.returncode == 1, out.stdout + out.stderr
    return {(r["invariant"], r["run_id"]) for r in json.loads(out.stdout)}


def test_started_before_slot(conn: psycopg.Connection[Any], db_url: str) -> None:
    sync(conn)
    s = slots_of(conn)
    settle(conn)
    assert found(conn) == set()
    # an attempt that started ten minutes before its slot (a plan ran a slot not yet due); the
    # settled runs, started at or after their slots, are not early
    early, [attempt] = make_run(conn, "job", s[-1] + HOUR, started=s[-1] + 50 * timedelta(minutes=1))
    assert ("started_before_slot", "job", s[-1] + HOUR, "", early, attempt) in found(conn)
    assert kinds(conn) == {"started_before_slot"}
    assert ("started_before_slot", early) in check_cli(db_url)


def plan(conn: psycopg.Connection[Any], job: str, start: datetime, end: datetime, status: str,
         finished: datetime | None = None) -> tuple[int, str]:
    row = conn.execute(
        "INSERT INTO runner.backfills (job_name, range_from, range_to, status, expected_runs, requested_by, reason,"
        " finished_at) VALUES (%s, %s, %s, %s, 0, 'me', 'r', %s) RETURNING id, replay_group_id::text",
        (job, start, end, status, finished)).fetchone()
    assert row is not None
    return row[0], row[1]


def test_plan_completed_not_done(conn: psycopg.Connection[Any], db_url: str) -> None:
    sync(conn)
    s = slots_of(conn)
    settle(conn, skip=(s[0], s[1]))
    # plan 1 left s[0] cancelled (it was cancelled); plan 2 over s[0]..s[1] completed after it
    _, first = plan(conn, "job", s[0], s[1], "cancelled", db_now(conn))
    left, _ = make_run(conn, "job", s[0], status="cancelled", attempts=(), reason="backfill 1 cancelled",
                       trigger="backfill")
    conn.execute("UPDATE runner.job_runs SET replay_group_id = %s, updated_at = now() - interval '1 minute'"
                 " WHERE id = %s", (first, left))
    _, second = plan(conn, "job", s[0], s[2], "completed", db_now(conn))
    own, _ = make_run(conn, "job", s[1], attempts=(("succeeded", "backfill"),), trigger="backfill")
    conn.execute("UPDATE runner.job_runs SET replay_group_id = %s WHERE id = %s", (second, own))
    assert {(r[0], r[4]) for r in found(conn)} == {("plan_completed_not_done", left)}
    assert check_cli(db_url) == {("plan_completed_not_done", left)}
    # a run of its range changed after the plan completed (a later rerun) is not the plan's doing
    conn.execute("UPDATE runner.job_runs SET updated_at = now() + interval '1 minute' WHERE id = %s", (left,))
    assert found(conn) == set()


def test_cover_not_covered(conn: psycopg.Connection[Any], db_url: str) -> None:
    from tests.support import ROOT

    sync(conn)
    s = slots_of(conn)
    settle(conn, skip=tuple(s[:4]))
    # s[0] coalesced into s[1], which is still at work (pending): covered once it succeeds
    make_run(conn, "job", s[1], status="pending", attempts=(), trigger="catch_up")
    make_run(conn, "job", s[0], status="coalesced", attempts=(), reason="coalesced", coalesced_into=s[1])
    # s[2] coalesced into s[3], which died: covered by nothing until s[3] is rerun
    cover, _ = make_run(conn, "job", s[3], status="dead", attempts=(("failed", "catch_up"),), trigger="catch_up")
    lost, _ = make_run(conn, "job", s[2], status="coalesced", attempts=(), reason="coalesced", coalesced_into=s[3])
    # the gap scan lists it, with the cover's state and a reason naming the cover: the audit is clean
    listed = conn.execute("SELECT run_id, state, status_reason FROM runner.missing_slots_v1(now())"
                          " WHERE schedule_slot IN (%s, %s) ORDER BY schedule_slot", (s[2], s[3])).fetchall()
    assert [(r[0], r[1]) for r in listed] == [(lost, "dead"), (cover, "dead")]
    assert f"(run {cover}), which is dead" in listed[0][2]
    assert found(conn) == set()
    # a gap scan that stops listing it (as before issue 26): runner check names the class
    body = (ROOT / "sql" / "views" / "missing_slots.sql").read_text()
    marker = "UNION ALL\n-- coalesced runs whose covering run is dead or awaiting approval"
    assert marker in body
    conn.execute(body.split(marker)[0] + "$$;")
    assert {(r[0], r[4]) for r in found(conn)} == {("cover_not_covered", lost)}
    assert check_cli(db_url) == {("cover_not_covered", lost)}


def test_checkpoint_not_owned(conn: psycopg.Connection[Any], db_url: str) -> None:
    """A run's committed checkpoint written by a fence that had lost the run (issue 33)."""
    sync(conn)
    s = slots_of(conn)
    settle(conn, skip=(s[0],))
    run, [first] = make_run(conn, "job", s[0], status="running", attempts=(("running", "schedule"),))

    def checkpoint(fence: int, state: str) -> Any:
        return conn.execute("SELECT checkpoints FROM runner.checkpoint_v1(%s, %s, %s::jsonb, 'test')",
                            (run, fence, state)).fetchone()

    assert checkpoint(1, '{"next": 100}') == (1,)
    # the owner's lock session died: another session takes the run over (fence 2), having
    # read the run's checkpoint count under its row lock
    [started] = conn.execute(
        "SELECT outcome FROM runner.start_attempts_v1(ARRAY[%s]::bigint[], ARRAY[1]::bigint[], true,"
        " 'host', 2, gen_random_uuid(), 21077)", (run,)).fetchall()
    assert started == ("started",)
    assert conn.execute("SELECT checkpoints_before FROM runner.attempts WHERE run_id = %s AND fence = 2",
                        (run,)).fetchone() == (1,)
    # the old owner's checkpoint is refused (nothing written), the new owner's lands
    assert checkpoint(1, '{"next": 200}') is None
    assert checkpoint(2, '{"next": 200}') == (2,)
    [(landed,)] = conn.execute("SELECT recorded FROM runner.finish_attempts_v1(%s::jsonb)", (json.dumps(
        [[run, 2, "succeeded", None, None, None, None, None, None]]),)).fetchall()
    conn.execute("SELECT pg_advisory_unlock_all()")
    assert landed
    assert found(conn) == set()
    # what a checkpoint writer without the fence check would leave: the fence-1 attempt's
    # state committed after fence 2 had taken the run (fence 2 started from count 1)
    conn.execute("UPDATE runner.job_runs SET checkpoint = '{\"next\": 300}', checkpoint_fence = 1,"
                 " checkpoints = checkpoints + 1 WHERE id = %s", (run,))
    second = conn.execute("SELECT id FROM runner.attempts WHERE run_id = %s AND fence = 2", (run,)).fetchone()
    assert found(conn) == {("checkpoint_not_owned", "job", s[0], "", run, second[0])}  # type: ignore[index]
    assert check_cli(db_url) == {("checkpoint_not_owned", run)}
    # a fence the run never had, and one above the run's fence, are reported too
    conn.execute("UPDATE runner.job_runs SET checkpoint_fence = 7 WHERE id = %s", (run,))
    assert {r[0] for r in found(conn)} == {"checkpoint_not_owned"}
    conn.execute("UPDATE runner.job_runs SET checkpoint_fence = 2, checkpoints = 2 WHERE id = %s", (run,))
    assert found(conn) == set()
    assert first
