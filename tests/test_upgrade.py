"""Upgrading while running (issue 16): `runner db upgrade` holds a documented advisory lock
so that two deploys never migrate at once (the second waits, then has nothing to do), and a
runner refuses to start against a schema older than its code (run `runner db upgrade`) or
newer (a revision it does not know), writing nothing. A runner of the previous revision's
code, started before the upgrade, keeps claiming and finishing runs after it, beside a runner
of the new code (expand/contract): the previous code is taken from the git history."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import psycopg
import pytest

from runner.store import migrate
from tests.support import ROOT, RunnerProcess, assert_ledger_clean, eventually, run_cli, runner_cmd, scalar

WAITING = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
           " AND classid = 21077 AND objid = 4294967294 AND objsubid = 2")  # (21077, -2) as two ints


def upgrade_process(url: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(runner_cmd("db", "upgrade"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env={**os.environ, **(env or {}), "RUNNER_DATABASE_URL": url})


def test_two_deploys_migrate_one_at_a_time(empty_db_url: str) -> None:
    with psycopg.connect(empty_db_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(21077, %s)", (migrate.MIGRATE_LOCK_KEY,))
        first, second = upgrade_process(empty_db_url), upgrade_process(empty_db_url)
        # both wait for the lock, and nothing is migrated meanwhile
        eventually(lambda: scalar(empty_db_url, WAITING) == 2, timeout=60, message="both upgrades wait")
        assert first.poll() is None and second.poll() is None
        assert scalar(empty_db_url, "SELECT to_regclass('runner.alembic_version')") is None
        holder.execute("SELECT pg_advisory_unlock(21077, %s)", (migrate.MIGRATE_LOCK_KEY,))
        outs = [p.communicate(timeout=120) for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs
    assert scalar(empty_db_url, "SELECT version_num FROM runner.alembic_version") == migrate.HEAD


def test_concurrent_upgrades_of_an_empty_database_both_succeed(empty_db_url: str) -> None:
    procs = [upgrade_process(empty_db_url) for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert scalar(empty_db_url, "SELECT version_num FROM runner.alembic_version") == migrate.HEAD


def _previous_of_head() -> str:
    from alembic.script import ScriptDirectory

    previous = ScriptDirectory.from_config(migrate.alembic_config(None)).get_revision(migrate.HEAD).down_revision
    assert isinstance(previous, str)
    return previous


def test_deploys_of_two_lock_namespaces_migrate_one_at_a_time(db_url: str) -> None:
    """The migrate lock is one per database, whatever RUNNER_LOCK_NAMESPACE says: the ledger is
    the database's one runner schema. A first deploy (namespace 1) is held inside its migration
    (a session locks the version table it updates last); a second deploy (namespace 2) waits
    for the migrate lock meanwhile, and migrates nothing; both then succeed."""
    migrate.downgrade(db_url, _previous_of_head())
    waiting_on_version = ("SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND NOT granted"
                          " AND relation = 'runner.alembic_version'::regclass")
    slow = {"RUNNER_MIGRATE_LOCK_TIMEOUT": "600"}
    with psycopg.connect(db_url) as holder:
        holder.execute("LOCK TABLE runner.alembic_version IN SHARE MODE")
        first = upgrade_process(db_url, {**slow, "RUNNER_LOCK_NAMESPACE": "1"})
        eventually(lambda: scalar(db_url, waiting_on_version) == 1, timeout=60,
                   message="the first deploy migrates, up to its version update")
        second = upgrade_process(db_url, {**slow, "RUNNER_LOCK_NAMESPACE": "2"})
        eventually(lambda: scalar(db_url, WAITING) == 1, timeout=60,
                   message="the second deploy waits for the migrate lock")
        assert first.poll() is None and second.poll() is None
        assert scalar(db_url, waiting_on_version) == 1  # the second is not inside a migration
        holder.rollback()
        outs = [p.communicate(timeout=120) for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs
    assert scalar(db_url, "SELECT version_num FROM runner.alembic_version") == migrate.HEAD


def test_a_migration_waits_for_a_lock_at_most_its_lock_timeout(db_url: str) -> None:
    """A migration queued behind a long transaction (a report reading runner.run_stages, a
    view the upgrade applies again) does not stall the fleet: each statement waits at most the
    lock timeout, the migration is rolled back and tried again, and after its attempts it fails
    with one line, nothing applied; a runner's query on that view meanwhile waits about the
    timeout at most. Once the report ends, the same upgrade succeeds."""
    migrate.downgrade(db_url, "0001_baseline")  # runner.sql_objects goes: every live object is applied again
    env = {"RUNNER_MIGRATE_LOCK_TIMEOUT": "0.5", "RUNNER_MIGRATE_ATTEMPTS": "2"}
    # (on the view, or on a table under it that a schema step alters first: job_runs)
    queued = ("SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND NOT granted"
              " AND mode = 'AccessExclusiveLock' AND relation IN (SELECT c.oid FROM pg_class c"
              " WHERE c.relnamespace = 'runner'::regnamespace)")
    with psycopg.connect(db_url) as report:
        report.execute("SELECT count(*) FROM runner.run_stages")
        up = subprocess.Popen(runner_cmd("db", "upgrade"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env={**os.environ, **env, "RUNNER_DATABASE_URL": db_url})
        eventually(lambda: scalar(db_url, queued) >= 1, timeout=60, message="the migration waits for its lock")
        with psycopg.connect(db_url, autocommit=True) as fleet:
            fleet.execute("SET statement_timeout = '20s'")
            began = time.monotonic()
            fleet.execute("SELECT count(*) FROM runner.run_stages").fetchone()
            waited = time.monotonic() - began
        assert waited < 3.0, waited
        out, err = up.communicate(timeout=120)
        assert up.returncode == 1, (out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith("runner: error: the migration could not take its locks within 0.5 s, 2 time(s)")
        assert "nothing was applied" in lines[0]
        assert scalar(db_url, "SELECT version_num FROM runner.alembic_version") == "0001_baseline"
        assert scalar(db_url, "SELECT to_regclass('runner.sql_objects')") is None
    done = run_cli("db", "upgrade", url=db_url, env=env)
    assert done.returncode == 0, done.stderr
    assert scalar(db_url, "SELECT version_num FROM runner.alembic_version") == migrate.HEAD
    assert scalar(db_url, "SELECT count(DISTINCT name) FROM runner.sql_objects") > 0


@pytest.mark.parametrize("value", ["0", "-1", "banana", "nan", "7200"])
def test_a_bad_migration_lock_timeout_is_one_line(db_url: str, value: str) -> None:
    out = run_cli("db", "upgrade", url=db_url, env={"RUNNER_MIGRATE_LOCK_TIMEOUT": value})
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "runner: error: the migration lock timeout (RUNNER_MIGRATE_LOCK_TIMEOUT, --lock-timeout) must be a "
        f"number of seconds above 0 and at most 3600, got {value!r}"]


def test_the_migrate_key_is_the_key_schemes(db_url: str) -> None:
    assert scalar(db_url, "SELECT runner.duty_lock_key_v1('migrate')") == migrate.MIGRATE_LOCK_KEY
    assert scalar(db_url, "SELECT runner.duty_lock_key_v1('prune')") == -1


def test_a_runner_newer_than_the_schema_refuses_to_start(db_url: str) -> None:
    migrate.downgrade(db_url, "0001_baseline")
    out = run_cli("start", "--app", "tests/apps/hello.py:app", url=db_url)
    assert out.returncode == 1
    [line] = [x for x in out.stderr.splitlines() if x.startswith("runner: error: ")]
    assert f"older than this runner's {migrate.HEAD}: run `runner db upgrade`" in line
    assert scalar(db_url, "SELECT count(*) FROM runner.jobs") == 0
    assert scalar(db_url, "SELECT count(*) FROM runner.instances") == 0


def test_a_runner_older_than_the_schema_refuses_to_start(db_url: str) -> None:
    """The schema was migrated by a newer runner (a revision this code does not know)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE runner.alembic_version SET version_num = '0010_next'")
    out = run_cli("start", "--app", "tests/apps/hello.py:app", url=db_url)
    assert out.returncode == 1
    [line] = [x for x in out.stderr.splitlines() if x.startswith("runner: error: ")]
    assert "revision 0010_next, which this runner does not know" in line and "upgrade this one" in line
    assert scalar(db_url, "SELECT count(*) FROM runner.jobs") == 0


