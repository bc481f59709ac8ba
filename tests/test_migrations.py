"""The schema: alembic revisions in their own version table, idempotent upgrade, working
downgrade, offline SQL for a DBA, and a snapshot that guards against drift."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from runner import sqlfiles
from runner.store import migrate
from tests.support import ROOT, rows, run_cli, scalar


def test_schema_matches_committed_snapshot(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        actual = migrate.describe_schema(conn)
    expected = (ROOT / "sql" / "schema.txt").read_text()
    assert actual == expected, (
        "the migrated schema differs from sql/schema.txt; if the change is intended, run "
        "`python scripts/dump_schema.py <scratch database url>` and commit the result"
    )


def test_version_table_lives_in_runner_schema(db_url: str) -> None:
    assert scalar(db_url, "SELECT version_num FROM runner.alembic_version") == migrate.head_revision()
    assert scalar(db_url, "SELECT to_regclass('public.alembic_version')") is None


def test_upgrade_is_idempotent(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        before = migrate.describe_schema(conn)
    migrate.upgrade(db_url)
    migrate.upgrade(db_url)
    with psycopg.connect(db_url) as conn:
        assert migrate.describe_schema(conn) == before
    assert rows(db_url, "SELECT version_num FROM runner.alembic_version") == [
        (migrate.head_revision(),)
    ]


def test_downgrade_then_upgrade_round_trips(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        before = migrate.describe_schema(conn)
    migrate.downgrade(db_url, "base")
    # README: `runner db downgrade base` removes the runner schema, its version table with it
    assert scalar(db_url, "SELECT count(*) FROM pg_namespace WHERE nspname = 'runner'") == 0
    migrate.upgrade(db_url)
    with psycopg.connect(db_url) as conn:
        assert migrate.describe_schema(conn) == before


def test_leaves_application_tables_alone(empty_db_url: str) -> None:
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.alembic_version (version_num text)")
        conn.execute("INSERT INTO public.alembic_version VALUES ('app_rev_1')")
    migrate.upgrade(empty_db_url)
    assert rows(empty_db_url, "SELECT version_num FROM public.alembic_version") == [("app_rev_1",)]
    migrate.downgrade(empty_db_url, "base")
    assert rows(empty_db_url, "SELECT version_num FROM public.alembic_version") == [("app_rev_1",)]


def test_cli_db_upgrade_and_current(empty_db_url: str) -> None:
    current = run_cli("db", "current", url=empty_db_url)
    assert current.returncode == 0, current.stderr
    assert "current: (none" in current.stdout
    up = run_cli("db", "upgrade", url=empty_db_url)
    assert up.returncode == 0, up.stderr
    assert migrate.head_revision() in up.stdout
    again = run_cli("db", "current", "--json", url=empty_db_url)
    assert '"up_to_date": true' in again.stdout


def test_cli_db_sql_needs_no_database() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNNER_", "PG"))}
    out = subprocess.run([sys.executable, "-m", "runner", "db", "sql"], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "CREATE SCHEMA IF NOT EXISTS runner;" in out.stdout
    assert "CREATE TABLE runner.job_runs" in out.stdout
    assert "CREATE TABLE runner.alembic_version" in out.stdout
    # the live objects follow the schema steps, with their checksums
    assert out.stdout.index("CREATE TABLE runner.sql_objects") < out.stdout.index("CREATE OR REPLACE VIEW runner.alerts")
    assert "INSERT INTO runner.sql_objects (name, checksum) VALUES ('views/alerts.sql'" in out.stdout
    assert "no database configured" not in out.stderr


def test_plain_alembic_from_repo_root(empty_db_url: str) -> None:
    out = subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head"], capture_output=True,
                         text=True, cwd=ROOT, timeout=60,
                         env={**os.environ, "RUNNER_DATABASE_URL": empty_db_url})
    assert out.returncode == 0, out.stderr
    assert scalar(empty_db_url, "SELECT version_num FROM runner.alembic_version") == (
        migrate.head_revision()
    )


def test_head_constant_matches_alembic() -> None:
    assert migrate.alembic_head() == migrate.HEAD


HOT_TABLE_SETTINGS = {"autovacuum_vacuum_scale_factor=0.0", "autovacuum_vacuum_threshold=100000",
                      "autovacuum_vacuum_insert_scale_factor=0.0", "autovacuum_vacuum_insert_threshold=100000",
                      "autovacuum_analyze_scale_factor=0.0", "autovacuum_analyze_threshold=100000"}
RELOPTIONS = ("SELECT c.relname, c.reloptions FROM pg_class c WHERE c.oid IN"
              " ('runner.job_runs'::regclass, 'runner.attempts'::regclass) ORDER BY 1")


def test_hot_tables_vacuum_by_churn_not_by_size(db_url: str) -> None:
    """Fixed autovacuum thresholds on the two hot tables (the baseline's storage parameters),
    so the vacuum cadence follows the churn, not the ledger's size."""
    got = rows(db_url, RELOPTIONS)
    assert [name for name, _ in got] == ["attempts", "job_runs"]
    for _name, options in got:
        assert set(options or []) == HOT_TABLE_SETTINGS


# -- schema steps that never change, live objects in one file each ---------------------------

VERSIONS = ROOT / "migrations" / "versions"


def _steps() -> list[Path]:
    return sorted(p for p in VERSIONS.glob("[0-9]*.py"))


def test_merged_schema_steps_never_change() -> None:
    """Every schema step (migrations/versions/NNNN_*.py and its sql/schema/NNNN_* files) is
    listed in migrations/shipped.txt with the checksum it landed with: an edit of a merged
    migration fails here, and so does a new one not yet listed."""
    listed = {}
    for line in (ROOT / "migrations" / "shipped.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            digest, path = line.split()
            listed[path] = digest
    files = [str(p.relative_to(ROOT)) for p in _steps()]
    files += [str(p.relative_to(ROOT)) for p in sorted((ROOT / "sql" / "schema").glob("[0-9]*.sql"))]
    for path in files:
        actual = hashlib.sha256((ROOT / path).read_bytes()).hexdigest()
        assert path in listed, f"{path} is not in migrations/shipped.txt: add `{actual}  {path}` when it lands"
        assert listed[path] == actual, f"{path} changed after it was merged: add a new migration instead"
    assert sorted(listed) == sorted(files), "migrations/shipped.txt lists a file that is gone"


def test_file_order_is_apply_order_without_gaps() -> None:
    from alembic.script import ScriptDirectory

    steps = _steps()
    numbers = [int(p.name[:4]) for p in steps]
    assert numbers == list(range(1, len(steps) + 1)), numbers
    script = ScriptDirectory.from_config(migrate.alembic_config(None))
    applied = [rev.revision for rev in reversed(list(script.walk_revisions()))]
    assert applied == [p.stem for p in steps]
    for before, step in zip([None, *applied], applied, strict=False):
        assert script.get_revision(step).down_revision == before
    assert applied[-1] == migrate.HEAD


_CREATES = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?(FUNCTION|VIEW|TRIGGER)\s+(?:runner\.)?([a-z_0-9]+)", re.I)


def test_every_view_function_and_trigger_lives_in_exactly_one_file(db_url: str) -> None:
    live = sqlfiles.live_objects()
    assert len(set(live)) == len(live), "sql/objects.txt names a file twice"
    on_disk = sorted(f"{p.parent.name}/{p.name}" for p in (ROOT / "sql").glob("[fv][ui][ne]*/*.sql"))
    assert sorted(live) == on_disk, "sql/objects.txt and the files under sql/functions, sql/views differ"
    where: dict[tuple[str, str], list[str]] = {}
    for name in live:
        for kind, obj in _CREATES.findall(sqlfiles.read_sql(name)):
            where.setdefault((kind.upper(), obj), []).append(name)
    for path in (ROOT / "sql" / "schema").glob("*.sql"):
        assert not _CREATES.findall(path.read_text()), f"{path.name} creates a live object: give it its own file"
    twice = {obj: files for obj, files in where.items() if len(set(files)) > 1}
    assert not twice, twice
    in_db = rows(db_url, "SELECT 'FUNCTION', p.proname FROM pg_proc p WHERE p.pronamespace = 'runner'::regnamespace"
                         " UNION SELECT 'VIEW', c.relname FROM pg_class c"
                         " WHERE c.relnamespace = 'runner'::regnamespace AND c.relkind = 'v'"
                         " UNION SELECT 'TRIGGER', t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
                         " WHERE c.relnamespace = 'runner'::regnamespace AND NOT t.tgisinternal")
    assert set(in_db) == set(where), set(in_db) ^ set(where)


def test_a_changed_live_object_is_applied_again_with_what_follows_it(db_url: str) -> None:
    """A live file whose text differs from the recorded checksum is applied again by `runner
    db upgrade`, and every file after it in sql/objects.txt (a file that drops and recreates
    its object takes its dependents with it); the files before it are left alone."""
    live = sqlfiles.live_objects()
    changed = live.index("views/alerts.sql")
    stamp = "SELECT max(applied_at) FROM runner.sql_objects WHERE name = %s"
    before = {name: scalar(db_url, stamp, (name,)) for name in live}
    with psycopg.connect(db_url, autocommit=True) as conn:
        # the ledger as an older code left it: another alerts view, and runner.violations
        # (after it in the list) gone with it
        conn.execute("UPDATE runner.sql_objects SET checksum = repeat('0', 64) WHERE name = 'views/alerts.sql'")
        conn.execute("DROP VIEW runner.violations")
    assert migrate.unapplied_objects_of(db_url) == ["views/alerts.sql"]
    current = run_cli("db", "current", "--json", url=db_url)
    assert '"unapplied_objects": ["views/alerts.sql"]' in current.stdout and '"up_to_date": false' in current.stdout
    migrate.upgrade(db_url)
    assert scalar(db_url, "SELECT to_regclass('runner.violations') IS NOT NULL")
    after = {name: scalar(db_url, stamp, (name,)) for name in live}
    assert [name for name in live if after[name] != before[name]] == list(live[changed:])
    assert migrate.unapplied_objects_of(db_url) == []
    migrate.upgrade(db_url)  # nothing changed: nothing applied
    assert {name: scalar(db_url, stamp, (name,)) for name in live} == after


def test_a_runner_refuses_live_objects_older_than_its_code(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DELETE FROM runner.sql_objects WHERE name = 'functions/finish_attempts_v1.sql'")
    out = run_cli("start", "--app", "tests/apps/hello.py:app", url=db_url)
    assert out.returncode == 1
    [line] = [x for x in out.stderr.splitlines() if x.startswith("runner: error: ")]
    assert "SQL objects are older than this runner's (functions/finish_attempts_v1.sql)" in line
    assert "run `runner db upgrade`" in line
    assert scalar(db_url, "SELECT count(*) FROM runner.jobs") == 0
    migrate.upgrade(db_url)
    assert migrate.unapplied_objects_of(db_url) == []


def test_a_ledger_from_before_the_baseline_is_refused_with_one_line(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE runner.alembic_version SET version_num = '0018_recovery'")
    out = run_cli("db", "upgrade", url=db_url)
    assert out.returncode == 1, out.stdout
    assert out.stderr.strip().splitlines() == [
        "runner: error: the runner schema is at revision 0018_recovery, from before the baseline revision of "
        "this runner's migrations: upgrade it to 0025_scan with a runner of that history first (nothing was applied)"]
    assert scalar(db_url, "SELECT version_num FROM runner.alembic_version") == "0018_recovery"


def _dump(url: str) -> str:
    out = subprocess.run(["pg_dump", "--schema-only", "--no-owner", "--schema=runner", url],
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        pytest.skip(f"pg_dump cannot dump this server: {out.stderr.strip()[:200]}")
    return "\n".join(line for line in out.stdout.splitlines() if not line.startswith(("\\restrict", "\\unrestrict")))


def test_a_ledger_of_the_previous_release_upgrades_to_exactly_a_fresh_install(
        db_url: str, empty_db_url: str, tmp_path: Path) -> None:
    """The previous release's code (from the git history: before the baseline, 0025_scan)
    migrates an empty database; this code upgrades it (stamped onto the baseline, then the
    schema steps and live objects after it): `pg_dump -s` equals a fresh install's."""
    if shutil.which("pg_dump") is None:
        pytest.skip("pg_dump is not installed")
    from tests.test_upgrade import previous_release

    old = previous_release(tmp_path / "previous")
    env = {**os.environ, "PYTHONPATH": str(old), "RUNNER_DATABASE_URL": empty_db_url}
    up = subprocess.run([sys.executable, "-m", "runner", "db", "upgrade"], capture_output=True, text=True,
                        cwd=old, env=env, timeout=300)
    assert up.returncode == 0, up.stderr
    previous = scalar(empty_db_url, "SELECT version_num FROM runner.alembic_version")
    assert previous != migrate.HEAD
    migrate.upgrade(empty_db_url)
    assert scalar(empty_db_url, "SELECT version_num FROM runner.alembic_version") == migrate.HEAD
    assert _dump(empty_db_url) == _dump(db_url)


def test_the_offline_sql_applies_with_psql_and_equals_the_online_upgrade(db_url: str, empty_db_url: str) -> None:
    """`runner db sql` is what a DBA applies with psql: every % as written (no doubling: a
    RAISE with doubled %s has too many parameters), the migrate lock and the lock timeout
    taken as online; applied with ON_ERROR_STOP it gives the online upgrade's schema."""
    if shutil.which("psql") is None or shutil.which("pg_dump") is None:
        pytest.skip("psql and pg_dump are not installed")
    text = migrate.offline_sql()
    assert "%%" not in text
    assert "SELECT pg_advisory_xact_lock(21077, -2);" in text
    assert "SELECT set_config('lock_timeout', '5000ms', true);" in text
    applied = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", empty_db_url],
                             input=text, capture_output=True, text=True, timeout=300)
    assert applied.returncode == 0, applied.stderr[-2000:]
    assert scalar(empty_db_url, "SELECT version_num FROM runner.alembic_version") == migrate.HEAD
    assert migrate.unapplied_objects_of(empty_db_url) == []
    assert _dump(empty_db_url) == _dump(db_url)
