"""Alembic environment for the runner schema.

The runner's history lives in its own schema and version table (runner.alembic_version), so
it sits beside an application's own alembic history. The URL comes from, in order: the
config's sqlalchemy.url (set by `runner db ...`), `-x url=...`, RUNNER_DATABASE_URL,
DATABASE_URL. Online, it first takes the session-level advisory lock (21077, -2), one per
database whatever RUNNER_LOCK_NAMESPACE says (and (namespace, -2) too under another namespace:
runner/migrate.py, MIGRATE_LOCK_KEY), and holds it until done, so two deploys never migrate at
once; so a URL through a transaction or statement pool, where that lock would outlive the
migration on a pooled backend, is refused first (runner/pooler.py). Every revision still to
apply runs in one transaction; each statement waits at most the
lock timeout (RUNNER_MIGRATE_LOCK_TIMEOUT seconds, 5 unless set) for a lock, and a migration
that hits it is rolled back whole and tried again, RUNNER_MIGRATE_ATTEMPTS times in all (3),
then fails with one line, nothing applied. Offline mode (`runner db sql`, `alembic upgrade
head --sql`) prints the SQL for a DBA to review.

After the schema steps, when the ledger is at the head, the same transaction applies the live
SQL objects that changed (runner/sqlfiles.py: sql/objects.txt, recorded in runner.sql_objects);
offline, every live object is printed. A ledger migrated by the history before the baseline is
stamped first: at 0025_scan it is the baseline exactly (runner/migrate.py, STAMPED); at an
older revision it is refused with one line.
"""

from __future__ import annotations

import os
import time

import psycopg
from alembic import context
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from runner.settings import ConfigError, lock_namespace, sqlalchemy_url
from runner.sqlfiles import object_checksum, objects_to_apply, queries, read_sql
from runner.store.migrate import (
    MigrationLocked,
    migrate_attempts,
    migrate_lock_keys,
    migrate_lock_timeout,
    stamp_target,
)
from runner.store.pooler import check_session

SCHEMA = "runner"
VERSION_TABLE = "alembic_version"

config = context.config


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url") or context.get_x_argument(as_dictionary=True).get(
        "url"
    )
    url = url or os.environ.get("RUNNER_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit(
            "runner: no database: set RUNNER_DATABASE_URL (or DATABASE_URL), or use -x url=..."
        )
    return sqlalchemy_url(url)


def _at_head(revisions: tuple[str, ...]) -> bool:
    return set(revisions) == set(context.script.get_heads())


def _apply_objects(current: dict[str, str]) -> None:
    """Apply the live objects that differ from ``current`` (file -> checksum) and record them."""
    record = queries("objects")["record_object"]
    for name in objects_to_apply(current):
        context.execute(read_sql(name))
        context.execute(text(record).bindparams(name=name, checksum=object_checksum(name)))


def _stamp(connection: object) -> None:
    """A ledger of the history before the baseline: at 0025_scan, stamped onto the baseline
    (the same tables); older, refused with one line (nothing applied)."""
    from sqlalchemy.engine import Connection

    assert isinstance(connection, Connection)
    try:
        exists = connection.execute(text("SELECT to_regclass('runner.alembic_version') IS NOT NULL")).scalar()
        version = connection.execute(text(queries("objects")["version"])).scalar() if exists else None
        target = stamp_target(version) if version is not None else None
        if target is not None:
            connection.execute(text(queries("objects")["stamp"]), {"baseline": target, "stamped": version})
        connection.commit()
    finally:
        connection.rollback()  # (nothing open after the commit) alembic begins its own transaction


def run_offline() -> None:
    # paramstyle named: the SQL files' % signs (format(), RAISE, LIKE) print as they are, not
    # doubled as a pyformat dialect escapes them (psql would then refuse the RAISEs)
    context.configure(
        url=_url() if not config.get_main_option("offline_dialect_only") else "postgresql://",
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        version_table=VERSION_TABLE,
        version_table_schema=SCHEMA,
        transactional_ddl=True,
    )
    lock_timeout = migrate_lock_timeout(config.get_main_option("runner_lock_timeout"))
    with context.begin_transaction():
        # as online: one deploy migrates at a time (the transaction-level form of the same key
        # conflicts with the session lock an online upgrade holds), and no statement waits
        # longer than the lock timeout for a table lock
        for namespace, key in migrate_lock_keys(lock_namespace()):
            context.execute(text(queries("objects")["offline_lock"]).bindparams(namespace=namespace, key=key))
        context.execute(text(queries("objects")["offline_lock_timeout"]).bindparams(
            ms=f"{max(1, round(lock_timeout * 1000))}ms"))
        context.get_context().impl.static_output(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA};\n")
        context.run_migrations()
        destination = context.get_revision_argument()
        target = context.script.get_revisions(destination) if destination else ()
        if _at_head(tuple(rev.revision for rev in target if rev is not None)):
            _apply_objects({})


