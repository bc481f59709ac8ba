"""A restored copy of a ledger (issue 29, point 6; runner/actions/copies.py): pg_dump of a live ledger
with a running backfill, pg_restore into a new database, `runner start` there. The copy's
runner runs new live slots but not the source's plan, catch-up, retries or takeovers, and the
source's runners (alive, in the same cluster) are not its peers, until `runner db adopt`."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from runner.store import ledger
from tests.conftest import SERVER, url_for
from tests.support import (
    RunnerProcess,
    assert_ledger_clean,
    backfill_app_tables,
    eventually,
    rows,
    run_cli,
    scalar,
)
from tests.test_backfill import APP, at, iso

pytestmark = pytest.mark.skipif(shutil.which("pg_dump") is None or shutil.which("pg_restore") is None,
                                reason="pg_dump and pg_restore are not installed")

COPIES = itertools.count(1)

PLAN_RUNS = """
SELECT count(*) FILTER (WHERE r.status = 'succeeded'), count(*) FILTER (WHERE r.status = 'running'),
       (SELECT count(*) FROM runner.attempts a JOIN runner.job_runs x ON x.id = a.run_id
        WHERE x.replay_group_id = b.replay_group_id)
FROM runner.backfills b JOIN runner.job_runs r ON r.replay_group_id = b.replay_group_id
WHERE b.id = %s GROUP BY b.replay_group_id
"""


@pytest.fixture
def source(db_url: str) -> str:
    """The source ledger, with the tables the test app's handlers write."""
    return backfill_app_tables(db_url)


@pytest.fixture
def copy_name(clone_pool: Any) -> Iterator[str]:
    """The name of the copy's database, not yet made (the test makes it); dropped behind the
    test by the clone pool (tests/clonepool.py), whatever the test made of it."""
    name = f"runner_test_copy_{os.getpid()}_{next(COPIES)}"
    try:
        yield name
    finally:
        clone_pool.give_back(name)


