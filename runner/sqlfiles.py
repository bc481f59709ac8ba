"""The SQL side of the runner, read from the files under sql/.

Query files hold blocks introduced by a line ``-- name: claim_runs``; everything up to the
next such line is that statement. ``queries("ledger")`` returns them as a mapping, loaded
once. Python code holds no SQL literals beyond trivial ones: it names a statement and passes
parameters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
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
