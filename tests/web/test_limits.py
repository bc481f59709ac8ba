"""Issue 28 against real `runner web` processes: what every request passes before any route.

- a body over 64 KiB is refused with 413 before authentication and without being held: a
  declared Content-Length over the limit at once, a chunked stream once its count passes the
  limit; the connection is closed, and the server's resident memory stays flat while three
  clients at a time push hundreds of MiB at /login, /logout and an action (issue 28, point
  2: on the console before the fix, three 300 MiB POSTs took it from 60 MiB to 1.2 GiB);
- a request whose Host is not one of the console's names is refused (421) even with a
  matching Origin: the precondition of DNS rebinding (point 5);
- the proxy's user header: the console listens on a Unix socket (mode 0600, removed at
  exit; --trust-proxy-header on TCP is refused), and of two header lines the last one, the
  proxy's, names the user; a comma-joined value is refused."""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import stat
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from tests.support import ROOT, eventually, run_cli, runner_cmd
from tests.web.conftest import (
    HOSTILE_JOB,
    OPERATOR_TOKEN,
    VIEWER_TOKEN,
    WEB_PIDS,
    Ledger,
    requests_rows,
    runner_web,
)

TOKENS = {"RUNNER_WEB_TOKEN": OPERATOR_TOKEN, "RUNNER_WEB_VIEWER_TOKEN": VIEWER_TOKEN}
MiB = 1024 * 1024


def rss(pid: int) -> int:
    """The process's resident memory in bytes (/proc/PID/status, VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def big_post(base: str, path: str, total: int, declared: bool, content_type: str) -> tuple[int | None, int]:
    """POST ``total`` bytes to ``path`` (Content-Length declared up front, or a chunked stream),
    no credential; send until the server answers or cuts the connection. Returns the status
    answered (None: none) and how many body bytes went out."""
    netloc = urlsplit(base).netloc
    host, port = netloc.rsplit(":", 1)
    framing = f"Content-Length: {total}" if declared else "Transfer-Encoding: chunked"
    head = (f"POST {path} HTTP/1.1\r\nHost: {netloc}\r\nContent-Type: {content_type}\r\n{framing}\r\n\r\n")
    piece = b"x" * (64 * 1024)
    frame = piece if declared else b"%x\r\n" % len(piece) + piece + b"\r\n"
    answer = b""
    sent = 0
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head.encode())
        try:
            while sent < total:
                readable, _, _ = select.select([sock], [], [], 0)
                if readable:
                    break
                sock.sendall(frame)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            sock.settimeout(30)
            while b"\r\n\r\n" not in answer:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else None
    return status, sent


def test_big_bodies_are_refused_before_authentication_and_never_held(ledger: Ledger, tmp_path: Path) -> None:
    with runner_web(ledger.operator, tmp_path, env=TOKENS) as base:
        pid = WEB_PIDS[base]
        before = rss(pid)
        peak = [before]
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], rss(pid))
                stop.wait(0.01)

        watcher = threading.Thread(target=watch)
        watcher.start()
        results: list[tuple[str, bool, int | None, int]] = []
        try:
            for path, kind in (("/login", "application/x-www-form-urlencoded"),
                               ("/logout", "application/x-www-form-urlencoded"),
                               ("/actions/pause", "application/x-www-form-urlencoded"),
                               ("/api/jobs/pause", "application/json")):
                for declared, total in ((True, 300 * MiB), (False, 300 * MiB)):
                    def one() -> None:
                        status, sent = big_post(base, path, total, declared, kind)  # noqa: B023
                        results.append((path, declared, status, sent))  # noqa: B023
                    threads = [threading.Thread(target=one) for _ in range(3)]  # three at a time
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join(120)
        finally:
            stop.set()
            watcher.join()
        assert len(results) == 24
        for path, declared, status, sent in results:
            assert status == 413, (path, declared, status, sent)
            assert sent < 300 * MiB, (path, declared, sent)  # cut short: the rest was never read
            if declared:  # refused on its header: at most what the sockets' buffers took
                assert sent < 64 * MiB, (path, sent)
        grown = peak[0] - before
        print(f"runner web RSS {before / MiB:.1f} MiB before, peak {peak[0] / MiB:.1f} MiB during 24 refused "
              f"POSTs (3 at a time, 300 MiB each offered): +{grown / MiB:.1f} MiB")
        assert grown < 20 * MiB, f"the console grew by {grown / MiB:.1f} MiB while refusing bodies"
        # a body within the limit still reaches its route (here: refused for its missing token)
        small = run_curlish(base, "/api/jobs/pause", b'{"job": "x", "reason": "y"}')
        assert small == 401
    assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]  # only the seeded row


def run_curlish(base: str, path: str, body: bytes, headers: dict[str, str] | None = None,
                host: str | None = None) -> int:
    """One POST of ``body`` as JSON over TCP; its status."""
    netloc = urlsplit(base).netloc
    conn = http.client.HTTPConnection(netloc, timeout=30)
    try:
        conn.putrequest("POST", path, skip_host=True)
        conn.putheader("Host", host or netloc)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        conn.endheaders(body)
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_foreign_host_is_refused_even_with_a_matching_origin(ledger: Ledger, tmp_path: Path) -> None:
    op = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    body = json.dumps({"job": HOSTILE_JOB, "reason": "rebound"}).encode()
    with runner_web(ledger.operator, tmp_path, "--allowed-host", "console.example.test", env=TOKENS) as base:
        port = urlsplit(base).port
        # a page of evil.test whose name now resolves to 127.0.0.1: its Host and Origin agree
        foreign = f"evil.test:{port}"
        assert run_curlish(base, "/api/jobs/pause", body, {**op, "Origin": f"http://{foreign}"},
                           host=foreign) == 421
        netloc = urlsplit(base).netloc
        conn = http.client.HTTPConnection(netloc, timeout=30)
        conn.putrequest("GET", "/login", skip_host=True)
        conn.putheader("Host", foreign)
        conn.endheaders()
        refused = conn.getresponse()
        assert refused.status == 421 and "Host" in refused.read().decode()
        assert refused.getheader("content-security-policy")  # the security headers on it too
        conn.close()
        assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]
        # the names it answers to: its address, the loopback names and --allowed-host
        for name in (netloc, f"localhost:{port}", f"console.example.test:{port}", "CONSOLE.example.test."):
            assert run_curlish(base, "/api/jobs/pause", json.dumps(
                {"job": HOSTILE_JOB, "reason": "allowed", "dry_run": True}).encode(), op, host=name) == 200, name
        assert run_curlish(base, "/api/jobs/pause", body, {**op, "Origin": f"http://{netloc}"}) == 200
    assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause", "pause"]


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over an AF_UNIX socket."""

    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=30)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(self.socket_path)


