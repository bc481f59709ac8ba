"""`runner web` stopped by SIGTERM (a deploy, systemd, Kubernetes): it stops listening at
once, lets the request in flight finish with its normal answer, closes its pools and exits 0
(uvicorn's own handling raised the signal again after the drain: killed by SIGTERM, 143).
The request is slowed honestly: an operator's pause waits for a row lock another session
holds on the job."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from tests.support import ROOT, eventually, runner_cmd, scalar
from tests.web.conftest import OPERATOR_TOKEN, Ledger, free_port

WAITING_FOR_A_ROW_LOCK = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                          " AND wait_event_type = 'Lock' AND application_name LIKE 'runner-web-act%%'")


@contextmanager
def web_process(ledger: Ledger, log: Path, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_WEB_")}
    with log.open("w") as out:
        proc = subprocess.Popen(runner_cmd("web", "--port", str(port), "--database-url", ledger.operator, *args),
                                env={**env, "RUNNER_WEB_TOKEN": OPERATOR_TOKEN}, stdout=out,
                                stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            def up() -> bool:
                assert proc.poll() is None, log.read_text()
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/login", timeout=2) as r:
                        return bool(r.status == 200)
                except OSError:
                    return False

            eventually(up, timeout=60, interval=0.1, message="runner web serves /login")
            yield proc, port
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)


def pause_in_thread(port: int, job: str, result: dict[str, Any]) -> threading.Thread:
    def pause() -> None:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/jobs/pause", method="POST",
            data=json.dumps({"job": job, "reason": "drain test"}).encode(),
            headers={"Authorization": f"Bearer {OPERATOR_TOKEN}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as r:
                result["status"], result["body"] = r.status, json.loads(r.read())
        except Exception as exc:  # recorded, asserted by the test
            result["error"] = repr(exc)

    thread = threading.Thread(target=pause, daemon=True)
    thread.start()
    return thread


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def test_sigterm_drains_the_request_in_flight_then_exits_0(ledger: Ledger, tmp_path: Path) -> None:
    log = tmp_path / "web.log"
    with web_process(ledger, log) as (proc, port):
        with psycopg.connect(ledger.admin) as holder:
            holder.execute("SELECT 1 FROM runner.jobs WHERE job_name = 'quiet' FOR UPDATE")
            result: dict[str, Any] = {}
            thread = pause_in_thread(port, "quiet", result)
            eventually(lambda: scalar(ledger.admin, WAITING_FOR_A_ROW_LOCK) == 1, timeout=30,
                       message="the pause waits for the row lock")
            proc.send_signal(signal.SIGTERM)
            eventually(lambda: refused(port), timeout=30, message="no new connection after SIGTERM")
            assert proc.poll() is None and thread.is_alive(), "it waits for the request in flight"
            holder.rollback()
        thread.join(60)
        assert result.get("status") == 200, (result, log.read_text())
        assert result["body"]["request"]["action"] == "pause"
        assert proc.wait(60) == 0, log.read_text()
    assert scalar(ledger.admin, "SELECT paused FROM runner.jobs WHERE job_name = 'quiet'") is True
    assert "Traceback" not in log.read_text()


def test_a_request_longer_than_the_grace_is_cut_and_the_process_still_exits(ledger: Ledger,
                                                                          tmp_path: Path) -> None:
    log = tmp_path / "web.log"
    with (web_process(ledger, log, "--shutdown-grace", "1") as (proc, port),
          psycopg.connect(ledger.admin) as holder):
        holder.execute("SELECT 1 FROM runner.jobs WHERE job_name = 'quiet' FOR UPDATE")
        result: dict[str, Any] = {}
        thread = pause_in_thread(port, "quiet", result)
        eventually(lambda: scalar(ledger.admin, WAITING_FOR_A_ROW_LOCK) == 1, timeout=30,
                   message="the pause waits for the row lock")
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
        assert time.monotonic() - began < 15
        thread.join(30)
        assert "status" not in result, result  # cut: no answer
        holder.rollback()
    # the cut request's session ends with the process once its statement gets the row
    eventually(lambda: scalar(ledger.admin, WAITING_FOR_A_ROW_LOCK.replace("wait_event_type = 'Lock'", "true"))
               == 0, timeout=30, message="the console's sessions are gone")
