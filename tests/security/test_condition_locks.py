"""Issue 28, point 3: a pause condition held run lock keys unseen. A condition that took the
next 300 run keys with pg_try_advisory_xact_lock for 0.9 s every 5 s made runs of an
unrelated job end dead (LockUnavailable), and was never flagged: its locks went with the
savepoint's rollback before they were counted.

The attack again, in its three forms (transaction-level locks; session-level ones; session-level
ones the condition releases with pg_advisory_unlock before its statement ends, which no check
after the statement can see: the runner's watcher sees them while it runs), against a real
``runner start`` logged in as a worker (the production shape: it may not end the condition
session as a squatter): the condition is flagged (the plan pauses: it took advisory locks),
and the runs of the unrelated job whose claim met a key the condition held are released
uncounted and run a moment later: none fails for it, none ends dead. A condition that takes
no lock, watched the same way, is never flagged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.security.test_pause_condition import evaluated, make_plan, runner
from tests.support import assert_ledger_clean, eventually, rows, scalar

HOLD = 0.7  # seconds the condition holds the keys (its statement timeout is 1 s)


def next_run_keys(lock: str) -> str:
    """A condition that takes the keys of the next 300 runs with ``lock``, then holds them."""
    return ("WITH taken AS MATERIALIZED ("
            f" SELECT count(*) FILTER (WHERE {lock}(runner.lock_key_v1(21077, k)) IS NOT NULL) AS n"
            " FROM generate_series((SELECT max(id) + 1 FROM runner.job_runs),"
            "                      (SELECT max(id) + 300 FROM runner.job_runs)) AS k),"
            f" slept AS MATERIALIZED (SELECT pg_sleep({HOLD}) AS z FROM taken)"
            " SELECT (SELECT n FROM taken) < 0 FROM slept")


def next_run_keys_unlocked(value: str = "(SELECT n FROM freed) < 0") -> str:
    """The keys of the next 300 runs taken as session locks, held, then released with
    pg_advisory_unlock inside the same statement: none is left when the statement ends. Its
    value is ``value`` (it may read ``freed.n``, the keys released)."""
    return ("WITH taken AS MATERIALIZED ("
            " SELECT k, pg_try_advisory_lock(runner.lock_key_v1(21077, k)) AS got"
            " FROM generate_series((SELECT max(id) + 1 FROM runner.job_runs),"
            "                      (SELECT max(id) + 300 FROM runner.job_runs)) AS k),"
            f" slept AS MATERIALIZED (SELECT pg_sleep({HOLD}) AS z FROM (SELECT count(*) FROM taken) t),"
            " freed AS MATERIALIZED (SELECT count(*) FILTER (WHERE CASE WHEN got"
            "   THEN pg_advisory_unlock(runner.lock_key_v1(21077, k)) END) AS n FROM taken, slept)"
            f" SELECT {value}")


CONDITIONS = {"pg_try_advisory_xact_lock": next_run_keys("pg_try_advisory_xact_lock"),
              "pg_advisory_lock": next_run_keys("pg_advisory_lock"),
              "pg_advisory_unlock within the statement": next_run_keys_unlocked()}


@pytest.mark.parametrize("form", list(CONDITIONS))
def test_a_condition_holding_run_keys_is_flagged_and_kills_no_run(
        db_url: str, db_roles: Any, tmp_path: Path, form: str) -> None:
    db_roles.apply(db_url)
    worker = db_roles.url(db_url, "worker")
    with runner(worker, tmp_path):
        plan_id = make_plan(db_url, CONDITIONS[form])
        status, reason = evaluated(db_url, plan_id, times=2)
        # the runs whose claim met a held key were released and are claimed again meanwhile
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'tick'"
                                          " AND status IN ('pending', 'failed') AND fence > 1") == 0,
                   timeout=30, message="the released runs ran again")
    assert status == "paused", (status, reason)
    assert reason is not None and reason.startswith("pause_when failed: "), reason
    assert "advisory lock" in reason, reason
    # the attack met the runs (else this test proves nothing) ...
    met = rows(db_url, "SELECT a.status, a.error_class FROM runner.attempts a JOIN runner.job_runs r"
                       " ON r.id = a.run_id WHERE r.job_name = 'tick' AND a.status NOT IN ('succeeded', 'running')")
    assert ("released", "runner.LockBusy") in met, met
    # ... and none of them failed or died for it
    assert [m for m in met if m[0] != "released"] == [], met
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'tick'"
                          " AND status IN ('dead', 'failed')") == 0
    assert scalar(db_url, "SELECT count(*) FROM runner.attempts WHERE error_class = 'runner.LockUnavailable'") == 0
    assert_ledger_clean(db_url)


def test_a_condition_taking_no_lock_is_watched_and_not_flagged(
        db_url: str, db_roles: Any, tmp_path: Path) -> None:
    """The same watch over a condition that only reads, for as long as the attack holds its
    keys: it is never flagged, and its plan runs on."""
    db_roles.apply(db_url)
    worker = db_roles.url(db_url, "worker")
    with runner(worker, tmp_path) as proc:
        plan_id = make_plan(db_url, "SELECT count(*) < 0 FROM runner.job_runs, "
                                    f"(SELECT pg_sleep({HOLD})) AS s")
        status, reason = evaluated(db_url, plan_id, times=3)
        assert (status, reason) == ("running", None), (status, reason)
        assert scalar(db_url, "SELECT count(*) FROM runner.job_runs r JOIN runner.backfills b"
                              " ON b.job_name = r.job_name WHERE b.id = %s AND r.status = 'succeeded'",
                      (plan_id,)) > 0
    assert "advisory lock" not in proc.output()
    assert_ledger_clean(db_url)


def test_a_watch_that_breaks_off_records_no_outcome(db_url: str, db_roles: Any) -> None:
    """The watching connection ended while the condition runs: the evaluation raises (the
    duty logs it and evaluates again at its next pass) and records nothing, neither the
    check nor a pause; the next pass watches on a new connection."""
    import threading

    import psycopg

    from runner.worker import conditions

    db_roles.apply(db_url)
    plan_id = make_plan(db_url, "SELECT pg_sleep(0.8) IS NULL")
    with conditions.connect(db_url) as cond, psycopg.connect(db_url, autocommit=True) as admin:
        def cut() -> None:
            pid = eventually(lambda: admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'runner-condition-watch'"
                " AND datname = current_database()").fetchone(), timeout=10, interval=0.01)
            admin.execute("SELECT pg_terminate_backend(%s)", pid)

        cutter = threading.Thread(target=cut)
        cutter.start()
        with pytest.raises(conditions.WatchLost):
            conditions.run_once(cond, 21077, ["hourly"])
        cutter.join()
        assert rows(db_url, "SELECT status, pause_reason, pause_checked_at FROM runner.backfills"
                            " WHERE id = %s", (plan_id,)) == [("running", None, None)]
        assert conditions.run_once(cond, 21077, ["hourly"]) == {plan_id: conditions.Evaluation(False)}
