"""One record, one line: user text cannot forge log lines (issue 12, point 7).

A partitions callable raises with a message holding a newline, a carriage return, U+2028,
NEL and an escape sequence, each followed by a fake ``attempt_succeeded`` record. In the
text log every line must be a record (a timestamp first) and the fake text stays inside the
fan-out error's line; in the JSON log every line is one JSON object and none is a success.

Fails before the fix: the text formatter wrote the message raw, so the fake record stood
on a line of its own; the JSON formatter left U+2028 and NEL raw (a line break to
``str.splitlines`` and to many log viewers) and C1 controls for the terminal.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support import RunnerProcess, eventually, scalar

RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ [\w.]+: ")


def run_until_fanout_failed(db_url: str, tmp_path: Path, fmt: str) -> str:
    proc = RunnerProcess("tests/apps/forged.py:app", db_url, "--poll-interval", "0.2", "--grace", "1",
                         "--log-format", fmt, log=tmp_path / f"{fmt}.log")
    try:
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.slot_fanouts WHERE job_name = 'forged'"
                                          " AND error IS NOT NULL") >= 2, timeout=60,
                   message="two failed fan-outs recorded")
        eventually(lambda: proc.output().count("fanning out") >= 2, timeout=30, message="logged")
    finally:
        assert proc.terminate() == 0, proc.output()
    return proc.output()


def test_text_log_one_line_per_record(db_url: str, tmp_path: Path) -> None:
    out = run_until_fanout_failed(db_url, tmp_path, "text")
    lines = out.split("\n")
    assert lines[-1] == ""
    strays = [line for line in lines[:-1] if not RECORD.match(line) and not line.startswith("  ")]
    assert not strays, out
    for line in (line for line in lines if "attempt_succeeded" in line):
        assert "fanning out slot" in line, line
    raw = [c for c in out if c in "\r\x1b\x85\u2028"]
    assert not raw, raw


def test_json_log_one_object_per_line(db_url: str, tmp_path: Path) -> None:
    out = run_until_fanout_failed(db_url, tmp_path, "json")
    assert out.endswith("\n")
    lines = out.splitlines()  # splits at U+2028 and NEL too: each piece must still be a record
    records = [json.loads(line) for line in lines]
    assert not [r for r in records if r.get("event") == "attempt_succeeded"]
    failed = [r for r in records if "fanning out" in r["message"]]
    assert failed and all("attempt_succeeded" in r["message"] for r in failed)
    assert not [c for c in out if c in "\x1b\x85\u2028"]
