"""examples/fastapi_app.py under a real uvicorn: the runner starts with the application's
lifespan, runs a slot, and stops cleanly when uvicorn gets SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.support import ROOT, assert_ledger_clean, eventually, rows, scalar

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


@pytest.mark.slow
def test_fastapi_app_runs_its_jobs_in_process_and_stops_cleanly(db_url: str, tmp_path: Path) -> None:
    log_path = tmp_path / "uvicorn.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "examples.fastapi_app:api", "--host", "127.0.0.1",
             "--port", "0"],
            env={**os.environ, "RUNNER_DATABASE_URL": db_url}, cwd=ROOT, stdout=log,
            stderr=subprocess.STDOUT)
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE"
                                          " job_name = 'refresh-rates' AND status = 'succeeded'") >= 1,
                   timeout=40, message="a slot of the async job succeeded inside uvicorn")
        port = eventually(lambda: re.search(r"running on http://127\.0\.0\.1:(\d+)", log_path.read_text()),
                          timeout=10, message="uvicorn's port").group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as response:
            assert json.load(response) == {"runner": "running",
                                           "jobs": ["nightly-report", "refresh-rates"]}
        assert scalar(db_url, "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL") == 1
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    output = log_path.read_text()
    # uvicorn re-raises the signal it captured once its shutdown is complete, so a clean stop
    # exits as "terminated by SIGTERM"
    assert code in (0, -signal.SIGTERM), output
    assert "Finished server process" in output, output
    # uvicorn owned the signal and ran the lifespan's exit; the runner logged through the
    # application's logging
    assert "Application shutdown complete" in output, output
    assert "runner.loop: runner_started" in output and "runner.loop: runner_stopped" in output, output
    # the runner stopped cleanly: nothing left running, abandoned or handed over, deregistered
    assert rows(db_url, "SELECT DISTINCT status FROM runner.job_runs") == [("succeeded",)]
    assert rows(db_url, "SELECT DISTINCT status FROM runner.attempts") == [("succeeded",)]
    assert scalar(db_url, "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL") == 0
    assert_ledger_clean(db_url)