def over_socket(path: str, method: str, target: str, headers: list[tuple[str, str]],
                body: bytes | None = None) -> tuple[int, str]:
    conn = UnixHTTPConnection(path)
    try:
        conn.putrequest(method, target, skip_host=any(n.lower() == "host" for n, _ in headers))
        for name, value in headers:
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


@contextmanager
def socket_console(url: str, logs: Path, *args: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real `runner web` on a Unix socket, behind an imagined proxy that authenticates
    people; the socket's path once it answers."""
    path = str(logs / "console.sock")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_WEB_")}
    out = (logs / "socket-web.log").open("w")
    proc = subprocess.Popen(runner_cmd("web", "--database-url", url, "--unix-socket", path,
                                       "--trust-proxy-header", "X-Forwarded-User", "--proxy-operator", "alice",
                                       *args), env=environ, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)

    def up() -> bool:
        assert proc.poll() is None, (logs / "socket-web.log").read_text()
        try:
            return over_socket(path, "GET", "/login", [])[0] == 200
        except OSError:
            return False

    try:
        eventually(up, timeout=60, interval=0.1, message="runner web answers on its socket")
        yield path, proc
    finally:
        proc.terminate()
        proc.wait(30)
        out.close()


def test_the_proxy_mode_listens_on_a_private_socket_and_believes_the_last_header(ledger: Ledger,
                                                                                 tmp_path: Path) -> None:
    refused = run_cli("web", "--database-url", ledger.operator, "--trust-proxy-header", "X-Forwarded-User",
                      "--port", "0", timeout=120)
    assert refused.returncode == 1 and "--trust-proxy-header needs --unix-socket" in refused.stderr, refused
    assert len(refused.stderr.strip().splitlines()) == 1
    with socket_console(ledger.operator, tmp_path) as (path, proc):
        assert stat.S_ISSOCK(os.lstat(path).st_mode) and stat.S_IMODE(os.lstat(path).st_mode) == 0o600

        def whoami(*users: str) -> tuple[int, str]:
            return over_socket(path, "GET", "/api/whoami", [("X-Forwarded-User", u) for u in users])

        status, text = whoami("alice")
        assert status == 200 and json.loads(text)["role"] == "operator"
        # the client sent "alice", the proxy appended the user it authenticated: that one
        status, text = whoami("alice", "bob")
        assert status == 200 and json.loads(text) == {"name": "bob", "role": "viewer", "who": "web:bob",
                                                      "actions": False}
        status, text = whoami("bob", "alice")
        assert json.loads(text)["name"] == "alice"
        # one line the proxy appended to (client's value, then its own): refused, not guessed
        assert whoami("alice, bob")[0] == 401
        assert whoami("bob, alice")[0] == 401
        # bob cannot act by sending alice's name ahead of the proxy's header
        pause = json.dumps({"job": HOSTILE_JOB, "reason": "through the socket"}).encode()
        status, text = over_socket(path, "POST", "/api/jobs/pause", [
            ("X-Forwarded-User", "alice"), ("X-Forwarded-User", "bob"), ("Content-Type", "application/json")], pause)
        assert status == 403, text
        status, text = over_socket(path, "POST", "/api/jobs/pause", [
            ("X-Forwarded-User", "alice"), ("Content-Type", "application/json")], pause)
        assert status == 200, text
        assert json.loads(text)["request"]["who"] == "web:alice"
        # the Host check holds on the socket too (the proxy passes the public name: --allowed-host)
        assert over_socket(path, "GET", "/api/whoami", [("Host", "evil.test"),
                                                       ("X-Forwarded-User", "alice")])[0] == 421
        # a second console on the same path is refused while this one serves
        again = run_cli("web", "--database-url", ledger.operator, "--unix-socket", path,
                        "--trust-proxy-header", "X-Forwarded-User", timeout=120)
        assert again.returncode == 1 and "in use" in again.stderr, again
    assert proc.returncode == 0
    assert not os.path.lexists(path), "the socket was left behind"
    assert [r["who"] for r in requests_rows(ledger.admin)][-1] == "web:alice"


def test_the_socket_may_be_opened_to_its_group_and_never_replaces_a_file(ledger: Ledger, tmp_path: Path) -> None:
    with socket_console(ledger.operator, tmp_path, "--unix-socket-mode", "660") as (path, _):
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o660
    target = tmp_path / "not-a-socket"
    target.write_text("x")
    out = run_cli("web", "--database-url", ledger.operator, "--unix-socket", str(target),
                  "--trust-proxy-header", "X-Forwarded-User", timeout=120)
    assert out.returncode == 1 and "not a socket" in out.stderr and target.read_text() == "x"
