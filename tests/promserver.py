"""A real Prometheus server for the tests (Debian's ``prometheus`` package, 2.42, installed by
.ci/run): ``/usr/bin/prometheus`` started by the test itself (never the system service), with
its configuration and storage in the test's tmp_path, on 127.0.0.1 and a free port, scraping
the given targets every second. And ``Exporter``: a tiny /metrics endpoint whose values the
test sets."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support import eventually

PROMETHEUS = Path("/usr/bin/prometheus")
PROMTOOL = Path("/usr/bin/promtool")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def need(program: Path) -> None:
    """Skip the test when the Debian package's program is absent (CI installs it: .ci/run)."""
    if not program.exists() or shutil.which(str(program)) is None:
        pytest.skip(f"{program} is absent: `apt-get install prometheus` (.ci/run installs it)")


class Server:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.url, self.proc, self.log = url, proc, log

    def api(self, path: str, **params: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}?{urllib.parse.urlencode(params)}", timeout=5) as resp:
            answer = json.loads(resp.read())
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant query's vector now (a list of {metric, value})."""
        data = self.api("/api/v1/query", query=promql)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def targets_up(self) -> bool:
        active = self.api("/api/v1/targets")["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)


@contextmanager
def prometheus(tmp_path: Path, targets: dict[str, list[str]]) -> Iterator[Server]:
    """``/usr/bin/prometheus`` scraping ``targets`` (scrape job name -> host:port list) every
    second, until the block ends (then terminated and waited for)."""
    need(PROMETHEUS)
    home = tmp_path / "prometheus"
    home.mkdir()
    jobs = "".join(
        f"  - job_name: {json.dumps(name)}\n    static_configs:\n      - targets: {json.dumps(hosts)}\n"
        for name, hosts in targets.items())
    config = home / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                      f"scrape_configs:\n{jobs}")
    port = free_port()
    log = home / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(PROMETHEUS), f"--config.file={config}",
                                 f"--storage.tsdb.path={home / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT, cwd=home)
    server = Server(f"http://127.0.0.1:{port}", proc, log)
    try:
        def ready() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False
        eventually(ready, timeout=60, interval=0.2, message="prometheus ready")
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class Exporter:
    """``GET /metrics`` answering the gauges in ``values`` (name -> number), on 127.0.0.1."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = "".join(f"# TYPE {k} gauge\n{k} {v}\n" for k, v in sorted(outer.values.items()))
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