# -- a rolling deploy: the previous revision's runner across the upgrade ---------------------


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=60)


# where HEAD is set: runner/store/migrate.py, and runner/migrate.py before the layout of issue 27
MIGRATE_PATHS = ("runner/store/migrate.py", "runner/migrate.py")


def _head_at(commit: str) -> str | None:
    """HEAD of the migrate module at ``commit`` (None: no such file or commit)."""
    for path in MIGRATE_PATHS:
        shown = _git("show", f"{commit}:{path}")
        if shown.returncode == 0:
            found = re.search(rb'^HEAD = "([^"]+)"', shown.stdout, re.MULTILINE)
            return found.group(1).decode() if found else None
    return None


def previous_release(into: Path) -> Path:
    """The newest code of the first-parent history whose head revision is not this head (the
    previous release: before 0001_baseline, the code at 0025_scan, which this code stamps),
    unpacked into ``into`` as an importable tree (runner/, its SQL as runner/_sql, its
    migrations as runner/_migrations, as an install lays them out). Skips without git history."""
    if shutil.which("git") is None or _git("rev-parse", "HEAD").returncode != 0:
        pytest.skip("not a git checkout: the previous revision's code is not at hand")
    listed = _git("rev-list", "--first-parent", "HEAD", "--", *MIGRATE_PATHS)
    old = None
    for commit in ["HEAD", *listed.stdout.decode().split()]:
        for candidate in (commit, f"{commit}^1"):
            head = _head_at(candidate)
            if head is not None and head != migrate.HEAD:
                old = candidate
                break
        if old is not None:
            break
    if old is None:
        pytest.skip(f"no commit of the first-parent history has a head other than {migrate.HEAD}")
    archive = _git("archive", "--format=tar", old, "runner", "sql", "migrations")
    assert archive.returncode == 0, archive.stderr
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    (into / "sql").rename(into / "runner" / "_sql")
    (into / "migrations").rename(into / "runner" / "_migrations")
    return into


