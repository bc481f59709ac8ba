"""A pytest fixture for testing one's own jobs: ``runner_database``, a throwaway database
migrated to head (runner/testing.py: fresh_database), one per test; dropped in the
background (runner/testing.py: DropBehind), so that no test waits for the server's checkpoint,
and every one of them gone when the session ends.

Enable it in a ``conftest.py``::

    pytest_plugins = ["runner.pytest_plugin"]

The server: ``RUNNER_TEST_DATABASE_URL`` when set (a ``postgresql://`` URL of any database on
it, as a role that may create databases); otherwise the embedded PostgreSQL, the one ``runner
start`` uses with no database configured (``./.runner/``, or ``RUNNER_TEST_EMBEDDED_HOME``),
so that the tests run on a bare machine as the project's own suite does instead of being
skipped. A server the test session had to start is stopped when the session ends (its data is
kept); one that was running already is left running. Only when the embedded server cannot
start either are the tests that use the fixture skipped, with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.settings import ConfigError
from runner.testing import DropBehind, fresh_database


@pytest.fixture(scope="session")
def runner_test_server() -> Iterator[str]:
    """A URL of the server the ``runner_database`` fixture makes its databases on."""
    url = os.environ.get("RUNNER_TEST_DATABASE_URL")
    if url:
        yield url
        return
    from runner.store import embedded

    home = os.environ.get("RUNNER_TEST_EMBEDDED_HOME")
    where = Path(home) if home else None
    try:
        server = embedded.start(where)
    except ConfigError as exc:
        pytest.skip(f"RUNNER_TEST_DATABASE_URL is not set and the embedded PostgreSQL did not start: {exc}")
    try:
        yield server.url
    finally:
        if server.started:
            embedded.stop(where)


@pytest.fixture(scope="session")
def runner_database_drops(runner_test_server: str) -> Iterator[DropBehind]:
    """The ``runner_database`` databases handed back, dropped behind the tests; the session
    ends once they are all dropped."""
    drops = DropBehind(runner_test_server)
    try:
        yield drops
    finally:
        drops.close()


@pytest.fixture
def runner_database(runner_test_server: str, runner_database_drops: DropBehind) -> Iterator[str]:
    """The URL of a fresh database migrated to head, dropped after the test (in the
    background; by the end of the session)."""
    with fresh_database(runner_test_server, drops=runner_database_drops) as url:
        yield url