def restore(source: str, target: str, tmp_path: Path) -> None:
    """pg_dump (custom format) of the live source, pg_restore into the empty target."""
    dump = tmp_path / "ledger.dump"
    subprocess.run(["pg_dump", "-Fc", "-f", str(dump), "-d", source], check=True, timeout=120)
    done = subprocess.run(["pg_restore", "--exit-on-error", "-d", target, str(dump)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_a_restored_copy_holds_the_sources_plan_until_adopted(source: str, copy_name: str, clone_pool: Any,
                                                              tmp_path: Path) -> None:
    clone_pool.create(copy_name)  # empty, for pg_restore
    # the source: a backfill of 24 runs, one at a time, running under a live runner
    made = run_cli("backfill", "hourly", "--from", iso(at(0)), "--to", iso(at(12)), "--reason", "replay",
                   "--concurrency", "1", "--yes", "--json", "--app", APP, url=source, timeout=120)
    assert made.returncode == 0, made.stderr
    plan_id = json.loads(made.stdout)["backfill"]["id"]
    src = RunnerProcess(APP, source, "--poll-interval", "0.1", env={"BF_WORK_SECONDS": "5"},
                        log=tmp_path / "source.log")
    copy_proc = None
    try:
        # dumped while the plan's first run runs (each takes 5 s)
        eventually(lambda: rows(source, PLAN_RUNS, (plan_id,))[0][1] == 1, timeout=60,
                   message="the source's plan runs")
        source_instance = scalar(source, "SELECT instance_id FROM runner.instances WHERE stopped_at IS NULL")
        restore(source, url_for(copy_name), tmp_path)
        copy = url_for(copy_name)

        # the copy knows it is one, and says so everywhere
        copied, detail = rows(copy, "SELECT copied, detail FROM runner.ledger_copy_v1()")[0]
        assert copied and f"now in database {copy_name}" in detail
        assert rows(copy, "SELECT kind FROM runner.alerts WHERE kind = 'copied_ledger'") == [("copied_ledger",)]
        assert scalar(source, "SELECT count(*) FROM runner.alerts WHERE kind = 'copied_ledger'") == 0
        status = run_cli("status", url=copy)
        assert "copied_ledger" in status.stdout, status.stdout
        check = run_cli("check", url=copy)
        assert "this ledger is a copy" in check.stderr, check.stderr
        # the source's runner is alive, in this cluster, and listed in the copy: no peer of it
        assert scalar(copy, "SELECT count(*) FROM runner.instances WHERE instance_id = %s AND stopped_at IS NULL",
                      (source_instance,)) == 1
        assert scalar(copy, "SELECT count(*) FROM runner.runner_sessions_v1()") == 0
        assert scalar(source, "SELECT count(*) FROM runner.runner_sessions_v1()") == 1

        succeeded0, running0, attempts0 = rows(copy, PLAN_RUNS, (plan_id,))[0]
        assert running0 == 1  # the source's attempt in flight when it was dumped
        started = scalar(copy, "SELECT now()")
        copy_proc = RunnerProcess(APP, copy, "--poll-interval", "0.1", env={"BF_WORK_SECONDS": "0.01"},
                                  log=tmp_path / "copy.log")
        # it runs: the live job's new slots succeed in the copy ...
        eventually(lambda: scalar(copy, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'live' "
                                        "AND status = 'succeeded' AND schedule_slot > %s", (started,)) >= 3,
                   timeout=60, message="the copy's runner runs new live slots")
        with psycopg.connect(copy, autocommit=True) as conn:
            live = [str(i) for i, _ in ledger.live_instances(conn, 21077, 15.0)]
        assert str(source_instance) not in live and len(live) == 1, live
        # ... but not one run of the source's plan, nor a takeover of its running one
        assert rows(copy, PLAN_RUNS, (plan_id,))[0] == (succeeded0, running0, attempts0)
        assert "ledger_copied" in copy_proc.output()

        # adopted: the plan goes on in the copy, the dumped running run taken over
        adopted = run_cli("db", "adopt", "--reason", "staging is its own ledger now", "--yes", "--json",
                          url=copy)
        assert adopted.returncode == 0, adopted.stderr
        done = json.loads(adopted.stdout)
        assert done["plans_running"] == 1 and done["instances_stopped"] >= 1
        assert rows(copy, "SELECT action, reason, db_user FROM runner.requests WHERE id = %s",
                    (done["request"]["id"],)) == [("adopt_ledger", "staging is its own ledger now",
                                                   SERVER["user"])]
        eventually(lambda: scalar(copy, "SELECT status FROM runner.backfills WHERE id = %s", (plan_id,))
                   == "completed", timeout=60, message="the adopted copy completes the plan")
        assert rows(copy, PLAN_RUNS, (plan_id,))[0][:2] == (24, 0)
        assert scalar(copy, "SELECT count(*) FROM runner.alerts WHERE kind = 'copied_ledger'") == 0
        assert scalar(copy, "SELECT stopped_at IS NOT NULL FROM runner.instances WHERE instance_id = %s",
                      (source_instance,))
        assert "ledger_adopted" in copy_proc.output()
    finally:
        if copy_proc is not None:
            assert copy_proc.terminate() == 0, copy_proc.output()
        assert src.terminate() == 0, src.output()
    assert_ledger_clean(url_for(copy_name))
    # adopting again: refused, nothing written
    again = run_cli("db", "adopt", "--reason", "twice", "--yes", url=url_for(copy_name))
    assert again.returncode == 1 and "not a copy" in again.stderr, again.stderr
    assert scalar(url_for(copy_name), "SELECT count(*) FROM runner.requests WHERE action = 'adopt_ledger'") == 1


def test_a_template_clone_is_a_copy_and_a_renamed_database_is_not(postgresql_server: Any, clone_pool: Any,
                                                                  copy_name: str) -> None:
    """CREATE DATABASE ... TEMPLATE keeps the system identifier but not the database's oid: a
    copy (here of the test session's migrated template). ALTER DATABASE ... RENAME keeps the
    oid: the same ledger."""
    clone_pool.create(copy_name, postgresql_server.template_dbname)
    copied, recorded = rows(url_for(copy_name), "SELECT copied, recorded_database_name FROM runner.ledger_copy_v1()")[0]
    assert copied is True and recorded == postgresql_server.template_dbname
    adopted = run_cli("db", "adopt", "--reason", "a clone for tests", "--yes", url=url_for(copy_name))
    assert adopted.returncode == 0, adopted.stderr
    renamed = copy_name + "_renamed"
    with psycopg.connect(url_for("postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(copy_name),
                                                                     sql.Identifier(renamed)))
    try:
        assert scalar(url_for(renamed), "SELECT copied FROM runner.ledger_copy_v1()") is False
    finally:
        with psycopg.connect(url_for("postgres"), autocommit=True) as admin:
            admin.execute(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(renamed),
                                                                         sql.Identifier(copy_name)))
