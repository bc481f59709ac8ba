"""Test databases: real PostgreSQL, never a mock.

The server is named by RUNNER_TEST_DATABASE_URL, or by the PG* environment variables
(PGHOST, PGPORT, PGUSER, PGPASSWORD); with none of them, an embedded PostgreSQL is started
(home /tmp/runner-test-pg-<uid>, or RUNNER_TEST_EMBEDDED_HOME) so that a plain ``pytest``
works on a bare machine; a server the session started is stopped when the session ends.

Two fixtures, clearly named:

* ``tx`` — a connection inside a transaction that is rolled back after the test, on a shared
  migrated database (cheap; for single-connection tests);
* ``db_url`` — a fresh database cloned from a template migrated once per session, for tests
  that need several connections or ``runner start`` subprocesses.

Database names carry the pytest process id, so several test sessions can share a server.
The test session runs in a time zone other than UTC (TZ and PGTZ), so zone bugs can't hide.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from pytest_postgresql import factories

# A zone with a 45-minute offset: naive/UTC confusions show up at once.
os.environ["TZ"] = "Asia/Kathmandu"
os.environ["PGTZ"] = "America/St_Johns"
time.tzset()
# Tests never fall back to a database from the developer's environment by accident.
for _name in ("RUNNER_DATABASE_URL", "DATABASE_URL", "RUNNER_APP"):
    os.environ.pop(_name, None)


_STARTED: list[Any] = []  # embedded servers this session started: stopped at its end


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    from runner.store import embedded

    for home in _STARTED:
        embedded.stop(home)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """The tests marked ``slow`` (real runner fleets for tens of seconds: the model test, the
    fault tier, the tutorial) start first, on every worker at once. With ``-n N --dist
    worksteal`` the first deal gives each worker a run of the list (the first
    ``len // N``, then a share of the rest), and a worker that runs dry steals from the end of
    another's queue: so the slow tests are dealt one by one to the head of each worker's run
    and the others follow in their order. Every worker then starts on a long test beside the
    short ones, and what is left to steal at the end is short; with the slow tests all at the
    head of the list, one worker ran them one after another while the others took its short
    ones, and a long one stolen late ran alone at the end. Without xdist: slow tests first."""
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    rest = [item for item in items if item.get_closest_marker("slow") is None]
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    runs: list[list[Any]] = [[] for _ in range(workers)]
    for i, item in enumerate(slow):
        runs[i % workers].append(item)
    left = len(items)
    for k, run in enumerate(runs):  # xdist's worksteal: each idle worker gets len(pending) // idle
        size = left // (workers - k)
        left -= size
        while len(run) < size and rest:
            run.append(rest.pop(0))
    items[:] = [item for run in runs for item in run] + rest


def _server() -> dict[str, Any]:
    url = os.environ.get("RUNNER_TEST_DATABASE_URL")
    if url:
        params = conninfo_to_dict(url)
    elif any(os.environ.get(v) for v in ("PGHOST", "PGPORT", "PGUSER")):
        params = {
            "host": os.environ.get("PGHOST", "127.0.0.1"),
            "port": os.environ.get("PGPORT", "5432"),
            "user": os.environ.get("PGUSER", "postgres"),
            "password": os.environ.get("PGPASSWORD"),
        }
    else:
        from pathlib import Path

        from runner.store import embedded

        home = Path(os.environ.get("RUNNER_TEST_EMBEDDED_HOME") or f"/tmp/runner-test-pg-{os.getuid()}")
        server = embedded.start(home)
        if server.started:
            _STARTED.append(home)
        params = conninfo_to_dict(server.url)
    return {
        "host": params.get("host") or "127.0.0.1",
        "port": int(params.get("port") or 5432),
        "user": params.get("user") or "postgres",
        "password": params.get("password") or None,
    }


SERVER = _server()

# runner_database (runner/pytest_plugin.py), the fixture the README offers users, on this server
pytest_plugins = ["runner.pytest_plugin"]


def url_for(dbname: str) -> str:
    """A postgresql:// URL (libpq and SQLAlchemy both take it) for a database of SERVER."""
    user = quote(SERVER["user"], safe="")
    auth = f"{user}:{quote(SERVER['password'], safe='')}" if SERVER["password"] else user
    host = SERVER["host"]
    if host.startswith("/"):
        return f"postgresql://{auth}@/{quote(dbname)}?host={quote(host)}&port={SERVER['port']}"
    return f"postgresql://{auth}@{host}:{SERVER['port']}/{quote(dbname)}"


os.environ.setdefault("RUNNER_TEST_DATABASE_URL", url_for("postgres"))


def _migrate_template(dbname: str, **_: Any) -> None:
    from runner.store import migrate

    migrate.upgrade(url_for(dbname))


postgresql_server = factories.postgresql_noproc(
    host=SERVER["host"], port=SERVER["port"], user=SERVER["user"],
    password=SERVER["password"], dbname=f"runner_test_{os.getpid()}", load=[_migrate_template],
)


# A database cloned from the migrated template is a copy of it (runner/actions/copies.py: a new
# database oid), and its runners would hold plans, catch-up, retries and takeovers until
# adopted. The template holds no work, so each clone records its own identity at once, as a
# fresh migration would (tests/test_copies.py clones without this).
OWN_IDENTITY = """
UPDATE runner.ledger_identity SET system_identifier = c.system_identifier, database_oid = d.oid,
       database_name = d.datname
FROM pg_control_system() c, pg_database d
WHERE d.datname = current_database()
"""


def own_identity(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(OWN_IDENTITY)


@pytest.fixture(scope="session")
def clone_pool(postgresql_server: Any) -> Iterator[Any]:
    """This test process's clones of the migrated template, made ahead and dropped behind
    (tests/clonepool.py)."""
    from tests.clonepool import ClonePool

    pool = ClonePool(url_for("postgres"), postgresql_server.template_dbname, f"runner_test_{os.getpid()}",
                     url_for, own_identity)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def db_url(clone_pool: Any) -> Iterator[str]:
    """A fresh database cloned from the migrated template (conninfo string), used by this
    test alone."""
    name = clone_pool.take()
    try:
        yield url_for(name)
    finally:
        clone_pool.give_back(name)


@pytest.fixture(scope="session")
def shared_db_url(postgresql_server: Any, clone_pool: Any) -> Iterator[str]:
    """The database the ``tx`` tests share; dropped with the clone pool's leftovers, at once
    (every DROP DATABASE waits for a checkpoint: tests/clonepool.py)."""
    name = f"runner_test_shared_{os.getpid()}"
    clone_pool.create(name, postgresql_server.template_dbname)
    try:
        own_identity(url_for(name))
        yield url_for(name)
    finally:
        clone_pool.give_back(name)


@pytest.fixture
def tx(shared_db_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection in a transaction that is rolled back after the test."""
    conn = psycopg.connect(shared_db_url, autocommit=False)
    # open the transaction now: code under test that uses conn.transaction() then gets a
    # savepoint inside it (on an idle connection it would BEGIN and COMMIT for real)
    conn.execute("SELECT 1")
    try:
        yield conn
    finally:
        conn.rollback()
        conn.close()


@pytest.fixture
def empty_db_url(clone_pool: Any) -> Iterator[str]:
    """A fresh database with no runner schema at all, dropped behind the test (by the clone
    pool, whose drops never hold up a test)."""
    name = clone_pool.create_empty()
    try:
        yield url_for(name)
    finally:
        clone_pool.give_back(name)


@pytest.fixture(scope="session")
def db_roles(postgresql_server: Any, clone_pool: Any) -> Iterator[Any]:
    """sql/roles.sql applied under role names unique to this test session (tests/dbroles.py);
    the roles are dropped when the session ends, once the databases that held their grants
    are (the clone pool drops them in the background)."""
    from tests.dbroles import SessionRoles

    roles = SessionRoles()
    try:
        yield roles
    finally:
        clone_pool.settle()
        roles.drop(url_for("postgres"))
