"""Alembic environment for the runner schema.

The runner's history lives in its own schema and version table (runner.alembic_version), so
it sits beside an application's own alembic history. The URL comes from, in order: the
config's sqlalchemy.url (set by `runner db ...`), `-x url=...`, RUNNER_DATABASE_URL,
DATABASE_URL. Online, it first takes the session-level advisory lock (21077, -2), one per
database whatever RUNNER_LOCK_NAMESPACE says (and (namespace, -2) too under another namespace:
runner/migrate.py, MIGRATE_LOCK_KEY), and holds it until done, so two deploys never migrate at
once. Every revision still to apply runs in one transaction; each statement waits at most the
lock timeout (RUNNER_MIGRATE_LOCK_TIMEOUT seconds, 5 unless set) for a lock, and a migration
that hits it is rolled back whole and tried again, RUNNER_MIGRATE_ATTEMPTS times in all (3),
then fails with one line, nothing applied. Offline mode (`runner db sql`, `alembic upgrade
head --sql`) prints the SQL for a DBA to review.
"""

from __future__ import annotations

import os
import time

from alembic import context
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from runner.migrate import MigrationLocked, migrate_attempts, migrate_lock_keys, migrate_lock_timeout
from runner.settings import ConfigError, lock_namespace, sqlalchemy_url

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


def run_offline() -> None:
    context.configure(
        url=_url() if not config.get_main_option("offline_dialect_only") else "postgresql://",
        literal_binds=True,
        version_table=VERSION_TABLE,
        version_table_schema=SCHEMA,
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.get_context().impl.static_output(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA};\n")
        context.run_migrations()


def _lock_timed_out(exc: OperationalError) -> bool:
    return getattr(exc.orig, "sqlstate", None) == "55P03"  # lock_not_available


def run_online() -> None:
    lock_timeout = migrate_lock_timeout(config.get_main_option("runner_lock_timeout"))
    attempts = migrate_attempts(config.get_main_option("runner_attempts"))
    engine = create_engine(_url(), poolclass=NullPool)
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
