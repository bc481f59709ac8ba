"""Retention (issue 16, point 2): runner.prune_v1 deletes, in bounded batches and one caller
at a time, the runs a job's stored policy lets go — only runs that account for their slot,
only below the gap scan's trusted watermark — with their attempts and effects, never a
request; the gap scan and the ledger audit are the same after pruning as before; `runner
prune` shows (--dry-run) and archives (a table or a file) before it deletes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from runner.actions import retention
from runner.errors import JobDefinitionError
from runner.model.app import Retention, Runner, parse_retention
from runner.model.schedule import ScheduleError
from tests.support import ROOT, rows, runner_cmd, scalar
from tests.test_cli import one_line_error
from tests.test_operators import cli, make_run

H = timedelta(hours=1)
D = timedelta(days=1)
POLICY = {"succeeded_seconds": 86400.0}  # 1 day; the others 6 days, and dead runs kept


def seed(conn: psycopg.Connection[Any], job: str = "j", days: int = 10, wm_age: timedelta = 2 * D,
         policy: dict[str, float] | None = POLICY) -> dict[str, Any]:
    """An hourly job tracked for ``days`` days: every slot succeeded (one attempt each, an
    effect on some), except a dead run 9 days back, a retried success 4 days back, an
    operator's rerun 3 days back, a slot never started 7 days back; the watermark advanced to
    ``wm_age`` ago; one request row."""
    now = conn.execute("SELECT date_trunc('hour', now(), 'UTC')").fetchone()[0]
    start = now - days * D
    conn.execute("INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, options, track_from,"
                 " first_registered_at) VALUES (%s, 'every', '1 hour', %s, %s, %s)",
                 (job, Jsonb({"retention": policy} if policy else {}), start, start))
    conn.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval, timezone)"
                 " SELECT job_name, track_from, schedule_kind, every_interval, timezone FROM runner.jobs"
                 " WHERE job_name = %s", (job,))
    special = {now - 9 * D: "dead", now - 4 * D: "retried", now - 3 * D: "manual", now - 7 * D: "none"}
    slot = start
    while slot <= now:
        kind = special.get(slot)
        if kind != "none":
            run = make_run(conn, job, slot, status="dead" if kind == "dead" else "succeeded",
                           started=slot, finished=slot + timedelta(minutes=1),
                           attempt=2 if kind == "retried" else 1)
            conn.execute("INSERT INTO runner.attempts (run_id, attempt, fence, trigger, owner_host, owner_pid,"
                         " owner_instance, lock_key, status, started_at, finished_at) VALUES (%s, 1, 1,"
                         " 'schedule', 'h', 1, gen_random_uuid(), 1, 'succeeded', %s, %s)", (run, slot, slot))
            if slot.hour == 0:
                conn.execute("INSERT INTO runner.effects (job_name, run_id, effect_key, status, attempt, fence,"
                             " send_count, confirmed_at, confirmed_by) VALUES (%s, %s, %s, 'confirmed', 1, 1, 1,"
                             " now(), 'send')", (job, run, f"e-{run}"))
            if kind == "manual":
                conn.execute("UPDATE runner.job_runs SET trigger = 'manual', uncounted_attempts = 1"
                             " WHERE id = %s", (run,))
        slot += H
    conn.execute("SELECT runner.advance_watermarks_v1(%s)", (now - wm_age,))
    conn.execute("INSERT INTO runner.requests (action, job_name, who, reason) VALUES ('rerun', %s, 'w', 'r')",
                 (job,))
    return {"now": now, "start": start, "wm": now - wm_age, **{v: k for k, v in special.items()}}


def gaps(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT job_name, schedule_slot, partition_key, state, run_id"
                        " FROM runner.missing_slots ORDER BY 1, 2, 3").fetchall()


def violations(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT invariant, job_name, schedule_slot, run_id FROM runner.check_v1()"
                        " ORDER BY 1, 2, 3, 4").fetchall()


def prune(conn: psycopg.Connection[Any], batch: int = 10000, as_of: Any = None,
          dry_run: bool = False) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT job_name, run_id, schedule_slot, status, attempts, effects"
                        " FROM runner.prune_v1(%s, %s, %s)", (batch, as_of, dry_run)).fetchall()


def slots_of(conn: psycopg.Connection[Any], job: str = "j") -> set[datetime]:
    return {r[0] for r in conn.execute("SELECT schedule_slot FROM runner.job_runs WHERE job_name = %s", (job,))}


def test_prune_keeps_what_the_policy_and_the_gap_scan_need(tx: psycopg.Connection[Any]) -> None:
    s = seed(tx)
    before_gaps, before_checks = gaps(tx), violations(tx)
    assert [(g[1], g[3]) for g in before_gaps] == [(s["dead"], "dead"), (s["none"], "never_started")]
    runs_before = slots_of(tx)
    gone = prune(tx)
    gone_slots = {r[2] for r in gone}
    # succeeded runs at or below the watermark, older than a day, went; with their attempts
    # and effects (returned for the archive)
    assert gone_slots == {t for t in runs_before if t <= s["wm"]} - {s["dead"], s["retried"], s["manual"]}
    assert all(r[3] == "succeeded" and len(r[4]) == 1 for r in gone)
    assert sum(len(r[5]) for r in gone) == len([t for t in gone_slots if t.hour == 0]) > 0
    # kept: the dead run (not accounted for), the retried and the operator's run (5 days),
    # every run above the watermark although older than a day
    kept = slots_of(tx)
    assert {s["dead"], s["retried"], s["manual"]} <= kept
    assert {t for t in runs_before if t > s["wm"]} <= kept
    assert tx.execute("SELECT count(*) FROM runner.attempts a WHERE NOT EXISTS"
                      " (SELECT 1 FROM runner.job_runs r WHERE r.id = a.run_id)").fetchone()[0] == 0
    assert tx.execute("SELECT count(*) FROM runner.effects WHERE run_id IS NULL").fetchone()[0] == 0
    assert tx.execute("SELECT count(*) FROM runner.requests").fetchone()[0] == 1
    assert tx.execute("SELECT pruned_through FROM runner.gap_watermarks").fetchone()[0] == max(gone_slots)
    # the gap scan and the audit: the same as before
    assert gaps(tx) == before_gaps
    assert violations(tx) == before_checks
    tx.execute("SELECT runner.advance_watermarks_v1()")
    assert [(g[1], g[3]) for g in gaps(tx)] == [(s["dead"], "dead"), (s["none"], "never_started")]
    # the watermark moved on: the runs it passed that are old enough go next, nothing else
    assert prune(tx, batch=10, dry_run=True) and min(r[2] for r in prune(tx)) > s["wm"]
    assert [(g[1], g[3]) for g in gaps(tx)] == [(s["dead"], "dead"), (s["none"], "never_started")]
    assert prune(tx) == []


def test_the_long_period_applies_once_it_is_over(tx: psycopg.Connection[Any]) -> None:
    """failed_seconds set: dead runs and failed runs with no retry pending go after it too;
    pending, running, awaiting approval and a failed run with a retry pending never do.
    Without failed_seconds (6 x succeeded_seconds for the others) dead runs stay."""
    s = seed(tx, policy={"succeeded_seconds": 86400.0, "failed_seconds": 3.5 * 86400.0})
    keep = {}
    for days, status, retry in ((8, "failed", False), (6, "failed", True), (5, "pending", True),
                                (5.5, "running", False), (6.5, "awaiting_approval", False)):
        slot = s["now"] - timedelta(days=days) + timedelta(minutes=30)
        keep[status, retry] = make_run(tx, "j", slot, status=status, started=slot,
                                       finished=slot + timedelta(minutes=1))
        tx.execute("UPDATE runner.job_runs SET next_attempt_at = CASE WHEN %s THEN now() END WHERE id = %s",
                   (retry, keep[status, retry]))
    # a failed run of a replay plan still running: the plan may run it again
    group = tx.execute("INSERT INTO runner.backfills (job_name, range_from, range_to, requested_by, reason)"
                       " VALUES ('j', %s, %s, 'w', 'r') RETURNING replay_group_id",
                       (s["start"], s["now"])).fetchone()[0]
    slot = s["now"] - timedelta(days=7.5) + timedelta(minutes=30)
    keep["planned", False] = make_run(tx, "j", slot, status="failed", started=slot, finished=slot)
    tx.execute("UPDATE runner.job_runs SET replay_group_id = %s WHERE id = %s", (group, keep["planned", False]))
    gone = prune(tx)
    assert {r[3] for r in gone} == {"succeeded", "dead", "failed"}
    assert s["retried"] in {r[2] for r in gone} and s["dead"] in {r[2] for r in gone}
    assert {r[1] for r in gone if r[3] == "failed"} == {keep["failed", False]}
    assert s["manual"] in slots_of(tx)
    assert {keep[k] for k in keep if k != ("failed", False)} <= {
        r[0] for r in tx.execute("SELECT id FROM runner.job_runs")}
    # pruning the dead run ended its listing, and the audit is content
    assert [(g[1], g[3]) for g in gaps(tx) if g[3] == "dead"] == []
    assert [v for v in violations(tx) if v[0] == "unlisted_gap"] == []

    other = seed(tx, job="k", policy={"succeeded_seconds": 86400.0})
    gone = prune(tx)
    assert gone and {r[0] for r in gone} == {"k"} and {r[3] for r in gone} == {"succeeded"}
    assert {other["dead"], other["retried"], other["manual"]} <= slots_of(tx, "k")


def test_a_pass_is_bounded_and_oldest_first(tx: psycopg.Connection[Any]) -> None:
    s = seed(tx)
    first = prune(tx, batch=10)
    assert [r[2] for r in first] == [s["start"] + n * H for n in range(10)]
    assert tx.execute("SELECT pruned_through FROM runner.gap_watermarks").fetchone()[0] == s["start"] + 9 * H
    assert len(prune(tx, batch=0)) == 0


def one(conn: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    return conn.execute(query, params or None).fetchone()[0]  # type: ignore[index]


def runs_read(conn: psycopg.Connection[Any]) -> int:
    """Rows of runner.job_runs this transaction has fetched so far (index and heap scans)."""
    return int(one(conn, "SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0)"
                            " FROM pg_stat_xact_user_tables WHERE relid = 'runner.job_runs'::regclass"))


def test_a_pass_reads_a_bounded_number_of_the_runs_it_keeps(tx: psycopg.Connection[Any]) -> None:
    """5,000 dead runs below the watermark that the policy keeps (no failed_seconds) and nothing
    to prune: a pass reads at most the batch plus the sweep's step (1,000) of them, not all
    (the query before revision 0021 read every one on every pass); the sweep goes on from its
    cursor, and a run that may go is found within a sweep."""
    now = tx.execute("SELECT date_trunc('minute', now())").fetchone()[0]
    start = now - 10 * D
    tx.execute("INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, options, track_from,"
               " first_registered_at) VALUES ('d', 'every', '1 minute', %s, %s, %s)",
               (Jsonb({"retention": {"succeeded_seconds": 3600.0}}), start, start))
    tx.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval, timezone)"
               " SELECT job_name, track_from, schedule_kind, every_interval, timezone FROM runner.jobs")
    # runs at every minute of the first 5,000, dead; the rest of the 10 days: a hole each,
    # nothing else (never_started slots are no runs to read)
    tx.execute("INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date,"
               " window_start, window_end, status, trigger, attempt, fence, idempotency_key, started_at,"
               " finished_at, updated_at) SELECT 'd', t, '', t::date, t, t, 'dead', 'schedule', 1, 1, 'k',"
               " t, t, t FROM generate_series(%s::timestamptz, %s::timestamptz - interval '1 minute',"
               " interval '1 minute') AS t", (start, start + 5000 * timedelta(minutes=1)))
    tx.execute("SELECT runner.advance_watermarks_v1(%s)", (start + 5000 * timedelta(minutes=1),))
    reads = []
    for _ in range(6):
        before = runs_read(tx)
        assert prune(tx, batch=10) == []
        reads.append(runs_read(tx) - before)
    assert max(reads) <= 10 + 1000 + 10, reads
    # the sweep went through all 5,000 in 5 passes and started again at the bottom
    cursors = one(tx, "SELECT prune_cursor FROM runner.gap_watermarks WHERE job_name = 'd'")
    assert cursors is not None and cursors < start + 2 * 1010 * timedelta(minutes=1)
    # a run that may go, high up in the range: found within a sweep of passes
    tx.execute("UPDATE runner.job_runs SET status = 'succeeded' WHERE job_name = 'd' AND schedule_slot = %s",
               (start + 4990 * timedelta(minutes=1),))
    found = []
    for _ in range(6):
        found += prune(tx, batch=10)
    assert [r[2] for r in found] == [start + 4990 * timedelta(minutes=1)]
    # `runner prune` goes on while a sweep moves, though each pass takes nothing; a dry run
    # looks at everything from the bottom
    late = start + 4995 * timedelta(minutes=1)
    tx.execute("UPDATE runner.job_runs SET status = 'succeeded' WHERE job_name = 'd' AND schedule_slot = %s",
               (late,))
    assert [r[2] for r in prune(tx, batch=10, dry_run=True)] == [late]
    report = retention.prune(tx, 21077, batch=10)
    assert report.runs == 1 and report.passes >= 2
    assert prune(tx, batch=10, dry_run=True) == []


def test_slot_fanouts_go_once_their_slot_is_empty(tx: psycopg.Connection[Any]) -> None:
    """A dynamic-partition job's fan-out rows at or below pruned_through go in the same pass,
    once no run and no hole of their slot is left: the dead run's and the hole's stay."""
    s = seed(tx)
    tx.execute("UPDATE runner.job_schedules SET dynamic_partitions = true WHERE job_name = 'j'")
    tx.execute("INSERT INTO runner.slot_fanouts (job_name, schedule_slot, partitions)"
               " SELECT 'j', t, ARRAY[''] FROM generate_series(%s::timestamptz, %s, interval '1 hour') AS t",
               (s["start"], s["now"]))
    # a fan-out to no partitions (no run, no hole), below the watermark
    tx.execute("INSERT INTO runner.slot_fanouts (job_name, schedule_slot, partitions) VALUES ('j', %s, '{}')",
               (s["start"] + timedelta(minutes=30),))
    before = gaps(tx)
    gone = prune(tx, batch=20)
    pruned = one(tx, "SELECT pruned_through FROM runner.gap_watermarks")
    assert pruned == max(r[2] for r in gone) == s["start"] + 19 * H

    def fanouts() -> set[datetime]:
        return {r[0] for r in tx.execute("SELECT schedule_slot FROM runner.slot_fanouts")}
    assert fanouts() == {s["start"] + n * H for n in range(20, 24 * 10 + 1)}
    prune(tx)
    pruned = one(tx, "SELECT pruned_through FROM runner.gap_watermarks")
    left = fanouts()
    assert {t for t in left if t <= pruned} == {s["dead"], s["none"], s["retried"], s["manual"]}
    assert {t for t in left if t > pruned} == {s["start"] + n * H for n in range(10 * 24 + 1)
                                               if s["start"] + n * H > pruned}
    assert gaps(tx) == before
    # dry run: nothing goes
    tx.execute("DELETE FROM runner.job_runs WHERE schedule_slot = %s", (s["retried"],))
    tx.execute("UPDATE runner.gap_watermarks SET prune_cursor = NULL")
    prune(tx, dry_run=True)
    assert s["retried"] in fanouts()
    prune(tx)
    assert s["retried"] not in fanouts()


def test_the_caller_chooses_only_the_batch(tx: psycopg.Connection[Any]) -> None:
    """as_of can only move the clock back (a future one is clamped to now()); a job without a
    policy is never pruned; periods under an hour count as an hour."""
    s = seed(tx)
    seed(tx, job="keep", policy=None)
    seed(tx, job="tiny", days=1, wm_age=timedelta(0), policy={"succeeded_seconds": 1.0, "failed_seconds": 1.0})
    tiny = {r[0]: r[1] for r in tx.execute("SELECT schedule_slot, finished_at < now() - interval '1 hour'"
                                           " FROM runner.job_runs WHERE job_name = 'tiny'")}
    at_now = {r[1] for r in prune(tx, dry_run=True)}
    assert {r[1] for r in prune(tx, as_of=s["now"] + 3650 * D, dry_run=True)} == at_now
    assert len(prune(tx, as_of=s["now"] - 30 * D, dry_run=True)) == 0
    gone = prune(tx)
    assert {r[1] for r in gone} == at_now
    assert {r[0] for r in gone} == {"j", "tiny"}
    # tiny keeps every run that finished within the hour (its 1 s counts as 1 hour)
    assert {r[2] for r in gone if r[0] == "tiny"} == {t for t, old in tiny.items() if old}
    assert any(not old for old in tiny.values())


def test_dry_run_deletes_nothing(tx: psycopg.Connection[Any]) -> None:
    seed(tx)
    before = slots_of(tx)
    assert len(prune(tx, dry_run=True)) > 100
    assert slots_of(tx) == before
    assert tx.execute("SELECT pruned_through FROM runner.gap_watermarks").fetchone()[0] is None


def test_pruned_slots_stay_unexpected_after_the_watermark_is_rebuilt(tx: psycopg.Connection[Any]) -> None:
    """A track_from moved earlier (the worker may do that) makes the watermark untrusted and
    the advance expand the whole range again: pruned slots must not come back as missing."""
    s = seed(tx)
    prune(tx)
    before = gaps(tx)
    tx.execute("UPDATE runner.jobs SET track_from = track_from - interval '1 hour'")
    assert gaps(tx) == before
    tx.execute("SELECT runner.advance_watermarks_v1()")
    assert gaps(tx) == before
    assert [v for v in violations(tx) if v[0] == "unlisted_gap"] == []
    # a schedule change below the old watermark: the same
    tx.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval, timezone)"
               " VALUES ('j', %s, 'every', '30 minutes', 'UTC')", (s["start"] + 2 * D,))
    assert [g for g in gaps(tx) if g[1] <= s["start"] + 5 * D and g[3] == "never_started"] == [
        g for g in before if g[1] <= s["start"] + 5 * D and g[3] == "never_started"]


def test_one_pruner_at_a_time(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        seed(conn)
    with psycopg.connect(db_url) as a, psycopg.connect(db_url, autocommit=True) as b:
        b.execute("SET lock_timeout = '5s'")  # b must not wait for a's rows either
        assert len(prune(a, batch=5)) == 5  # a's transaction holds the prune lock
        assert prune(b) == []  # at once, nothing
        a.commit()
        assert len(prune(b, batch=5)) == 5


# -- the job option ------------------------------------------------------------------------


def test_retention_option_forms_and_refusals() -> None:
    assert parse_retention("30d") == Retention(30 * D, 180 * D)
    assert parse_retention({"succeeded": "30d", "failed": "90d"}) == Retention(30 * D, 90 * D)
    for bad in ("10m", {"failed": "1d"}, {"succeeded": "2d", "failed": "1d"}, {"succeeded": "1d", "x": 1},
                True, ["1d"]):
        with pytest.raises(ScheduleError):
            parse_retention(bad)
    app = Runner()
    with pytest.raises(JobDefinitionError, match="retention"):
        app.job("j", every="1h", retention="5m")


# -- the command ---------------------------------------------------------------------------


def test_runner_prune_dry_run_then_archive_to_a_table(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        seed(conn)
        before = slots_of(conn)
        missing = gaps(conn)
    out = cli("prune", "--dry-run", "--limit", "20", url=db_url)
    assert out.returncode == 0, out.stderr
    assert "would prune 20 runs" in out.stdout and "j: succeeded 20" in out.stdout
    with psycopg.connect(db_url) as conn:
        assert slots_of(conn) == before
    out = cli("prune", "--batch", "50", "--archive-table", "public.pruned_runs", "--json", url=db_url)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["runs"] > 100
    archived = rows(db_url, "SELECT run_id, status, jsonb_array_length(attempts), run ->> 'job_name'"
                            " FROM public.pruned_runs")
    assert len(archived) == report["runs"] == len(before) - len(rows(db_url, "SELECT 1 FROM runner.job_runs"))
    assert all(a[1] == "succeeded" and a[2] == 1 and a[3] == "j" for a in archived)
    with psycopg.connect(db_url) as conn:
        assert gaps(conn) == missing
        assert [v for v in violations(conn) if v[0] == "unlisted_gap"] == []


def test_runner_prune_archives_to_a_file(db_url: str, tmp_path: Path) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        seed(conn)
    target = tmp_path / "archive.jsonl"
    out = cli("prune", "--archive-file", str(target), url=db_url)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert lines and int(out.stdout.split()[1]) == len(lines)
    assert {line["run_id"] for line in lines}.isdisjoint(
        {r[0] for r in rows(db_url, "SELECT id FROM runner.job_runs")})
    assert all(line["run"]["status"] == "succeeded" and len(line["attempts"]) == 1 for line in lines)


def test_an_archive_file_is_private_and_a_planted_symlink_is_not_followed(db_url: str, tmp_path: Path) -> None:
    """Issue 28: the archive holds whole runs. A symbolic link planted where the archive is
    to be written (pointing at a file the attacker wants filled, or will read) is refused,
    nothing pruned, the link's target untouched; a file the command creates is 0600 under
    a permissive umask."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        seed(conn)
    before = len(rows(db_url, "SELECT 1 FROM runner.job_runs"))
    victim = tmp_path / "victim.txt"
    victim.write_text("kept\n")
    planted = tmp_path / "planted.jsonl"
    planted.symlink_to(victim)
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "made-by-the-link.jsonl")
    for link in (planted, dangling):
        out = cli("prune", "--archive-file", str(link), url=db_url)
        assert out.returncode == 1, out.stdout
        assert "symbolic link" in one_line_error(out)
    assert victim.read_text() == "kept\n"
    assert not (tmp_path / "made-by-the-link.jsonl").exists()
    assert len(rows(db_url, "SELECT 1 FROM runner.job_runs")) == before  # nothing pruned
    target = tmp_path / "archive.jsonl"
    # a plain open under umask 0 would make it 0666: a real process of its own with that umask
    done = subprocess.run(runner_cmd("prune", "--archive-file", str(target)), capture_output=True, text=True,
                          env={**os.environ, "RUNNER_DATABASE_URL": db_url}, cwd=ROOT, timeout=120, umask=0)
    assert done.returncode == 0, done.stderr
    assert target.read_text() and stat.S_IMODE(target.lstat().st_mode) == 0o600


