"""The runner's schema migrations, driven through alembic.

``runner db upgrade`` / ``current`` / ``sql`` call these; ``alembic upgrade head`` from the
repository root runs the same revisions. ``check_schema`` is what ``runner start`` and the
listing commands call first: an unmigrated or too-new schema is a clear one-line error.
"""

from __future__ import annotations

import io
import os
from importlib import resources
from typing import TYPE_CHECKING, Any

import psycopg

from runner.settings import DEFAULT_LOCK_NAMESPACE, ConfigError, redact

if TYPE_CHECKING:
    from alembic.config import Config

# The newest revision under migrations/versions. Kept here so that every command can check
# the schema without importing alembic (half a second); a test keeps it equal to alembic's.
HEAD = "0012_pauseevery"

# The history before the baseline (revisions 0001_foundation .. 0025_scan, rewritten once
# before the first release into migrations/versions/0001_baseline.py and the live objects of
# sql/objects.txt). A ledger at the last of them has exactly the baseline's tables and is
# stamped onto it by migrations/env.py; one at an older revision must first be upgraded to
# 0025_scan by the runner of that history (git history before the baseline).
STAMPED = {"0025_scan": "0001_baseline"}
BEFORE_BASELINE = (
    "0001_foundation", "0002_faults", "0003_time", "0004_operators", "0005_shares", "0006_edges",
    "0007_security", "0008_audit", "0009_retention", "0010_web", "0011_lanes", "0012_tiers",
    "0013_verify", "0014_webperf", "0015_scale", "0016_health", "0018_recovery", "0019_wide",
    "0020_bounded", "0021_prune", "0022_probes", "0023_settings", "0024_sessions",
)

# `runner db upgrade` / `downgrade` (and `alembic upgrade`, through migrations/env.py) holds
# the session-level advisory lock (MIGRATE_LOCK_NAMESPACE, MIGRATE_LOCK_KEY) while it migrates,
# so that two deploys never migrate at once: the second waits, then finds the schema at head.
# The key is one per database whatever RUNNER_LOCK_NAMESPACE says: the namespace keeps a
# fleet's run and duty keys clear of an application's advisory locks, but the ledger it
# guards is the one `runner` schema of the database (the schema name is fixed: a database
# holds one ledger), so two deploys configured with different namespaces still migrate the
# same tables. The first half is the default namespace (21077, 'RU'): the key runners of the
# previous revisions took with the default namespace, so an old deploy and a new one exclude
# each other. A deploy whose RUNNER_LOCK_NAMESPACE is another one takes (that namespace, -2)
# as well, after the fixed key, which is the key an old deploy of that namespace takes
# (migrate_lock_keys). The number -2 is the one runner.duty_lock_key_v1('migrate') gives
# (sql/functions/duty_lock_key_v1.sql: the key scheme), held here because the lock is taken
# before the schema may exist; a test keeps them equal.
MIGRATE_LOCK_NAMESPACE = DEFAULT_LOCK_NAMESPACE
MIGRATE_LOCK_KEY = -2

# Every statement of a migration waits at most this long for a table lock (lock_timeout), so
# that a migration queued behind a long transaction does not make every runner's query queue
# behind it; the whole migration (one transaction: migrations/env.py) is then rolled back and
# tried again, MIGRATE_ATTEMPTS times in all, before `runner db upgrade` fails with one line
# and nothing applied. RUNNER_MIGRATE_LOCK_TIMEOUT (seconds) and RUNNER_MIGRATE_ATTEMPTS, or
# the options of `runner db upgrade`, change them.
DEFAULT_MIGRATE_LOCK_TIMEOUT = 5.0
DEFAULT_MIGRATE_ATTEMPTS = 3


class MigrationLocked(ConfigError):
    """A migration could not take its locks within the lock timeout, on every attempt."""


def stamp_target(version: str) -> str | None:
    """The revision a ledger of the history before the baseline is stamped onto (None: it is
    of this history, or unknown); ConfigError for one too old to stamp."""
    if version in STAMPED:
        return STAMPED[version]
    if version in BEFORE_BASELINE:
        raise ConfigError(
            f"the runner schema is at revision {version}, from before the baseline revision of this "
            f"runner's migrations: upgrade it to {next(iter(STAMPED))} with a runner of that history first "
            "(nothing was applied)")
    return None