def _lock_timed_out(exc: OperationalError) -> bool:
    return getattr(exc.orig, "sqlstate", None) == "55P03"  # lock_not_available


def _refuse_a_pool(url: str) -> None:
    """The migrate lock below is a session lock, held until the migration's session ends:
    through a transaction or statement pool it would stay on a pooled backend after the
    migration (and every later upgrade would wait for it). Such a URL is refused with one
    line, before anything is taken or applied (runner/pooler.py)."""
    libpq = "postgresql://" + url.split("://", 1)[1]
    try:
        conn = psycopg.connect(libpq, autocommit=True, prepare_threshold=None, connect_timeout=10,
                               application_name="runner-migrate")
    except psycopg.OperationalError:
        return  # the engine's own connection says why, as before
    with conn:
        check_session(conn, "the migration's database URL")


def run_online() -> None:
    lock_timeout = migrate_lock_timeout(config.get_main_option("runner_lock_timeout"))
    attempts = migrate_attempts(config.get_main_option("runner_attempts"))
    url = _url()
    _refuse_a_pool(url)
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            # one deploy migrates at a time: the others wait here for this session lock (one
            # per database: runner/migrate.py, MIGRATE_LOCK_KEY), then find the schema at head
            # and have nothing to do. Held until this session ends. No lock timeout yet: a
            # deploy waiting for another one holds nothing the fleet needs.
            for namespace, key in migrate_lock_keys(lock_namespace()):
                connection.execute(text("SELECT pg_advisory_lock(:namespace, :key)"),
                                   {"namespace": namespace, "key": key})
            connection.commit()
            # from here on a statement waits at most lock_timeout for a table lock: a
            # migration queued behind a long transaction would make every runner's query on
            # that table queue behind it
            connection.execute(text("SELECT set_config('lock_timeout', :ms, false)"),
                               {"ms": f"{max(1, round(lock_timeout * 1000))}ms"})
            connection.commit()
            for attempt in range(1, attempts + 1):
                try:
                    # the version table lives in the runner schema, which must exist first
                    connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
                    connection.commit()
                    _stamp(connection)
                    context.configure(
                        connection=connection,
                        version_table=VERSION_TABLE,
                        version_table_schema=SCHEMA,
                        transactional_ddl=True,
                    )
                    # every revision still to apply, in this one transaction: a lock timeout
                    # rolls all of them back
                    with context.begin_transaction():
                        context.run_migrations()
                        heads = context.get_context().get_current_heads()
                        if _at_head(heads):
                            current = queries("objects")["current_objects"]
                            _apply_objects({name: checksum for name, checksum
                                            in connection.execute(text(current)).all()})
                        elif not heads:
                            # downgraded to base: the version table and the schema go too,
                            # when nothing else is left in it
                            connection.execute(text(queries("objects")["drop_empty_schema"]))
                    return
                except OperationalError as exc:
                    if not _lock_timed_out(exc):
                        raise
                    connection.rollback()
                    if attempt == attempts:
                        raise MigrationLocked(
                            f"the migration could not take its locks within {lock_timeout:g} s, {attempts} "
                            "time(s): another session holds a lock on a table or view it changes (see "
                            "pg_locks, pg_stat_activity); nothing was applied. Try again when that "
                            "transaction ends, or raise RUNNER_MIGRATE_LOCK_TIMEOUT") from None
                    # a pause that grows, so that the transaction in the way may end
                    time.sleep(min(5.0, 0.5 * attempt))
    finally:
        engine.dispose()


def _main() -> None:
    if context.is_offline_mode():
        run_offline()
        return
    try:
        run_online()
    except ConfigError as exc:
        if config.cmd_opts is None:
            raise  # `runner db ...`: its one-line error
        raise SystemExit(f"runner: error: {exc}") from None  # `alembic upgrade`: one line too


_main()
