"""Hostile text never reaches the terminal raw (issue 12, point 6).

Partition keys, errors, reasons, ``--by`` and ``pause_when`` are user text. Every
human-facing line of the CLI shows their control characters as escapes
(runner/printable.py); ``--json`` output keeps the exact text.

Fails before the fix: ``runner runs``, ``status``, ``gaps``, ``jobs`` and the backfill
commands printed the ESC sequences, BEL, C1 controls and bidi overrides as they are.
"""

from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from runner.store import ledger
from tests.apps.shown import HOSTILE
from tests.apps.shown import app as shown_app
from tests.support import run_cli

APP = "tests/apps/shown.py:app"
# what must never be written raw to a terminal
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
SLOT = datetime(2026, 1, 1, 3, tzinfo=UTC)


@pytest.fixture
def hostile_db(db_url: str, db_roles: Any) -> str:
    """The job registered, and one dead run whose partition key and error are hostile. The
    roles are applied: a --pause-when is only accepted once the condition role exists."""
    db_roles.apply(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        ledger.sync_jobs(conn, list(shown_app.jobs.values()), now=SLOT - timedelta(hours=2))
        conn.execute(
            "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date, window_start,"
            " window_end, status, trigger, attempt, fence, idempotency_key, started_at, finished_at,"
            " last_error) VALUES ('shown', %s, %s, %s, %s, %s, 'dead', 'schedule', 1, 2, 'k', now(), now(), %s)",
            (SLOT, HOSTILE, SLOT.date(), SLOT - timedelta(hours=1), SLOT, "RuntimeError: " + HOSTILE))
    return db_url


def human(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    raw = sorted({repr(c) for c in UNSAFE.findall(text)})
    assert not raw, f"raw control characters {raw} in:\n{text}"
    assert "\nFAKE" not in text, text  # no line of its own (a fold in a table starts with │)
    return text


def test_listings_escape_hostile_text(hostile_db: str) -> None:
    url = hostile_db
    for args in (("runs",), ("runs", "--partition", HOSTILE), ("status",), ("gaps", "--limit", "5"),
                 ("jobs", "--app", APP)):
        text = human(run_cli(*args, url=url))
        assert "pwned" in text, (args, text)  # shown, escaped: not dropped
    # the same listings in JSON: the exact text
    listed = json.loads(run_cli("runs", "--json", url=url).stdout)
    assert [(r["partition_key"], r["last_error"]) for r in listed] == [(HOSTILE, "RuntimeError: " + HOSTILE)]
    gaps = json.loads(run_cli("gaps", "--json", url=url).stdout)
    assert HOSTILE in {g["partition_key"] for g in gaps}
    status = json.loads(run_cli("status", "--json", url=url).stdout)
    assert any(HOSTILE in (a["detail"] or "") for a in status["alerts"])


def test_backfill_commands_escape_hostile_text(hostile_db: str) -> None:
    url = hostile_db
    condition = "SELECT false -- " + HOSTILE.replace("\r\n", " ")
    common = ("--from", "2026-01-01T00:00:00+00:00", "--to", "2026-01-01T04:00:00+00:00",
              "--partition", HOSTILE, "--pause-when", condition, "--app", APP)
    text = human(run_cli("backfill", "shown", *common, "--dry-run", url=url))
    assert "\\x1b]0;pwned\\x07" in text and "\\u202eevil" in text
    made: dict[str, Any] = json.loads(run_cli("backfill", "shown", *common, "--reason", HOSTILE, "--by", HOSTILE,
                                              "--yes", "--json", url=url).stdout)
    plan = made["backfill"]
    # JSON keeps the exact text (the reason is stripped of surrounding blanks, nothing else)
    assert plan["requested_by"] == HOSTILE and plan["pause_when"] == condition
    assert plan["partitions"] == [HOSTILE]
    plan_id = str(plan["id"])
    human(run_cli("backfill", "shown", *common, "--reason", HOSTILE, "--by", HOSTILE, "--yes", "--force",
                  url=url))
    text = human(run_cli("backfill", "show", plan_id, url=url))
    assert "requested by \\x1b]0;pwned" in text
    human(run_cli("backfill", "list", url=url))
    human(run_cli("backfill", "pause", plan_id, "--reason", HOSTILE, "--by", HOSTILE, "--yes", url=url))
    text = human(run_cli("backfill", "list", url=url))
    assert "pwned" in text
    shown = json.loads(run_cli("backfill", "show", plan_id, "--json", url=url).stdout)
    assert shown["pause_reason"] == f"paused by {HOSTILE}: {HOSTILE.strip()}"
    human(run_cli("backfill", "resume", plan_id, "--reason", HOSTILE, "--by", HOSTILE, "--yes", url=url))
    human(run_cli("backfill", "cancel", plan_id, "--reason", HOSTILE, "--by", HOSTILE, "--yes", url=url))
    human(run_cli("status", url=url))


def test_errors_escape_hostile_text(hostile_db: str) -> None:
    out = run_cli("rerun", "shown", "--slot", SLOT.isoformat(), "--partition", HOSTILE + "x", "--reason", "r",
                  "--yes", url=hostile_db)
    assert out.returncode == 1
    assert not UNSAFE.search(out.stderr) and "\n" not in out.stderr.rstrip("\n"), repr(out.stderr)
    text = human(run_cli("rerun", "shown", "--slot", SLOT.isoformat(), "--partition", HOSTILE, "--reason",
                         HOSTILE, "--by", HOSTILE, "--yes", url=hostile_db))
    assert "pwned" in text