def migrate_lock_keys(namespace: int) -> list[tuple[int, int]]:
    """The advisory keys a migration holds, in the order it takes them (see above)."""
    keys = [(MIGRATE_LOCK_NAMESPACE, MIGRATE_LOCK_KEY)]
    if namespace != MIGRATE_LOCK_NAMESPACE:
        keys.append((namespace, MIGRATE_LOCK_KEY))
    return keys


def migrate_lock_timeout(raw: str | None = None) -> float:
    """Seconds a migration statement waits for a lock: ``raw`` (an option), else
    RUNNER_MIGRATE_LOCK_TIMEOUT, else the default. A positive number of seconds, at most 3600."""
    raw = raw if raw not in (None, "") else os.environ.get("RUNNER_MIGRATE_LOCK_TIMEOUT")
    if raw is None or raw.strip() == "":
        return DEFAULT_MIGRATE_LOCK_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 3600:  # (NaN fails too)
        raise ConfigError(f"the migration lock timeout (RUNNER_MIGRATE_LOCK_TIMEOUT, --lock-timeout) must be "
                          f"a number of seconds above 0 and at most 3600, got {raw!r}")
    return value


def migrate_attempts(raw: str | None = None) -> int:
    """How many times a migration is tried: ``raw``, else RUNNER_MIGRATE_ATTEMPTS, else 3 (1..100)."""
    raw = raw if raw not in (None, "") else os.environ.get("RUNNER_MIGRATE_ATTEMPTS")
    if raw is None or raw.strip() == "":
        return DEFAULT_MIGRATE_ATTEMPTS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= 100:
        raise ConfigError(f"the migration attempts (RUNNER_MIGRATE_ATTEMPTS, --attempts) must be an integer "
                          f"1..100, got {raw!r}")
    return value


def alembic_config(url: str | None, output: io.StringIO | None = None, *, lock_timeout: float | None = None,
                   attempts: int | None = None) -> Config:
    from alembic.config import Config

    cfg = Config(output_buffer=output) if output is not None else Config()
    cfg.set_main_option("script_location", str(resources.files("runner._migrations")))
    # read by migrations/env.py (else the environment, else the defaults)
    if lock_timeout is not None:
        cfg.set_main_option("runner_lock_timeout", repr(float(lock_timeout)))
    if attempts is not None:
        cfg.set_main_option("runner_attempts", str(int(attempts)))
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


def upgrade(url: str, revision: str = "head", *, lock_timeout: float | None = None,
            attempts: int | None = None) -> None:
    """Migrate to ``revision`` in one transaction; MigrationLocked when its locks could not be
    taken within ``lock_timeout`` seconds on any of ``attempts`` tries (nothing applied)."""
    from alembic import command

    command.upgrade(alembic_config(url, lock_timeout=lock_timeout, attempts=attempts), revision)


def downgrade(url: str, revision: str, *, lock_timeout: float | None = None,
              attempts: int | None = None) -> None:
    from alembic import command

    command.downgrade(alembic_config(url, lock_timeout=lock_timeout, attempts=attempts), revision)


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
        check_objects(conn)
        return
    if rev in known_revisions() or rev in STAMPED or rev in BEFORE_BASELINE:
        raise ConfigError(
            f"the runner schema is at revision {rev}, older than this runner's {head}: "
            "run `runner db upgrade`"
        )
    raise ConfigError(
        f"the runner schema is at revision {rev}, which this runner does not know (its head "
        f"is {head}): the database was migrated by a newer runner; upgrade this one"
    )


def check_objects(conn: psycopg.Connection[Any]) -> None:
    """Raise ConfigError when a live SQL object of this runner was never applied to the ledger
    (its file changed since the last `runner db upgrade`). Objects newer than this runner's are
    fine: they keep the signatures an older runner calls (the _vN rule)."""
    from runner.sqlfiles import queries, unapplied_objects

    missing = unapplied_objects(conn.execute(queries("objects")["applied_objects"]).fetchall())
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise ConfigError(f"the runner schema's SQL objects are older than this runner's ({shown}): "
                          "run `runner db upgrade`")


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


def unapplied_objects_of(url: str) -> list[str]:
    """This runner's live object files never applied to the ledger at ``url`` (tests, `runner db current`)."""
    from runner.sqlfiles import queries, unapplied_objects

    with psycopg.connect(url) as conn:
        return unapplied_objects(conn.execute(queries("objects")["applied_objects"]).fetchall())
