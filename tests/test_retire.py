"""Retiring a job (runner retire / unretire, issue 16): audited like pause; after the
retirement instant the gap scan, its watermarks, the alerts and the ledger audit stop
expecting the job's slots, live runners stop starting them, and a runner whose code still
defines the job refuses to start until it is unretired. Slots between a retirement and an
unretirement are never expected. A job that no live runner defines is flagged in the alerts
(job_not_in_code), never retired silently."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner.model.app import Runner
from runner.store import ledger
from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, run_cli, scalar
from tests.test_operators import cli, make_job, make_run, requests

APP = "tests/apps/operators.py:app"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
H = timedelta(hours=1)


def missing(conn: psycopg.Connection[Any], as_of: datetime, job: str = "j") -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT schedule_slot, state FROM runner.missing_slots_v1(%s, %s) ORDER BY 1", (as_of, job)).fetchall()


def retire_between(conn: psycopg.Connection[Any], job: str, start: datetime, end: datetime | None) -> None:
    """A retirement as the functions record it, at chosen instants (the functions use now())."""
    conn.execute("INSERT INTO runner.job_retirements (job_name, retired_from, retired_until) VALUES (%s, %s, %s)",
                 (job, start, end))
    if end is None:
        conn.execute("UPDATE runner.jobs SET retired_at = %s WHERE job_name = %s", (start, job))


def schedule(conn: psycopg.Connection[Any], job: str = "j") -> None:
    conn.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval,"
                 " timezone) SELECT job_name, track_from, schedule_kind, every_interval, timezone"
                 " FROM runner.jobs WHERE job_name = %s", (job,))


def unlisted(conn: psycopg.Connection[Any], as_of: datetime) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT invariant, schedule_slot, detail FROM runner.check_v1(%s)"
                        " WHERE invariant = 'unlisted_gap'", (as_of,)).fetchall()


# -- the gap scan, its watermarks and the audit ---------------------------------------------


def test_slots_after_a_retirement_are_not_expected(tx: psycopg.Connection[Any]) -> None:
    make_job(tx, "j", registered=T0)
    schedule(tx)
    for h in range(0, 4):
        make_run(tx, "j", T0 + h * H)
    # the slot at 04:00 is due before the retirement at 04:30: still expected
    retire_between(tx, "j", T0 + 4.5 * H, None)
    as_of = T0 + 10 * H
    assert missing(tx, as_of) == [(T0 + 4 * H, "never_started")]
    # the watermark advance records no hole in the retired span, and the scan stays the same
    tx.execute("SELECT runner.advance_watermarks_v1(%s)", (as_of,))
    assert tx.execute("SELECT schedule_slot FROM runner.gap_holes WHERE job_name = 'j'").fetchall() == [
        (T0 + 4 * H,)]
    assert missing(tx, as_of + H) == [(T0 + 4 * H, "never_started")]
    assert unlisted(tx, as_of) == []


def test_unretire_expects_slots_again_from_then_and_never_the_span_between(tx: psycopg.Connection[Any]) -> None:
    make_job(tx, "j", registered=T0)
    schedule(tx)
    for h in range(0, 3):
        make_run(tx, "j", T0 + h * H)
    retire_between(tx, "j", T0 + 2.5 * H, T0 + 6.5 * H)  # retired 02:30, unretired 06:30
    # a run left failed inside the retired span still needs a decision: listed
    make_run(tx, "j", T0 + 4 * H, status="dead", finished=T0 + 4 * H)
    as_of = T0 + 9 * H
    expected = [(T0 + 4 * H, "dead"), (T0 + 7 * H, "never_started"), (T0 + 8 * H, "never_started"),
                (T0 + 9 * H, "never_started")]
    assert missing(tx, as_of) == expected
    tx.execute("SELECT runner.advance_watermarks_v1(%s)", (as_of,))
    assert missing(tx, as_of) == expected
    assert unlisted(tx, as_of) == []


def test_the_audit_expands_retired_spans_like_the_gap_scan(tx: psycopg.Connection[Any]) -> None:
    """The audit's own expansion skips retired spans too: with the scan's spans taken away
    (a retirement the scan honours but the audit would not), check_v1 would report them."""
    make_job(tx, "j", registered=T0)
    schedule(tx)
    retire_between(tx, "j", T0 - H, None)  # retired before its first slot: nothing expected
    assert missing(tx, T0 + 5 * H) == []
    assert unlisted(tx, T0 + 5 * H) == []


# -- alerts ---------------------------------------------------------------------------------


def alerts(conn: psycopg.Connection[Any], job: str) -> set[str]:
    return {r[0] for r in conn.execute("SELECT kind FROM runner.alerts WHERE job_name = %s", (job,))}


def test_a_retired_job_raises_no_stale_or_late_alert_but_its_dead_runs_do(tx: psycopg.Connection[Any]) -> None:
    now = tx.execute("SELECT now()").fetchone()[0]
    make_job(tx, "j", every=timedelta(seconds=1), registered=now - 10 * H, stale_after_seconds=60,
             grace_seconds=1)
    make_run(tx, "j", now - 5 * H, status="dead", finished=now - 5 * H)
    assert {"stale", "late", "dead"} <= alerts(tx, "j")
    tx.execute("UPDATE runner.jobs SET retired_at = now() - interval '1 hour' WHERE job_name = 'j'")
    assert alerts(tx, "j") == {"dead"}
    health = tx.execute("SELECT retired_at FROM runner.job_health WHERE job_name = 'j'").fetchone()
    assert health == (now - H,)


def live_instance(conn: psycopg.Connection[Any], jobs: list[str], heartbeat: str = "now()") -> None:
    conn.execute("INSERT INTO runner.instances (instance_id, host, pid, lock_namespace, heartbeat_at, jobs)"
                 f" VALUES (gen_random_uuid(), 'h', 1, 21077, {heartbeat}, %s)", (jobs,))


def test_a_job_in_no_live_runners_code_is_flagged_after_the_threshold(tx: psycopg.Connection[Any]) -> None:
    now = tx.execute("SELECT now()").fetchone()[0]
    for name in ("kept", "gone", "recent"):
        make_job(tx, name, registered=now - 100 * H)
    tx.execute("UPDATE runner.jobs SET synced_at = now() - interval '30 hours'")
    tx.execute("UPDATE runner.jobs SET synced_at = now() - interval '23 hours' WHERE job_name = 'recent'")
    assert tx.execute("SELECT count(*) FROM runner.alerts WHERE kind = 'job_not_in_code'").fetchone()[0] == 0, \
        "no live runner: no evidence"
    # a runner that stopped 25 hours ago was the last to define `gone`... 23 hours ago `recent`
    live_instance(tx, ["kept"])
    tx.execute("INSERT INTO runner.instances (instance_id, host, pid, lock_namespace, heartbeat_at, stopped_at,"
               " jobs) VALUES (gen_random_uuid(), 'h', 2, 21077, now() - interval '25 hours',"
               " now() - interval '25 hours', '{gone,kept}')")
    flagged = tx.execute("SELECT job_name, detail FROM runner.alerts WHERE kind = 'job_not_in_code'").fetchall()
    assert [r[0] for r in flagged] == ["gone"]
    assert "retire it (runner retire)" in flagged[0][1]
    # the threshold is a setting
    tx.execute("SET LOCAL runner.job_not_in_code_after = '22 hours'")
    assert "job_not_in_code" in alerts(tx, "recent")
    tx.execute("SET LOCAL runner.job_not_in_code_after = '26 hours'")
    assert "job_not_in_code" not in alerts(tx, "gone")
    tx.execute("RESET runner.job_not_in_code_after")
    # never retired by the runner: flagged until an operator retires it, then silent
    assert scalar_in(tx, "SELECT retired_at FROM runner.jobs WHERE job_name = 'gone'") is None
    tx.execute("UPDATE runner.jobs SET retired_at = now() WHERE job_name = 'gone'")
    assert "job_not_in_code" not in alerts(tx, "gone")


def not_in_code_fleet(tx: psycopg.Connection[Any]) -> None:
    """Job `gone` last defined 25 hours ago, `recent` 23 hours ago, `kept` by a live runner."""
    now = tx.execute("SELECT now()").fetchone()[0]
    for name in ("kept", "gone", "recent"):
        make_job(tx, name, registered=now - 100 * H)
    tx.execute("UPDATE runner.jobs SET synced_at = now() - interval '30 hours'")
    tx.execute("UPDATE runner.jobs SET synced_at = now() - interval '23 hours' WHERE job_name = 'recent'")
    live_instance(tx, ["kept"])
    tx.execute("INSERT INTO runner.instances (instance_id, host, pid, lock_namespace, heartbeat_at, stopped_at,"
               " jobs) VALUES (gen_random_uuid(), 'h', 2, 21077, now() - interval '25 hours',"
               " now() - interval '25 hours', '{gone,kept}')")


def bad_settings(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT job_name, owner, run_id, detail, since IS NOT NULL FROM runner.alerts"
                        " WHERE kind = 'bad_setting'").fetchall()


HOSTILE_SETTING = "6 hours'; DROP TABLE runner.jobs; --"


@pytest.mark.parametrize("value", [
    "banana", "-1 hours", "0", "0 hours", "00:00", "1000 years", "101 years", "infinity", HOSTILE_SETTING,
    "1 hour " + "x" * 500, "999999 years " * 8, "6 hourz", "P1D", "1 day 06:00:00", "1 hour 99:99"])
def test_a_bad_job_not_in_code_after_is_an_alert_not_a_broken_view(tx: psycopg.Connection[Any], value: str) -> None:
    """An operator's typo in runner.job_not_in_code_after (text that is no interval, zero or
    negative, more than 100 years, a form interval_setting_v1 does not read) does not make runner.alerts fail: job_not_in_code uses 24
    hours, and a bad_setting row names the setting and its value."""
    not_in_code_fleet(tx)
    tx.execute("SELECT set_config('runner.job_not_in_code_after', %s, true)", (value,))
    flagged = tx.execute("SELECT job_name FROM runner.alerts WHERE kind = 'job_not_in_code'").fetchall()
    assert flagged == [("gone",)]  # the default, 24 hours: not `recent` (23 hours)
    [(job, owner, run_id, detail, since)] = bad_settings(tx)
    assert (job, owner, run_id, since) == (None, None, None, True)
    shown = value if len(value) <= 200 else value[:200] + "..."
    quoted = "'" + shown.replace("'", "''") + "'"
    assert detail.startswith(f"setting runner.job_not_in_code_after is {quoted}, not an interval above zero"), detail
    assert "job_not_in_code uses 24 hours" in detail
    assert tx.execute("SELECT to_regclass('runner.jobs') IS NOT NULL").fetchone()[0]


@pytest.mark.parametrize("value", ["", "  ", "6 hours", "1 mon", "100 years", "1 day 12 hours", "90 min",
                                   "06:30", "1h30m", "2 Weeks", "1.5 days"])
def test_a_usable_or_empty_job_not_in_code_after_raises_no_bad_setting(tx: psycopg.Connection[Any],
                                                                       value: str) -> None:
    not_in_code_fleet(tx)
    tx.execute("SELECT set_config('runner.job_not_in_code_after', %s, true)", (value,))
    assert bad_settings(tx) == []
    assert tx.execute("SELECT runner.interval_setting_v1('runner.job_not_in_code_after')").fetchone()[0] == (
        None if not value.strip() else tx.execute("SELECT %s::interval", (value,)).fetchone()[0])
    assert tx.execute("SELECT runner.interval_setting_v1('runner.no_such_setting')").fetchone()[0] is None


def test_a_bad_setting_of_the_database_leaves_alerts_and_status_working(db_url: str, db_roles: Any) -> None:
    """ALTER DATABASE ... SET runner.job_not_in_code_after = 'banana': every new session has it;
    a readonly login still reads runner.alerts, `runner status` still works and shows it."""
    db_roles.apply(db_url)
    dbname = scalar(db_url, "SELECT current_database()")
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {dbname} SET runner.job_not_in_code_after = 'banana'")
    with psycopg.connect(db_roles.url(db_url, "readonly"), autocommit=True) as reader:
        [(_, _, _, detail, _)] = bad_settings(reader)
    assert "is 'banana', not an interval above zero" in detail
    out = run_cli("status", url=db_url)
    assert out.returncode == 0, out.stderr
    assert "bad_setting" in out.stdout and "banana" in out.stdout


def scalar_in(conn: psycopg.Connection[Any], statement: str) -> Any:
    row = conn.execute(statement).fetchone()
    return None if row is None else row[0]


# -- the commands -------------------------------------------------------------------------


def test_retire_and_unretire_are_audited_and_idempotent(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        make_job(conn, "ok")
        make_run(conn, "ok", T0, status="running", started=T0)
    out = cli("retire", "ok", "--reason", "moved to the new billing service", "--by", "carol", url=db_url)
    assert out.returncode == 1, "no terminal to confirm on: the answer is no"
    assert "will retire it" in out.stdout and "1 run(s) running" in out.stdout
    assert requests(db_url) == [] and scalar(db_url, "SELECT retired_at FROM runner.jobs") is None
    out = cli("retire", "ok", "--reason", "moved to the new billing service", "--by", "carol", "--yes",
              url=db_url)
    assert out.returncode == 0, out.stderr
    assert "job 'ok' retired; request" in out.stdout
    retired_at = scalar(db_url, "SELECT retired_at FROM runner.jobs")
    assert retired_at is not None
    again = cli("retire", "ok", "--reason", "twice", "--yes", url=db_url)
    assert again.returncode == 0 and "already retired; nothing written" in again.stdout
    out = cli("unretire", "ok", "--reason", "back in the code", "--by", "carol", "--yes", "--json", url=db_url)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["changed"] is True
    assert scalar(db_url, "SELECT retired_at FROM runner.jobs") is None
    retire, unretire = requests(db_url)
    assert (retire["action"], retire["who"], retire["reason"]) == ("retire", "carol",
                                                                   "moved to the new billing service")
    assert retire["touched"]["jobs"][0]["before"] == {"retired_at": None}
    assert retire["touched"]["runs_running"] == 1
    assert unretire["action"] == "unretire"
    span = rows(db_url, "SELECT retired_from, retired_until FROM runner.job_retirements")
    assert len(span) == 1 and span[0][0] == retired_at and span[0][1] is not None


@pytest.mark.parametrize("args, code, text", [
    (["retire", "nosuch", "--reason", "r", "--yes"], 1, "no job 'nosuch' in the ledger"),
    (["retire", "ok", "--yes"], 2, "--reason"),
    (["unretire", "ok", "--reason", "  ", "--yes"], 2, "--reason"),
])
def test_retire_refusals_write_nothing(db_url: str, args: list[str], code: int, text: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        make_job(conn, "ok")
    out = cli(*args, url=db_url)
    assert out.returncode == code, out.stderr
    assert text in out.stderr
    assert requests(db_url) == [] and scalar(db_url, "SELECT count(*) FROM runner.job_retirements") == 0


def test_sync_refuses_a_retired_job_and_writes_nothing(db_url: str) -> None:
    app = Runner()
    app.job("ok", every="1h")(lambda ctx: None)
    app.job("fresh", every="1h")(lambda ctx: None)
    with psycopg.connect(db_url, autocommit=True) as conn:
        make_job(conn, "ok")
        conn.execute("UPDATE runner.jobs SET retired_at = now()")
        with pytest.raises(ledger.JobRetired, match="runner unretire ok"):
            ledger.sync_jobs(conn, list(app.jobs.values()))
        assert conn.execute("SELECT job_name FROM runner.jobs").fetchall() == [("ok",)]


def test_a_retirement_that_commits_while_a_sync_waits_is_refused(db_url: str) -> None:
    """`runner retire` commits while a starting runner's sync waits for the job's row: the
    sync's first check saw the job not retired, and it must still refuse (writing nothing),
    not start with a retired job in its code."""
    app = Runner()
    app.job("ok", every="1h")(lambda ctx: None)
    with psycopg.connect(db_url, autocommit=True) as conn:
        make_job(conn, "ok")
        before = conn.execute("SELECT synced_at, options FROM runner.jobs").fetchall()
    outcome: list[BaseException | None] = []
    with psycopg.connect(db_url) as retiring, psycopg.connect(db_url, autocommit=True) as syncing:
        assert retiring.execute("SELECT * FROM runner.retire_job_v1('ok', 'carol', 'gone')").fetchall()
        pid = syncing.info.backend_pid

        def sync() -> None:
            try:
                ledger.sync_jobs(syncing, list(app.jobs.values()))
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=sync, daemon=True)
        thread.start()
        eventually(lambda: scalar(db_url, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                  (pid,)) == "Lock", timeout=10, message="the sync waits for the job's row")
        retiring.commit()
        thread.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], ledger.JobRetired), outcome
    assert "runner unretire ok" in str(outcome[0])
    assert rows(db_url, "SELECT synced_at, options FROM runner.jobs") == before


# -- with real runners ----------------------------------------------------------------------


def test_retire_while_a_runner_runs_then_restart_is_refused_until_unretired(db_url: str, tmp_path: Path) -> None:
    def newest(job: str) -> datetime | None:
        return scalar(db_url, "SELECT max(schedule_slot) FROM runner.job_runs WHERE job_name = %s", (job,))

    proc = RunnerProcess(APP, db_url, "--poll-interval", "0.2", log=tmp_path / "runner.log")
    try:
        eventually(lambda: newest("ok") is not None, timeout=30, message="ok ran")
        out = cli("retire", "ok", "--reason", "removed from the code", "--yes", url=db_url)
        assert out.returncode == 0, out.stderr
        retired = scalar(db_url, "SELECT now()")
        # the live runner stops starting ok's slots at its next claim; `other` goes on
        eventually(lambda: (newest("other") or T0) > retired + timedelta(seconds=2), timeout=30,
                   message="other keeps running")
        assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'ok'"
                              " AND schedule_slot > %s", (retired,)) == 0
        # the gap scan expects none of ok's slots after the retirement
        late = scalar(db_url, "SELECT count(*) FROM runner.missing_slots WHERE job_name = 'ok'"
                              " AND schedule_slot > %s", (retired,))
        assert late == 0
    finally:
        assert proc.terminate() == 0, proc.output()

    before = rows(db_url, "SELECT job_name, synced_at FROM runner.jobs ORDER BY 1")
    instances = scalar(db_url, "SELECT count(*) FROM runner.instances")
    refused = run_cli("start", "--app", APP, url=db_url)
    assert refused.returncode == 1
    # one error line (after the warning that the test's login is a superuser)
    [line] = [x for x in refused.stderr.splitlines() if x.startswith("runner: error: ")]
    assert "Traceback" not in refused.stderr
    assert "job 'ok' was retired" in line and "runner unretire ok" in line
    assert rows(db_url, "SELECT job_name, synced_at FROM runner.jobs ORDER BY 1") == before
    assert scalar(db_url, "SELECT count(*) FROM runner.instances") == instances

    out = cli("unretire", "ok", "--reason", "deployed again", "--yes", url=db_url)
    assert out.returncode == 0, out.stderr
    unretired = scalar(db_url, "SELECT now()")
    proc = RunnerProcess(APP, db_url, "--poll-interval", "0.2", log=tmp_path / "runner2.log")
    try:
        eventually(lambda: (newest("ok") or T0) > unretired, timeout=30, message="ok runs again")
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'ok'"
                                          " AND status <> 'succeeded' AND schedule_slot < %s",
                                  (unretired,)) == 0, timeout=30, message="ok's runs settle")
    finally:
        assert proc.terminate() == 0, proc.output()
    # between retirement and unretirement nothing is owed: no missing slot of ok there
    assert scalar(db_url, "SELECT count(*) FROM runner.missing_slots WHERE job_name = 'ok'"
                          " AND schedule_slot > %s AND schedule_slot < %s", (retired, unretired)) == 0
    assert_ledger_clean(db_url)
