"""runner.testing: run one job for one slot through the real claim, attempt and outcome path
(run_once), and a throwaway migrated database (fresh_database, the runner_database fixture)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner import AsyncJobContext, JobContext, Permanent, Runner
from runner.testing import DropBehind, fresh_database, run_once
from tests.conftest import url_for
from tests.support import assert_ledger_clean, rows, scalar

SLOT = datetime(2026, 1, 30, 17, 0, tzinfo=UTC)  # 02:00 in Seoul on Jan 31
FAST = {"base": "10ms", "jitter": 0}


def settlement_app() -> Runner:
    app = Runner()

    @app.job("daily-settlement", cron="0 2 * * *", timezone="Asia/Seoul", partitions=["acme", "globex"],
             max_attempts=2, backoff=FAST)
    def settle(ctx: JobContext) -> None:
        if ctx.partition == "globex":
            raise Permanent("globex has no orders table")
        ctx.db.execute("INSERT INTO settlements VALUES (%s, %s, %s)",
                       (ctx.partition, ctx.business_date, ctx.idempotency_key))

    @app.job("refresh-rates", every="5m", max_attempts=3, backoff=FAST)
    async def refresh(ctx: AsyncJobContext) -> None:
        await asyncio.sleep(0)
        if ctx.attempt == 1:
            raise TimeoutError("rates service slow")
        await ctx.db.execute("INSERT INTO rates VALUES (%s)", (ctx.slot,))

    return app


def test_run_once_records_the_run(runner_database: str) -> None:
    """The example test of docs/how-to/test-your-jobs.md."""
    with psycopg.connect(runner_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE settlements (tenant text, business_date date, idem_key text)")
    app = settlement_app()

    run = run_once(app, "daily-settlement", SLOT, runner_database, partition="acme")
    assert (run.status, run.attempt, run.error) == ("succeeded", 1, None)
    assert [a.status for a in run.attempts] == ["succeeded"]
    assert rows(runner_database, "SELECT tenant, business_date::text, idem_key FROM settlements") == [
        ("acme", "2026-01-30", run.idempotency_key)]  # committed with the success; the business
    # date is the local date of the window's start (the previous slot)

    dead = run_once(app, "daily-settlement", SLOT, runner_database, partition="globex")
    assert (dead.status, dead.attempt) == ("dead", 1)  # Permanent: never retried
    assert dead.error == "runner.errors.Permanent: globex has no orders table"
    assert_ledger_clean(runner_database)


def test_an_async_handler_and_its_retries(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE rates (slot timestamptz)")
    app = settlement_app()
    slot = datetime(2026, 1, 30, 17, 5, tzinfo=UTC)

    first = run_once(app, "refresh-rates", slot, db_url)
    assert (first.status, first.attempt, first.error) == ("failed", 1, "TimeoutError: rates service slow")
    assert first.next_attempt_at is not None
    # called again: the failed run's next attempt, at once (its backoff not waited for)
    second = run_once(app, "refresh-rates", slot, db_url)
    assert (second.id, second.status, second.attempt, second.trigger) == (first.id, "succeeded", 2, "retry")
    assert [(a.attempt, a.status, a.error_class) for a in second.attempts] == [
        (1, "failed", "TimeoutError"), (2, "succeeded", None)]
    assert rows(db_url, "SELECT slot FROM rates") == [(slot,)]
    # a done run is returned as recorded, not run again
    assert run_once(app, "refresh-rates", slot, db_url).attempts == second.attempts

    # attempts=N: the retries follow at once, max_attempts applies
    other = run_once(app, "refresh-rates", slot + timedelta(minutes=5), db_url, attempts=5)
    assert (other.status, other.attempt) == ("succeeded", 2)
    # no lock left behind, the instance deregistered, the ledger audits clean
    assert scalar(db_url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database ="
                          " (SELECT oid FROM pg_database WHERE datname = current_database())") == 0
    assert scalar(db_url, "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL") == 0
    assert_ledger_clean(db_url)


def test_retries_until_dead(db_url: str) -> None:
    app = Runner()
    calls: list[int] = []

    @app.job("always-fails", every="1m", max_attempts=3, backoff=FAST)
    def handler(ctx: JobContext) -> None:
        calls.append(ctx.attempt)
        raise ValueError(f"attempt {ctx.attempt}")

    run = run_once(app, "always-fails", SLOT, db_url, attempts=10)
    assert calls == [1, 2, 3]
    assert (run.status, run.attempt, run.error) == ("dead", 3, "ValueError: attempt 3")
    assert [a.status for a in run.attempts] == ["failed", "failed", "dead"]
    assert_ledger_clean(db_url)


@pytest.mark.parametrize(("job", "slot", "partition", "message"), [
    ("nope", SLOT, None, "unknown job 'nope'; the app registers: daily-settlement, refresh-rates"),
    ("daily-settlement", SLOT, None, "job 'daily-settlement' has 2 partitions"),
    ("daily-settlement", SLOT, "initech", "job 'daily-settlement' has no partition 'initech'"),
    ("daily-settlement", SLOT + timedelta(minutes=1), "acme", "17:01:00+00:00 is not a slot of job 'daily-settlement'; the nearest are 2026-01-30T17:00:00+00:00"),
    ("daily-settlement", datetime(2026, 1, 30, 17, 0), "acme", "slot must be an aware datetime"),
    ("refresh-rates", datetime(2999, 1, 1, tzinfo=UTC), None, "is in the future"),
])
def test_bad_input_is_refused_with_nothing_written(db_url: str, job: str, slot: Any,
                                                    partition: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        run_once(settlement_app(), job, slot, db_url, partition=partition)
    assert scalar(db_url, "SELECT count(*) FROM runner.job_runs") == 0
    assert scalar(db_url, "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL") == 0


def test_run_once_from_inside_an_event_loop(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE rates (slot timestamptz)")
    app = settlement_app()

    async def test() -> Any:
        return run_once(app, "refresh-rates", SLOT, db_url, attempts=2)

    assert asyncio.run(test()).status == "succeeded"


def test_fresh_database_is_migrated_and_dropped() -> None:
    with fresh_database(url_for("postgres")) as url:
        name = scalar(url, "SELECT current_database()")
        assert scalar(url, "SELECT version_num FROM runner.alembic_version")
        assert scalar(url, "SELECT count(*) FROM runner.job_runs") == 0
        held = psycopg.connect(url, autocommit=True)  # left open: the drop goes ahead anyway
    assert scalar(url_for("postgres"), "SELECT count(*) FROM pg_database WHERE datname = %s", (name,)) == 0
    with pytest.raises(psycopg.OperationalError):
        held.execute("SELECT 1")
    held.close()


def test_the_fixtures_databases_are_dropped_behind_the_tests_and_all_gone_at_the_end(tmp_path: Path) -> None:
    """A user's suite with the plugin: each test gets a database of its own (a connection to it
    left open), dropped in the background (runner/testing.py: DropBehind); none is left once
    the session has ended."""
    suite = tmp_path / "suite"
    suite.mkdir()
    names = tmp_path / "names.txt"
    (suite / "conftest.py").write_text('pytest_plugins = ["runner.pytest_plugin"]\n')
    (suite / "test_user.py").write_text(
        "import psycopg\n\n"
        "HELD = []\n\n"
        "def record(url):\n"
        "    conn = psycopg.connect(url, autocommit=True)\n"
        "    HELD.append(conn)  # left open: the drop goes ahead anyway\n"
        "    name, jobs = conn.execute('SELECT current_database(), (SELECT count(*) FROM runner.jobs)').fetchone()\n"
        "    assert jobs == 0\n"
        f"    with open({str(names)!r}, 'a') as f:\n"
        "        f.write(name + '\\n')\n\n"
        + "".join(f"def test_{i}(runner_database):\n    record(runner_database)\n\n" for i in range(2)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["RUNNER_TEST_DATABASE_URL"] = url_for("postgres")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error",
                          "--rootdir", str(suite), str(suite)], cwd=suite, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "2 passed" in out.stdout, out.stdout + out.stderr
    made = names.read_text().split()
    assert len(made) == 2 and len(set(made)) == 2, made
    assert rows(url_for("postgres"), "SELECT datname FROM pg_database WHERE datname = ANY(%s)", (made,)) == []


def test_drop_behind_drops_what_it_is_handed_and_reports_a_failed_drop(db_url: str, clone_pool: Any) -> None:
    names = [clone_pool.create_empty() for _ in range(3)]
    drops = DropBehind(url_for("postgres"))
    for name in names:
        drops.drop(name)
    drops.settle()
    assert rows(url_for("postgres"), "SELECT datname FROM pg_database WHERE datname = ANY(%s)", (names,)) == []
    drops.close()
    with pytest.raises(RuntimeError, match="closed"):
        drops.drop(names[0])
    # a database it cannot drop (the one it connects to): the error is raised by close()
    failing = DropBehind(db_url)
    failing.drop(scalar(db_url, "SELECT current_database()"))
    with pytest.raises(RuntimeError, match="dropping a test database failed"):
        failing.close()
    assert scalar(db_url, "SELECT 1") == 1
