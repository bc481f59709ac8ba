"""`runner backfill --resume` (issue 33) with real `runner start` and CLI processes: a forced
backfill of a succeeded run that took checkpoints starts it from scratch (ctx.resume None,
the checkpoint cleared, the request row naming it), and with --resume continues from the
checkpoint; the dry run says which, for each run it queues again; `runner check` is clean
after."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, run_cli, scalar

APP = "tests/apps/resume.py:app"
SLOT = (datetime.now(UTC) - timedelta(minutes=30)).replace(second=0, microsecond=0)
ENV = {"RS_SLOT": SLOT.isoformat()}
RANGE = ("--from", (SLOT - timedelta(minutes=1)).isoformat(), "--to", (SLOT + timedelta(minutes=1)).isoformat())


@pytest.fixture
def rs_db(db_url: str) -> str:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE rs_seen (run_id bigint NOT NULL, fence bigint NOT NULL, resume jsonb)")
    return db_url


def seen(url: str) -> list[tuple[int, Any]]:
    """(fence, ctx.resume) of every attempt that committed, in order."""
    return rows(url, "SELECT fence, resume FROM rs_seen ORDER BY fence")  # type: ignore[return-value]


def run_row(url: str) -> dict[str, Any]:
    got = rows(url, "SELECT row_to_json(r) FROM runner.job_runs r WHERE job_name = 'long'")
    return got[0][0] if got else {}


def backfill(url: str, *extra: str) -> Any:
    out = run_cli("backfill", "long", *RANGE, "--force", *extra, "--app", APP, url=url, env=ENV, timeout=120)
    assert out.returncode == 0, out.stderr
    return out


def completed(url: str, plan_id: int) -> bool:
    return scalar(url, "SELECT status FROM runner.backfills WHERE id = %s", (plan_id,)) == "completed"


def test_a_forced_backfill_starts_from_scratch_unless_asked_to_resume(rs_db: str, tmp_path: Path) -> None:
    runner = RunnerProcess(APP, rs_db, "--poll-interval", "0.2", env=ENV, log=tmp_path / "runner.log")
    try:
        eventually(lambda: run_row(rs_db).get("status") == "succeeded", timeout=60,
                   message="the slot's catch-up run succeeded")
        run = run_row(rs_db)
        assert run["checkpoint"] == {"next": 3, "fence": 1} and seen(rs_db) == [(1, None)]

        # the dry run: the forced run, its checkpoint, and that it starts from scratch
        out = backfill(rs_db, "--dry-run")
        assert "dry run: nothing written" in out.stdout
        assert "1 of the 1 run queued again has one: cleared, each starts from scratch" in out.stdout
        line = next(x for x in out.stdout.splitlines() if x.strip().startswith(f"run {run['id']} slot"))
        assert "(succeeded): starts from scratch: its last checkpoint (" in line
        assert "bytes: step 3 of 3) is cleared (--resume keeps it)" in line
        assert run_row(rs_db)["checkpoint"] == {"next": 3, "fence": 1}  # nothing written

        # --force without --resume: the next attempt gets ctx.resume None
        out = backfill(rs_db, "--reason", "recompute from scratch", "--yes", "--json")
        first = int(json.loads(out.stdout)["backfill"]["id"])
        eventually(lambda: completed(rs_db, first), timeout=60, message="the first backfill completed")
        assert seen(rs_db) == [(1, None), (2, None)]
        assert run_row(rs_db)["checkpoint"] == {"next": 3, "fence": 2}  # its own checkpoints

        # with --resume: the dry run says so, and the next attempt continues from the checkpoint
        out = backfill(rs_db, "--resume", "--dry-run")
        assert "1 of the 1 run queued again has one: --resume, each continues from its checkpoint" in out.stdout
        line = next(x for x in out.stdout.splitlines() if x.strip().startswith(f"run {run['id']} slot"))
        assert "(succeeded): starts from its last checkpoint (" in line and "step 3 of 3)" in line
        out = backfill(rs_db, "--resume", "--reason", "continue", "--yes", "--json")
        second = int(json.loads(out.stdout)["backfill"]["id"])
        eventually(lambda: completed(rs_db, second), timeout=60, message="the second backfill completed")
        assert seen(rs_db) == [(1, None), (2, None), (3, {"next": 3, "fence": 2})]
        assert run_row(rs_db)["status"] == "succeeded"
    finally:
        assert runner.terminate() == 0, runner.output()

    # the plans remember which; each request row names the checkpoint it cleared or kept
    assert rows(rs_db, "SELECT id, resume FROM runner.backfills ORDER BY id") == [(first, False), (second, True)]
    requests = rows(rs_db, "SELECT touched #> '{backfill,resume}', touched #> '{runs_requeued,0,checkpoint}'"
                           " FROM runner.requests WHERE action = 'backfill' ORDER BY id")
    assert [(r[0], r[1]["fence"], r[1]["summary"], r[1]["kept"]) for r in requests] == [
        (False, 1, "step 3 of 3", False), (True, 2, "step 3 of 3", True)]
    assert_ledger_clean(rs_db)
