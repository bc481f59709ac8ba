"""The runner's schema migrations, driven through alembic.

``runner db upgrade`` / ``current`` / ``sql`` call these; ``alembic upgrade head`` from the
repository root runs the same revisions. ``check_schema`` is what ``runner start`` and the
listing commands call first: an unmigrated or too-new schema is a clear one-line error.
"""

from __future__ import annotations

import io
from importlib import resources
from typing import TYPE_CHECKING, Any

import psycopg

from runner.settings import ConfigError, redact

if TYPE_CHECKING:
    from alembic.config import Config

# The newest revision under migrations/versions. Kept here so that every command can check
# the schema without importing alembic (half a second); a test keeps it equal to alembic's.
HEAD = "0022_probes"

# `runner db upgrade` (and `alembic upgrade`, through migrations/env.py) holds the session-level
# advisory lock (lock namespace, MIGRATE_LOCK_KEY) while it migrates, so that two deploys never
# migrate at once: the second waits, then finds the schema at head. The number is the one
# runner.duty_lock_key_v1('migrate') gives (sql/functions/duty_lock_key_v1.sql: the key scheme),
# held here because the lock is taken before the schema may exist; a test keeps them equal.
MIGRATE_LOCK_KEY = -2


def alembic_config(url: str | None, output: io.StringIO | None = None) -> Config:
    from alembic.config import Config

    cfg = Config(output_buffer=output) if output is not None else Config()
    cfg.set_main_option("script_location", str(resources.files("runner._migrations")))
    if url:
        # alembic's ConfigParser treats % as interpolation
        from runner.settings import sqlalchemy_url

        cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
    return cfg


def head_revision() -> str:
    return HEAD


def alembic_head() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config(None)).get_current_head()


def known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config(None))
    return {rev.revision for rev in script.walk_revisions()}


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)


def offline_sql(revision: str = "head") -> str:
    """The SQL of the migrations up to ``revision``, for a DBA to review (no database used)."""
    from alembic import command

    out = io.StringIO()
    cfg = alembic_config(None, out)
    cfg.set_main_option("sqlalchemy.url", "postgresql+psycopg://")
    command.upgrade(cfg, revision, sql=True)
    return out.getvalue()


def current_revision(conn: psycopg.Connection[Any]) -> str | None:
    """The schema's revision, or None when the runner schema was never migrated."""
    row = conn.execute("SELECT to_regclass('runner.alembic_version') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return None
    rev = conn.execute("SELECT version_num FROM runner.alembic_version").fetchone()
    return rev[0] if rev else None


def check_schema(conn: psycopg.Connection[Any], url: str) -> None:
    """Raise ConfigError unless the runner schema is exactly at this runner's head."""
    rev = current_revision(conn)
    head = head_revision()
    if rev is None:
        raise ConfigError(
            f"the database {redact(url)} has no runner schema: run `runner db upgrade` first"
        )
    if rev == head:
        return
    if rev in known_revisions():
        raise ConfigError(
            f"the runner schema is at revision {rev}, older than this runner's {head}: "
            "run `runner db upgrade`"
        )
    raise ConfigError(
        f"the runner schema is at revision {rev}, which this runner does not know (its head "
        f"is {head}): the database was migrated by a newer runner; upgrade this one"
    )


def describe_schema(conn: psycopg.Connection[Any]) -> str:
    """A normalised, stable text description of the runner schema (tables, columns,
    constraints, indexes, storage parameters, functions, views), compared by a test with sql/schema.txt."""
    from runner.sqlfiles import queries

    q = queries("schema")
    out: list[str] = []
    table = None
    for name, kind, _num, col, typ, notnull, default, identity in conn.execute(q["columns"]):
        if name != table:
            out.append(f"\n{kind} runner.{name}")
            table = name
        extra = " not null" if notnull else ""
        extra += f" default {default}" if default is not None else ""
        extra += " identity" if identity else ""
        out.append(f"  {col} {typ}{extra}")
    out.append("")
    for name, conname, definition in conn.execute(q["constraints"]):
        out.append(f"constraint runner.{name}.{conname}: {' '.join(definition.split())}")
    out.append("")
    for _table, _index, indexdef in conn.execute(q["indexes"]):
        out.append(" ".join(indexdef.split()))
    out.append("")
    for name, options in conn.execute(q["storage"]):
        out.append(f"storage runner.{name}: {options}")
    out.append("")
    for proname, args, result, lang, vol, par, strict, src in conn.execute(q["functions"]):
        out.append(f"function runner.{proname}({args}) returns {result} language {lang} "
                   f"volatility {vol} parallel {par} strict {strict}")
        out.append("  " + " ".join(src.split()))
    # Views are described by their columns (above), not by pg_get_viewdef: its text differs
    # between PostgreSQL versions; their definitions live in sql/views/.
    return "\n".join(out).strip() + "\n"


def privilege_warning(conn: psycopg.Connection[Any], command: str = "runner start",
                      role: str = "worker") -> str | None:
    """One line when the session runs as a superuser or as the owner of the runner schema
    (which `runner start`, or `runner web`, should not: see sql/roles.sql), else None."""
    from runner.sqlfiles import queries

    row = conn.execute(queries("schema")["login_privileges"]).fetchone()
    if row is None:
        return None
    login, superuser, owner, owner_name = row
    if superuser:
        what = "a superuser (it bypasses every role check and the audit's append-only trigger)"
    elif owner:
        what = (f"the owner of the runner schema ({owner_name}: exempt from the audit's append-only "
                "trigger, and every role check)")
    else:
        return None
    return (f"connected as {login}, {what}; run `{command}` as a login in the {role} role "
            "(sql/roles.sql) and the migrations as the owner")