def test_an_archive_that_cannot_be_written_deletes_nothing(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        seed(conn)
        conn.execute("CREATE TABLE public.taken (x int)")
        before = slots_of(conn)
    out = cli("prune", "--archive-table", "public.taken", url=db_url)
    assert out.returncode == 1
    assert "database error" in out.stderr
    with psycopg.connect(db_url) as conn:
        assert slots_of(conn) == before
    assert scalar(db_url, "SELECT pruned_through FROM runner.gap_watermarks") is None


def user_tables(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT schemaname, tablename FROM pg_tables"
                        " WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2").fetchall()


@pytest.mark.parametrize("name", [
    'a"b', "x; DROP TABLE runner.job_runs; --", "Pruned", "public.Pruned", "a.b.c", "", ".x", "x.",
    "runner.archive", "pg_catalog.archive", "information_schema.archive", "x" * 64, "1abc", "a b",
])
def test_archive_table_names_that_need_quoting_are_refused(db_url: str, name: str) -> None:
    """Only plain lowercase names (what psql finds unquoted), never in the runner's schema or
    a system one: refused before anything is read or written, one line, usage exit code."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        seed(conn)
        before, tables = slots_of(conn), user_tables(conn)
    out = cli("prune", "--archive-table", name, url=db_url)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "--archive-table" in one_line_error(out)
    with psycopg.connect(db_url) as conn:
        assert slots_of(conn) == before and user_tables(conn) == tables
    assert scalar(db_url, "SELECT pruned_through FROM runner.gap_watermarks") is None


def test_plain_archive_table_names_are_taken_as_they_are(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        seed(conn)
    out = cli("prune", "--limit", "5", "--archive-table", "archive_2026_q1", url=db_url)
    assert out.returncode == 0, out.stderr
    assert scalar(db_url, "SELECT count(*) FROM archive_2026_q1") == 5


@pytest.mark.parametrize("where", ["missing-dir/archive.jsonl", ".", "/dev/full"])
def test_an_archive_file_that_cannot_be_written_deletes_nothing(db_url: str, tmp_path: Path, where: str) -> None:
    """A folder that does not exist, a directory, a device that is full (the open succeeds,
    the write fails): one line, exit 1, no run deleted."""
    target = where if where.startswith("/") else str(tmp_path / where)
    if where.startswith("/") and not Path(target).exists():
        pytest.skip(f"{target} does not exist here")
    with psycopg.connect(db_url, autocommit=True) as conn:
        seed(conn)
        before = slots_of(conn)
    out = cli("prune", "--archive-file", target, url=db_url)
    assert out.returncode == 1, (out.stdout, out.stderr)
    line = one_line_error(out)
    assert "--archive-file" in line and "Traceback" not in out.stderr
    with psycopg.connect(db_url) as conn:
        assert slots_of(conn) == before
    assert scalar(db_url, "SELECT pruned_through FROM runner.gap_watermarks") is None


def test_a_dry_run_makes_no_archive(db_url: str, tmp_path: Path) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        seed(conn)
        tables = user_tables(conn)
    target = tmp_path / "archive.jsonl"
    for option, value in (("--archive-file", str(target)), ("--archive-table", "dry_archive")):
        out = cli("prune", "--dry-run", option, value, url=db_url)
        assert out.returncode == 0, out.stderr
        assert "would prune" in out.stdout
    assert not target.exists()
    with psycopg.connect(db_url) as conn:
        assert user_tables(conn) == tables


def test_the_archive_file_is_on_disk_before_the_deletion_commits(
        db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pass's lines are flushed and fsync'ed while its deletion is not yet committed (a
    crash after the commit must not lose archived lines the ledger no longer has)."""
    import os

    from runner.actions import retention

    with psycopg.connect(db_url, autocommit=True) as conn:
        seed(conn)
        total = scalar(db_url, "SELECT count(*) FROM runner.job_runs")
    synced: list[tuple[int, int, int]] = []  # (bytes on disk, lines, runs the ledger still has)
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        text = (tmp_path / "archive.jsonl").read_text()
        synced.append((len(text), len(text.splitlines()), scalar(db_url, "SELECT count(*) FROM runner.job_runs")))

    monkeypatch.setattr(retention.os, "fsync", fsync)
    with psycopg.connect(db_url, autocommit=True) as conn, \
            (tmp_path / "archive.jsonl").open("a", encoding="utf-8") as out:
        report = retention.prune(conn, 21077, batch=50, archive_file=out)
    assert report.passes >= 3 and len(synced) == report.passes - (report.runs % 50 == 0)
    # at each sync the pass's lines are in the file and its runs not yet gone from the ledger
    for n, (_, lines, left) in enumerate(synced):
        assert lines == min(50 * (n + 1), report.runs)
        assert left == total - 50 * n
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs") == total - report.runs


def test_runner_prune_waits_for_a_runners_pass_instead_of_reporting_nothing(db_url: str) -> None:
    """A runner's retention pass holds the fleet's lock: `runner prune` waits for it to end,
    then prunes, instead of reading the held lock as "nothing left" (pruned 0 runs)."""
    import os
    import subprocess

    from tests.support import ROOT, eventually, runner_cmd

    with psycopg.connect(db_url, autocommit=True) as conn:
        seed(conn)
    waiting = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
               " AND classid = 21077 AND objid = 4294967295 AND objsubid = 2")  # (21077, -1)
    with psycopg.connect(db_url) as duty:
        duty.execute("SELECT pg_advisory_xact_lock(21077, runner.duty_lock_key_v1('prune'))")
        proc = subprocess.Popen(runner_cmd("prune", "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=ROOT, env={**os.environ, "RUNNER_DATABASE_URL": db_url})
        try:
            eventually(lambda: scalar(db_url, waiting) == 1, timeout=60, message="runner prune waits")
            assert proc.poll() is None
        finally:
            duty.rollback()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out)["runs"] > 100


def test_runner_prune_as_the_operator_role(db_url: str, db_roles: Any) -> None:
    """The operator role (sql/roles.sql) may wait for the fleet's pruning lock and prune; it
    holds no DELETE on the ledger (runner.prune_v1 deletes as the schema owner)."""
    db_roles.apply(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        seed(conn)
        total = slots_of(conn)
    out = cli("prune", "--json", url=db_roles.url(db_url, "operator"))
    assert out.returncode == 0, out.stderr
    assert 0 < json.loads(out.stdout)["runs"] == len(total) - len(rows(db_url, "SELECT 1 FROM runner.job_runs"))


def test_runs_coalesced_into_a_cover_that_is_not_covered_are_kept(tx: psycopg.Connection[Any]) -> None:
    """A coalesced run accounts for its slot only through its cover (runner.run_covered_v1):
    while the cover is dead, the runs coalesced into it are listed by the gap scan, and
    retention must keep them, else their slots vanish from the scan below the pruned mark."""
    s = seed(tx)
    cover = s["now"] - 6 * D
    coalesced = [cover - k * H for k in (1, 2, 3)]
    tx.execute("UPDATE runner.job_runs SET status = 'dead', last_error = 'boom' WHERE job_name = 'j'"
               " AND schedule_slot = %s", (cover,))
    tx.execute("UPDATE runner.job_runs SET status = 'coalesced', coalesced_into_slot = %s,"
               " status_reason = 'coalesced by catch_up' WHERE job_name = 'j' AND schedule_slot = ANY(%s)",
               (cover, coalesced))
    listed = {(g[1], g[3]) for g in gaps(tx)}
    assert {(t, "dead") for t in coalesced} | {(cover, "dead")} <= listed
    gone = {r[2] for r in prune(tx)}
    assert gone and not gone & set(coalesced)
    assert {(g[1], g[3]) for g in gaps(tx)} == listed
    # once the cover succeeds, they may go like any covered run
    tx.execute("UPDATE runner.job_runs SET status = 'succeeded', last_error = NULL WHERE job_name = 'j'"
               " AND schedule_slot = %s", (cover,))
    tx.execute("SELECT runner.advance_watermarks_v1(%s)", (s["wm"],))
    assert set(coalesced) <= {r[2] for r in prune(tx)}
