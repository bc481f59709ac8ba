"""Helpers shared by the tests: waiting on conditions (never sleeping for an outcome),
runs made in any state, and real ``runner start`` subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import psycopg

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent


def eventually(check: Callable[[], T], timeout: float = 10.0, interval: float = 0.02,
               message: str = "") -> T:
    """Call ``check`` until it returns a truthy value (returned) or ``timeout`` passes.
    An AssertionError raised by ``check`` counts as not yet."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except AssertionError as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"not true within {timeout}s: {message or check}") from last
        time.sleep(interval)  # polling interval of the condition, not a wait for an outcome


def scalar(url: str, sql: str, params: Any = None) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
        return None if row is None else row[0]


def rows(url: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def runner_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "runner", *args]


def run_cli(*args: str, url: str | None = None, env: dict[str, str] | None = None,
            cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    if url is not None:
        full_env["RUNNER_DATABASE_URL"] = url
    return subprocess.run(runner_cmd(*args), capture_output=True, text=True, env=full_env,
                          cwd=cwd or ROOT, timeout=timeout)


class RunnerProcess:
    """A real ``runner start`` subprocess."""

    def __init__(self, app: str, url: str, *extra: str, env: dict[str, str] | None = None,
                 log: Path | None = None) -> None:
        self.log_path = log
        self._log = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            runner_cmd("start", "--app", app, *extra),
            env={**os.environ, "RUNNER_DATABASE_URL": url, **(env or {})},
            stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT,
        )

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM and wait; the exit code (a process already gone keeps its own code)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._close_log()
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not subprocess.DEVNULL and not self._log.closed:  # type: ignore[union-attr]
            self._log.close()  # type: ignore[union-attr]

    def output(self) -> str:
        return self.log_path.read_text() if self.log_path else ""


@contextmanager
def running_worker(app: Any, url: str, **config: Any) -> Iterator[Any]:
    """A ``Worker`` of ``app`` running its loop in a thread (in-process runner), stopped and
    joined on exit. ``config``: LoopConfig fields (default 4 workers, 0.05 s poll)."""
    from runner.loop import LoopConfig, Worker

    worker = Worker(app, url, LoopConfig(**{"workers": 4, "poll_interval": 0.05, **config}))
    worker.start()
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive()


def assert_ledger_clean(url: str, since: Any = None) -> None:
    """The ledger audit (``runner check``, runner.check_v1) finds nothing: every scenario that
    runs real loops ends with this."""
    from runner import audit

    with psycopg.connect(url, autocommit=True) as conn:
        found = audit.violations(conn, since=since)
    assert not found, "the ledger audit (runner check) found violations:\n" + audit.describe(found)
