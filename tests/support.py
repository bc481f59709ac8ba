"""Helpers shared by the tests: waiting on conditions (never sleeping for an outcome),
runs made in any state, and real ``runner start`` subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
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
            cwd: Path | None = None, timeout: float = 60, stdin: str | None = None,
            ) -> subprocess.CompletedProcess[str]:
    """One ``runner ...`` command in a process of its own (forked from tests/clizygote.py,
    which has the CLI imported already, or a plain subprocess where a fork could differ)."""
    full_env = {**os.environ, **(env or {})}
    if url is not None:
        full_env["RUNNER_DATABASE_URL"] = url
    where = str(cwd or ROOT)
    if _forkable(args, full_env):
        return _zygote_run(list(args), full_env, where, timeout, stdin)
    return subprocess.run(runner_cmd(*args), capture_output=True, text=True, env=full_env,
                          cwd=where, timeout=timeout, input=stdin)


def _forkable(args: tuple[str, ...], env: dict[str, str]) -> bool:
    if env.get("RUNNER_TEST_NO_ZYGOTE") == "1" or (args and args[0] in ("start", "web")):
        return False
    differs = {k for k in set(env) ^ set(os.environ) | {k for k in env if os.environ.get(k) != env[k]}
               if k.startswith(("PYTHON", "RUNNER_CRASH"))}
    return not differs


_ZYGOTE: dict[int, tuple[subprocess.Popen[bytes], str]] = {}
_ZYGOTE_LOCK = threading.Lock()


def _zygote_path() -> str:
    with _ZYGOTE_LOCK:
        mine = _ZYGOTE.get(os.getpid())
        if mine is not None and mine[0].poll() is None:
            return mine[1]
        path = tempfile.mkdtemp(prefix="runner-cli-") + "/sock"
        proc = subprocess.Popen([sys.executable, "-m", "tests.clizygote", path], cwd=ROOT,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n", "the CLI zygote did not start"
        _ZYGOTE[os.getpid()] = (proc, path)
        return path


def _zygote_run(args: list[str], env: dict[str, str], cwd: str, timeout: float,
                stdin: str | None) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="runner-cli-call-") as tmp:
        files = {name: os.path.join(tmp, name) for name in ("stdin", "stdout", "stderr")}
        for path in files.values():
            Path(path).write_text("")
        if stdin is not None:
            Path(files["stdin"]).write_text(stdin)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(_zygote_path())
            conn.settimeout(timeout)
            conn.sendall((json.dumps({"args": args, "env": env, "cwd": cwd, **files}) + "\n").encode())
            answers = conn.makefile("r")
            pid = json.loads(answers.readline())["pid"]
            try:
                line = answers.readline()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(runner_cmd(*args), timeout) from None
        code = json.loads(line)["code"] if line else -signal.SIGKILL  # killed: no code sent
        return subprocess.CompletedProcess(runner_cmd(*args), code, Path(files["stdout"]).read_text(),
                                           Path(files["stderr"]).read_text())


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
