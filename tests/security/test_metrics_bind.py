"""The metrics endpoint has no authentication (issue 12, point 11): by default it listens on
127.0.0.1 only, and ``--metrics-host`` says where else. Checked on a real ``runner start``,
from the kernel's table of listening sockets and by connecting."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support import RunnerProcess, eventually, scalar


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening_on(port: int) -> set[str]:
    """The IPv4 addresses with a socket listening on ``port`` (/proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        host, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(host)[::-1]))
    return found


def scrape(host: str, port: int) -> bool:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as resp:
        return b"runner_inflight_runs" in resp.read()


def serving(db_url: str, tmp_path: Path, *extra: str) -> tuple[RunnerProcess, int]:
    port = free_port()
    proc = RunnerProcess("tests/apps/hello.py:app", db_url, "--metrics-port", str(port), *extra,
                         log=tmp_path / "runner.log")
    eventually(lambda: listening_on(port), timeout=30, message=f"something listens on port {port}")
    # and the loop runs (its signal handlers are set: SIGTERM is a clean stop from then on)
    eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") > 0,
               timeout=30, message="a run succeeded")
    return proc, port


def test_metrics_listen_on_this_machine_only_by_default(db_url: str, tmp_path: Path) -> None:
    proc, port = serving(db_url, tmp_path)
    try:
        assert listening_on(port) == {"127.0.0.1"}
        assert scrape("127.0.0.1", port)
    finally:
        assert proc.terminate() == 0, proc.output()


def test_metrics_listen_where_told(db_url: str, tmp_path: Path) -> None:
    proc, port = serving(db_url, tmp_path, "--metrics-host", "127.0.0.2")
    try:
        assert listening_on(port) == {"127.0.0.2"}
        assert scrape("127.0.0.2", port)
        with pytest.raises(urllib.error.URLError):
            scrape("127.0.0.1", port)
    finally:
        assert proc.terminate() == 0, proc.output()


def test_a_host_it_cannot_listen_on_is_a_clear_error(db_url: str, tmp_path: Path) -> None:
    from tests.support import run_cli

    out = run_cli("start", "--app", "tests/apps/hello.py:app", "--metrics-port", str(free_port()),
                  "--metrics-host", "192.0.2.1", url=db_url)  # TEST-NET-1: no interface has it
    assert out.returncode == 1, out.stderr
    # one line of error (a privileged_login warning may come before it: the tests run as a
    # superuser), and nothing after it
    errors = [line for line in out.stderr.splitlines() if line.startswith("runner: error:")]
    assert len(errors) == 1 and "cannot serve metrics on 192.0.2.1" in errors[0], out.stderr
    assert out.stderr.rstrip("\n").endswith(errors[0]), out.stderr