@pytest.mark.slow
def test_a_runner_of_the_previous_revision_keeps_running_across_the_upgrade(
        empty_db_url: str, tmp_path: Path) -> None:
    """A rolling deploy: the schema at the previous revision, migrated by the previous code,
    and its runner running; `runner db upgrade` by the new code to head; the old runner goes
    on claiming and finishing runs, beside a runner of the new code, with no error, and
    stops cleanly. Fails when a revision breaks a statement the previous code runs."""
    old = previous_release(tmp_path / "previous")
    env = {**os.environ, "PYTHONPATH": str(old), "RUNNER_DATABASE_URL": empty_db_url}

    def old_runner(*args: str) -> subprocess.CompletedProcess[str]:
        # cwd: the old tree comes first on sys.path (python -m), before the installed runner
        return subprocess.run([sys.executable, "-m", "runner", *args], capture_output=True, text=True,
                              cwd=old, env=env, timeout=120)

    # the old tree's migrate module: runner/store/migrate.py, or runner/migrate.py before the layout
    module = next(p for p in MIGRATE_PATHS if (old / p).is_file()).removesuffix(".py").replace("/", ".")
    which = subprocess.run([sys.executable, "-c", f"import {module} as m; print(m.__file__, m.HEAD)"],
                           capture_output=True, text=True, cwd=old, env=env, timeout=60)
    assert which.stdout.startswith(str(old)), which
    previous = which.stdout.split()[1]
    up = old_runner("db", "upgrade")
    assert up.returncode == 0, up.stderr
    assert scalar(empty_db_url, "SELECT version_num FROM runner.alembic_version") == previous

    def succeeded_after(instant: object) -> bool:
        return scalar(empty_db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'"
                                    " AND finished_at > %s", (instant,)) >= 3

    log = tmp_path / "previous.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "runner", "start", "--app",
                                 f"{ROOT}/tests/apps/hello.py:app", "--poll-interval", "0.2"],
                                cwd=old, env=env, stdout=out, stderr=subprocess.STDOUT)
    new = None
    try:
        eventually(lambda: succeeded_after("-infinity"), timeout=60, message="the old runner runs")
        migrate.upgrade(empty_db_url)  # the deploy's migration, by the new code, while it runs
        assert scalar(empty_db_url, "SELECT version_num FROM runner.alembic_version") == migrate.HEAD
        upgraded = scalar(empty_db_url, "SELECT now()")
        eventually(lambda: succeeded_after(upgraded), timeout=60,
                   message="the old runner claims and finishes runs on the new schema")
        # the new code's runner beside it: both heartbeat, runs go on succeeding
        new = RunnerProcess("tests/apps/hello.py:app", empty_db_url, "--poll-interval", "0.2",
                            log=tmp_path / "new.log")
        eventually(lambda: scalar(empty_db_url, "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL"
                                                " AND heartbeat_at > now() - interval '5 seconds'") == 2,
                   timeout=60, message="both runners live")
        both = scalar(empty_db_url, "SELECT now()")
        eventually(lambda: succeeded_after(both), timeout=60, message="runs go on with both runners")
        assert proc.poll() is None, log.read_text()
    finally:
        if proc.poll() is None:
            proc.terminate()
        code = proc.wait(60)
        if new is not None:
            assert new.terminate() == 0, new.output()
    assert code == 0, log.read_text()
    assert "Traceback" not in log.read_text() and " ERROR " not in log.read_text(), log.read_text()
    assert scalar(empty_db_url, "SELECT count(*) FROM runner.job_runs WHERE status IN ('failed', 'dead')") == 0
    assert scalar(empty_db_url, "SELECT count(*) FROM runner.attempts"
                                " WHERE status IN ('failed', 'timed_out', 'dead')") == 0
    assert_ledger_clean(empty_db_url)
