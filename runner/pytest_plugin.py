"""A pytest fixture for testing one's own jobs: ``runner_database``, a throwaway database
migrated to head (runner/testing.py: fresh_database), one per test.

Enable it in a ``conftest.py``::

    pytest_plugins = ["runner.pytest_plugin"]

and name the server in ``RUNNER_TEST_DATABASE_URL`` (a ``postgresql://`` URL of any database
on it, as a role that may create databases). Without it the tests that use the fixture are
skipped, with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from runner.testing import fresh_database


@pytest.fixture
def runner_database() -> Iterator[str]:
    """The URL of a fresh database migrated to head, dropped after the test."""
    server = os.environ.get("RUNNER_TEST_DATABASE_URL")
    if not server:
        pytest.skip("RUNNER_TEST_DATABASE_URL is not set: no server for runner_database")
    with fresh_database(server) as url:
        yield url
