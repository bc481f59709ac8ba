"""Alembic environment for the runner schema.

The runner's history lives in its own schema and version table (runner.alembic_version), so
it sits beside an application's own alembic history. The URL comes from, in order: the
config's sqlalchemy.url (set by `runner db ...`), `-x url=...`, RUNNER_DATABASE_URL,
DATABASE_URL. Online, it first takes the session-level advisory lock (RUNNER_LOCK_NAMESPACE,
-2) and holds it until done, so two deploys never migrate at once. Offline mode (`runner db
sql`, `alembic upgrade head --sql`) prints the SQL for a DBA to review.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from runner.migrate import MIGRATE_LOCK_KEY
from runner.settings import lock_namespace, sqlalchemy_url

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


def run_online() -> None:
    engine = create_engine(_url(), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            # one deploy migrates at a time: the others wait here for this session lock
            # (namespace, -2) (runner/migrate.py: MIGRATE_LOCK_KEY), then find the schema at
            # head and have nothing to do. Held until this session ends.
            connection.execute(text("SELECT pg_advisory_lock(:namespace, :key)"),
                               {"namespace": lock_namespace(), "key": MIGRATE_LOCK_KEY})
            connection.commit()
            # the version table lives in the runner schema, which must exist first
            connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
            connection.commit()
            context.configure(
                connection=connection,
                version_table=VERSION_TABLE,
                version_table_schema=SCHEMA,
                transactional_ddl=True,
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
