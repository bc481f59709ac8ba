"""The SQL side of the runner, read from the files under sql/.

Query files hold blocks introduced by a line ``-- name: claim_runs``; everything up to the
next such line is that statement. ``queries("ledger")`` returns them as a mapping, loaded
once. Python code holds no SQL literals beyond trivial ones: it names a statement and passes
parameters.

The schema is two kinds of SQL (docs/explanation/architecture.md):

* *schema steps*, sql/schema/NNNN_name.sql (and .down.sql), applied by the numbered alembic
  revision of the same name under migrations/versions: tables, indexes, constraints and data.
  Never edited once merged (tests/test_migrations.py keeps their checksums).
* *live objects*, every view, function and trigger in exactly one file under sql/views or
  sql/functions, listed in apply order in sql/objects.txt. After the schema steps,
  migrations/env.py applies ``objects_to_apply(current)``: the first file whose checksum
  differs from the one runner.sql_objects records as current, and every file after it (a
  file that drops and recreates its object takes its dependents with it; they follow it in
  the list and are applied again). Changing a view is editing its one file.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from importlib import resources
from pathlib import Path

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


@cache
def sql_dir() -> Path:
    """The directory holding the SQL files (sql/ in a checkout, runner/_sql when installed)."""
    return Path(str(resources.files("runner._sql")))


def has_statements(text: str) -> bool:
    """Whether SQL text holds anything beyond comments and blank lines."""
    return any(line.strip() and not line.strip().startswith("--") for line in text.splitlines())


def apply_files(execute: Callable[[str], object], names: Iterable[str]) -> None:
    """Run SQL files in order with ``execute`` (alembic's ``op.execute``), skipping files
    that hold only comments. Every revision under migrations/versions applies its SQL so."""
    for name in names:
        sql = read_sql(name)
        if has_statements(sql):
            execute(sql)


def read_sql(relative: str) -> str:
    """The text of one SQL file, e.g. ``read_sql("views/missing_slots.sql")``."""
    return (sql_dir() / relative).read_text(encoding="utf-8")


@cache
def queries(module: str) -> dict[str, str]:
    """Named statements of ``sql/queries/<module>.sql``."""
    text = read_sql(f"queries/{module}.sql")
    parts = _NAME.split(text)
    named: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        statement = body.strip().rstrip(";").strip()
        if name in named:
            raise ValueError(f"sql/queries/{module}.sql: statement {name!r} defined twice")
        if not statement:
            raise ValueError(f"sql/queries/{module}.sql: statement {name!r} is empty")
        named[name] = statement
    return named


@cache
def live_objects() -> tuple[str, ...]:
    """The live object files (``functions/x.sql``, ``views/y.sql``) in apply order, from
    sql/objects.txt (blank lines and ``#`` comments skipped)."""
    names = []
    for line in read_sql("objects.txt").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.append(line)
    return tuple(names)


@cache
def object_checksum(name: str) -> str:
    """The SHA-256 of a live object file's bytes, as runner.sql_objects records it."""
    return hashlib.sha256((sql_dir() / name).read_bytes()).hexdigest()


def objects_to_apply(current: Mapping[str, str]) -> list[str]:
    """The live object files to apply to a ledger whose current checksums (file -> checksum,
    runner.sql_objects) are ``current``: from the first one that differs to the end of the
    list; none when every file is as recorded."""
    order = live_objects()
    for index, name in enumerate(order):
        if current.get(name) != object_checksum(name):
            return list(order[index:])
    return []


def unapplied_objects(applied: Iterable[tuple[str, str]]) -> list[str]:
    """This code's live object files whose text was never applied to the ledger, given every
    (file, checksum) pair runner.sql_objects holds: non-empty means the ledger's objects are
    older than this code (`runner db upgrade`); a ledger whose objects are newer holds this
    code's checksums among its older rows."""
    seen = set(applied)
    return [name for name in live_objects() if (name, object_checksum(name)) not in seen]
