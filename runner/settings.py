"""Where the runner's settings come from: flags, then environment, then defaults.

The database is ``--database-url``, else ``RUNNER_DATABASE_URL``, else ``DATABASE_URL``; with
none of them the embedded PostgreSQL kept under ``./.runner/`` is used (and the CLI says so).
URLs are shown only through :func:`redact`, so no output ever carries a password.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

DEFAULT_LOCK_NAMESPACE = 21077  # 'RU'; the top 16 bits of every runner advisory key


class ConfigError(Exception):
    """A setting is missing or malformed. The message is one line, shown as is."""


@dataclass(frozen=True)
class DatabaseChoice:
    url: str
    source: str  # 'flag', 'RUNNER_DATABASE_URL', 'DATABASE_URL' or 'embedded'

    @property
    def embedded(self) -> bool:
        return self.source == "embedded"


def choose_database(flag: str | None) -> DatabaseChoice | None:
    """The configured database, or None when nothing is configured (use the embedded one)."""
    if flag:
        return DatabaseChoice(flag, "flag")
    for name in ("RUNNER_DATABASE_URL", "DATABASE_URL"):
        value = os.environ.get(name)
        if value:
            return DatabaseChoice(value, name)
    return None


def sqlalchemy_url(url: str) -> str:
    """The URL for SQLAlchemy's psycopg 3 dialect (alembic talks through SQLAlchemy)."""
    if url.startswith("postgresql+psycopg://"):
        return url
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    if "://" not in url:
        # a libpq keyword string: pass it through as query arguments is not supported by
        # SQLAlchemy, so require a URL
        raise ConfigError(f"database URL must look like postgresql://...: {redact(url)}")
    raise ConfigError(f"not a PostgreSQL URL: {redact(url)}")


_PASSWORD_IN_URL = re.compile(r"(://[^:/@\s]*:)([^@\s]*)(@)")
_PASSWORD_PARAM = re.compile(r"((?:^|[\s?&])password=)([^\s&]*)", re.IGNORECASE)


def redact(url: str) -> str:
    """The URL with any password replaced by ``***``."""
    url = _PASSWORD_IN_URL.sub(r"\1***\3", url)
    return _PASSWORD_PARAM.sub(r"\1***", url)


def lock_namespace() -> int:
    raw = os.environ.get("RUNNER_LOCK_NAMESPACE")
    if raw is None or raw == "":
        return DEFAULT_LOCK_NAMESPACE
    try:
        value = int(raw, 0)
    except ValueError:
        raise ConfigError(f"RUNNER_LOCK_NAMESPACE must be an integer 0..65535, got {raw!r}") from None
    if not 0 <= value <= 65535:
        raise ConfigError(f"RUNNER_LOCK_NAMESPACE must be an integer 0..65535, got {value}")
    return value
