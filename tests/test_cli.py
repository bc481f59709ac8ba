"""The CLI as an operator meets it: clear one-line errors, non-zero exits, nothing written."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psycopg
import pytest

from tests.support import run_cli, scalar


def one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("runner: error: "), lines
    return lines[0]


def test_unreachable_database_is_one_line(tmp_path: Path) -> None:
    out = run_cli("start", "--app", "tests/apps/hello.py:app",
                  url="postgresql://nobody:s3cret@127.0.0.1:1/nowhere")
    assert out.returncode == 1
    line = one_line_error(out)
    assert "cannot connect" in line
    assert "s3cret" not in out.stderr + out.stdout


def test_unmigrated_schema_says_run_db_upgrade_and_writes_nothing(empty_db_url: str) -> None:
    out = run_cli("start", "--app", "tests/apps/hello.py:app", url=empty_db_url)
    assert out.returncode == 1
    assert "runner db upgrade" in one_line_error(out)
    assert scalar(empty_db_url, "SELECT count(*) FROM pg_namespace WHERE nspname = 'runner'") == 0


def test_too_new_schema_is_refused(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE runner.alembic_version SET version_num = '9999_from_the_future'")
    out = run_cli("start", "--app", "tests/apps/hello.py:app", url=db_url)
    assert out.returncode == 1
    assert "newer runner" in one_line_error(out)
    assert scalar(db_url, "SELECT count(*) FROM runner.jobs") == 0


def test_app_import_error_is_one_line(db_url: str) -> None:
    out = run_cli("start", "--app", "tests/apps/broken_import.py:app", url=db_url)
    assert out.returncode == 1
    assert "module_that_does_not_exist" in one_line_error(out)
    assert scalar(db_url, "SELECT count(*) FROM runner.jobs") == 0


def test_missing_attribute_and_bad_spec(db_url: str) -> None:
    out = run_cli("start", "--app", "tests/apps/hello.py:nope", url=db_url)
    assert out.returncode == 1 and "no attribute 'nope'" in one_line_error(out)
    out = run_cli("start", "--app", "just_a_module", url=db_url)
    assert out.returncode == 1 and "module:attr" in one_line_error(out)


def test_invalid_job_names_job_and_field(db_url: str) -> None:
    out = run_cli("start", "--app", "tests/apps/bad_cron.py:app", url=db_url)
    assert out.returncode == 1
    line = one_line_error(out)
    assert "'nightly'" in line and "cron" in line
    assert scalar(db_url, "SELECT count(*) FROM runner.jobs") == 0


def test_usage_errors_exit_2(db_url: str) -> None:
    out = run_cli("runs", "--status", "bogus", url=db_url)
    assert out.returncode == 2
    out = run_cli("runs", "--since", "yesterday", url=db_url)
    assert out.returncode == 2
    out = run_cli("start", "--workers", "0", url=db_url)
    assert out.returncode == 2


@pytest.mark.parametrize("args", [
    ["prune", "--batch", "0"], ["prune", "--batch", "10001"], ["prune", "--batch", "9" * 30],
    ["prune", "--batch", "ten"], ["prune", "--limit", "-5"], ["prune", "--bogus"],
    ["retire", "j", "--yes"], ["unretire"], ["start", "--prune-interval", "-1"], ["nosuch"],
])
def test_usage_errors_are_one_line(db_url: str, args: list[str]) -> None:
    """A bad option value, a missing option or argument, an unknown option or command: one
    line naming the command's --help, exit 2, like every other error."""
    out = run_cli(*args, url=db_url)
    assert out.returncode == 2, out.stderr
    assert "--help" in one_line_error(out)


def test_jobs_lists_definitions_as_json() -> None:
    out = run_cli("jobs", "--app", "runner.example:app", "--json")
    assert out.returncode == 0, out.stderr
    jobs = {j["job_name"]: j for j in json.loads(out.stdout)}
    assert jobs["hourly-report"]["timezone"] == "Asia/Seoul"
    assert jobs["hourly-report"]["partitions"] == ["acme", "globex"]
    assert len(jobs["heartbeat"]["next_slots"]) == 3


def test_runs_filters_and_json(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        for i, (job, status, part) in enumerate(
                [("a", "succeeded", ""), ("a", "dead", ""), ("b", "succeeded", "t'1")]):
            conn.execute(
                "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date,"
                " window_start, window_end, status, trigger, idempotency_key)"
                " VALUES (%s, '2026-01-01 00:00+00'::timestamptz + %s * interval '1 hour', %s, '2026-01-01',"
                " '2026-01-01', '2026-01-01', %s, 'schedule', 'k')", (job, i, part, status))
    out = run_cli("runs", "--job", "a", "--status", "dead", "--json", url=db_url)
    assert out.returncode == 0, out.stderr
    assert [(r["job_name"], r["status"]) for r in json.loads(out.stdout)] == [("a", "dead")]
    out = run_cli("runs", "--partition", "t'1", "--json", url=db_url)
    assert [r["job_name"] for r in json.loads(out.stdout)] == ["b"]
    out = run_cli("runs", "--since", "2026-01-01T00:30:00+00:00", "--json", url=db_url)
    assert len(json.loads(out.stdout)) == 2


def test_cli_and_loop_sessions_never_jit_compile(db_url: str) -> None:
    """runner.alerts and job_health cost past the JIT thresholds on a busy ledger, where
    compiling took seconds longer than running (scripts/bench/RESULTS.md): every session the
    CLI and the loop open has jit off, whatever the server's default."""
    from runner import cli
    from runner.settings import DatabaseChoice
    from runner.worker import loop

    with psycopg.connect(db_url, autocommit=True) as c:
        assert c.execute("SHOW jit").fetchone() == ("on",)  # the server default this guards against
    with cli._connect(DatabaseChoice(db_url, "flag")) as conn:
        assert conn.execute("SHOW jit").fetchone() == ("off",)
    with loop.connect(db_url) as conn:
        assert conn.execute("SHOW jit").fetchone() == ("off",)
