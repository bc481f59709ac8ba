"""Pause conditions evaluated on a hot standby (``runner start --condition-url``; issue 28,
point 3): advisory locks on a standby are the standby's own, so a condition run there cannot
touch a run key of the primary, whatever it locks.

A primary and a streaming replica of our own (tests/test_replica.py's ``cluster``), the
runner roles applied on the primary (replayed on the replica), a real ``runner start`` logged
in as a worker. A condition that takes the keys of the next 300 runs on the standby, holds
them and releases them within its statement (flagged when it runs on the primary:
tests/security/test_condition_locks.py) disturbs no run of the primary, and its verdict still
pauses the plan; resumed, the plan runs on while its condition is false. A URL that is not a
hot standby, or a standby of another ledger, is refused at start in one line.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.dbroles import SessionRoles
from tests.security.test_condition_locks import next_run_keys_unlocked
from tests.security.test_pause_condition import evaluated, make_plan
from tests.support import RunnerProcess, assert_ledger_clean, eventually, run_cli, scalar
from tests.test_replica import cluster  # noqa: F401  (the fixture)

APP = "tests/apps/conditions.py:app"


def gated_run_keys(gate: str) -> str:
    """The keys of the next 300 runs taken as session locks, held, released with
    pg_advisory_unlock in the same statement; its value is the test's ``gate``."""
    return next_run_keys_unlocked(f"(SELECT n FROM freed) >= 0 AND (SELECT stop FROM {gate})")


def replayed(primary: str, replica: str) -> None:
    """Wait until the replica has replayed everything the primary wrote so far."""
    with psycopg.connect(primary, autocommit=True) as conn:
        lsn = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]  # type: ignore[index]
    eventually(lambda: scalar(replica, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)),
               timeout=60, message="the replica replayed the primary's writes")


def with_db(url: str, dbname: str) -> str:
    return make_conninfo(**{**conninfo_to_dict(url), "dbname": dbname})


def test_a_condition_on_the_standby_touches_no_run_key_and_still_pauses(
        cluster: tuple[str, str], tmp_path: Path) -> None:  # noqa: F811
    primary, replica = cluster
    roles = SessionRoles()
    roles.apply(primary)
    with psycopg.connect(primary, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.gate (stop boolean NOT NULL)")
        conn.execute("INSERT INTO public.gate VALUES (false)")
        conn.execute(f'GRANT SELECT ON public.gate TO "{roles.groups["condition"]}"')
    replayed(primary, replica)
    proc = RunnerProcess(APP, roles.url(primary, "worker"), "--poll-interval", "0.2", "--workers", "4",
                         "--condition-url", roles.url(replica, "worker"), log=tmp_path / "runner.log")
    try:
        eventually(lambda: scalar(primary, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'tick'"
                                           " AND status = 'succeeded'") >= 3,
                   timeout=60, message="the runner is up")
        plan_id = make_plan(primary, gated_run_keys("public.gate"))
        # evaluated on the standby: its locks there are no run's, and it is not flagged for them
        assert evaluated(primary, plan_id, times=3) == ("running", None)
        with psycopg.connect(primary, autocommit=True) as conn:
            conn.execute("UPDATE public.gate SET stop = true")
        status, reason = evaluated(primary, plan_id, times=100)
        assert (status, reason) == ("paused", "pause_when returned true"), (status, reason)
        with psycopg.connect(primary, autocommit=True) as conn:
            conn.execute("UPDATE public.gate SET stop = false")
        replayed(primary, replica)
        done = run_cli("backfill", "resume", str(plan_id), "--reason", "quiet now", "--yes", url=primary)
        assert done.returncode == 0, done.stderr
        assert evaluated(primary, plan_id, times=3) == ("running", None)
    finally:
        code = proc.terminate()
        assert code == 0, proc.output()[-3000:]
    # no run of the primary met a key the condition took: none released for it, failed or dead
    assert scalar(primary, "SELECT count(*) FROM runner.attempts WHERE error_class IN"
                           " ('runner.LockBusy', 'runner.LockUnavailable')") == 0
    assert scalar(primary, "SELECT count(*) FROM runner.job_runs WHERE status IN ('dead', 'failed')") == 0
    assert "advisory lock" not in proc.output()
    assert_ledger_clean(primary)


def test_a_condition_url_that_is_no_standby_of_the_ledger_is_refused_at_start(
        cluster: tuple[str, str]) -> None:  # noqa: F811
    primary, replica = cluster
    # the primary itself: not in recovery
    done = run_cli("start", "--app", APP, "--condition-url", primary, url=primary)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"runner: error: the condition standby {primary} is not a hot standby (pg_is_in_recovery() is "
        "false): conditions run there only where no run key of the ledger can be touched"], done.stderr
    # a standby of another ledger (another database of the same cluster)
    with psycopg.connect(with_db(primary, "postgres"), autocommit=True) as conn:
        conn.execute("CREATE DATABASE other")
    other = primary.rsplit("/", 1)[0] + "/other"
    up = run_cli("db", "upgrade", url=other, timeout=300)
    assert up.returncode == 0, up.stderr
    replayed(primary, replica)
    standby_of_other = replica.rsplit("/", 1)[0] + "/other"
    done = run_cli("start", "--app", APP, "--condition-url", standby_of_other, url=primary)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"runner: error: the condition standby {standby_of_other} is not a copy of this ledger"), done.stderr
    # nothing started: no runner registered
    assert scalar(primary, "SELECT count(*) FROM runner.instances") == 0
