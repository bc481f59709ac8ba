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


# a URL's password: between "scheme://user:" and the first "@" (libpq ends the user info
# there), spaces included (libpq refuses them, but its error would echo them)
_PASSWORD_IN_URL = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:@/\s]*:)([^@/\n]*)(@)", re.IGNORECASE)
# a password or sslpassword given as a keyword (password = 'a b', password=x) or as a URL
# query argument (?sslpassword=x&...): a quoted value to its closing quote (or the end), else
# up to a blank or '&'
_PASSWORD_PARAM = re.compile(
    r"((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&]*)", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` (a URL, a keyword/value string, or an error message that may echo either)
    with every password replaced by ``***``."""
    text = _PASSWORD_IN_URL.sub(r"\1***\3", text)
    return _PASSWORD_PARAM.sub(r"\1***", text)


def secrets_of(url: str) -> list[str]:
    """The password and sslpassword a URL or keyword string carries (none when it cannot
    be parsed: :func:`redact` then covers it)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(url)
    except Exception:
        return []
    return [str(params[k]) for k in ("password", "sslpassword") if params.get(k)]


def has_password(url: str) -> bool:
    return bool(secrets_of(url)) or redact(url) != url


def redact_error(text: str, url: str) -> str:
    """An error message about connecting to ``url``: redacted, and without the URL's own
    password values wherever the message echoes them."""
    text = redact(text)
    for secret in secrets_of(url):
        if len(secret) >= 3:
            text = text.replace(secret, "***")
    return text


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
