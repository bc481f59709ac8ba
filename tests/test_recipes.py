"""The on-call queries (docs/how-to/on-call.md, "On call: ten questions, ten queries") run, as the readonly
role, against a ledger made by a real `runner start` plus a few hand-made runs, and each
answers its question: a renamed column or view breaks this test, not the on-call engineer."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.conftest import url_for
from tests.support import ROOT, RunnerProcess, eventually, run_cli, scalar

PAGE = "docs/how-to/on-call.md"
HEADING = "## On call: ten questions, ten queries"


def recipes() -> list[tuple[int, str, str]]:
    """(number, question, query) for each fenced sql block under the heading."""
    text = (ROOT / PAGE).read_text()
    assert f"\n{HEADING}\n" in text, f"{PAGE} has no section {HEADING!r}"
    section = text.split(f"\n{HEADING}\n", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"^### (\d+)\. (.+?)\n[^`]*?```sql\n(.*?)```", section, re.S | re.M)
    assert section.count("```sql") == len(found), "every sql block needs its ### N. question heading"
    return [(int(n), " ".join(q.split()), sql) for n, q, sql in found]


RECIPES = recipes()

# what each answer must contain, given the ledger built below
EXPECTED = {
    1: "always fails",  # the real runner's failing job
    2: "nope",  # its failed runs are not done: the gap scan lists them
    3: "recipes-test",  # the rerun below, by whom
    4: "globex",  # the tenant with a dead and a failed run
    5: "acme",  # the hand-made running run
    6: "bank API did not answer",  # the dead run's error
    7: "daily-settlement",  # its 10-minute run is the slowest
    8: "maintenance window",  # the pause below, and why
    9: "daily-settlement",
    10: "host-b",  # the abandoned attempt's owner
}


def test_the_on_call_page_has_ten_numbered_recipes() -> None:
    assert [n for n, _, _ in RECIPES] == list(range(1, 11))


def settlement_ledger(conn: psycopg.Connection[Any]) -> None:
    """A partitioned daily job (02:00 Asia/Seoul) over three days: done, then a dead tenant
    whose attempts include an abandoned one, then one running and one failed."""
    now = conn.execute("SELECT now()").fetchone()[0]
    day1 = now.astimezone(UTC).replace(hour=17, minute=0, second=0, microsecond=0)
    if day1 > now:
        day1 -= timedelta(days=1)
    day2, day3 = day1 - timedelta(days=1), day1 - timedelta(days=2)
    conn.execute(
        "INSERT INTO runner.jobs (job_name, schedule_kind, cron, timezone, partitions, options, track_from)"
        " VALUES ('daily-settlement', 'cron', '0 2 * * *', 'Asia/Seoul', '{acme,globex}',"
        " '{\"owner\": \"settlements\"}', %s)", (day3 - timedelta(days=1),))
    conn.execute(
        "INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, cron, timezone, partitions)"
        " VALUES ('daily-settlement', %s, 'cron', '0 2 * * *', 'Asia/Seoul', '{acme,globex}')",
        (day3 - timedelta(days=1),))

    def run(slot: datetime, tenant: str, status: str, started: datetime, finished: datetime | None,
            attempts: list[tuple[str, str]], error: str | None = None) -> None:
        run_id = conn.execute(
            "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date,"
            " window_start, window_end, status, trigger, attempt, fence, idempotency_key, started_at,"
            " finished_at, last_error, processed_count, next_attempt_at)"
            " VALUES ('daily-settlement', %s, %s, %s, %s, %s, %s, 'schedule', %s, %s, 'k', %s, %s, %s, 42,"
            " %s) RETURNING id",
            (slot, tenant, (slot + timedelta(hours=9)).date(), slot - timedelta(days=1), slot, status,
             len(attempts), len(attempts), started, finished, error,
             now + timedelta(hours=1) if status == "failed" else None)).fetchone()[0]
        for n, (attempt_status, host) in enumerate(attempts, 1):
            conn.execute(
                "INSERT INTO runner.attempts (run_id, attempt, fence, trigger, owner_host, owner_pid,"
                " owner_instance, lock_key, started_at, heartbeat_at, finished_at, status, error_message)"
                " VALUES (%s, %s, %s, 'schedule', %s, 7, gen_random_uuid(), 1, %s, %s, %s, %s, %s)",
                (run_id, n, n, host, started, now - timedelta(seconds=10),
                 None if attempt_status == "running" else now - timedelta(hours=1), attempt_status,
                 None if attempt_status in ("running", "succeeded") else error))

    minute = timedelta(minutes=1)
    run(day3, "acme", "succeeded", day3 + minute, day3 + 3 * minute, [("succeeded", "host-a")])
    run(day3, "globex", "succeeded", day3 + minute, day3 + 2 * minute, [("succeeded", "host-a")])
    run(day2, "acme", "succeeded", day2 + minute, day2 + 11 * minute, [("succeeded", "host-a")])
    run(day2, "globex", "dead", day2 + minute, now - timedelta(hours=1),
        [("failed", "host-a"), ("abandoned", "host-b"), ("dead", "host-a")],
        error="TimeoutError: bank API did not answer")
    run(day1, "acme", "running", now - 5 * minute, None, [("running", "host-a")])
    run(day1, "globex", "failed", day1 + minute, None, [("failed", "host-a")],
        error="ConnectionError: bank API refused")


@pytest.fixture(scope="module")
def readonly_url(clone_pool: Any, db_roles: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A clone of the template (the pool's, dropped behind the module) with a real ledger."""
    name = clone_pool.take()
    try:
        url = url_for(name)
        log = Path(tmp_path_factory.mktemp("recipes")) / "runner.log"
        proc = RunnerProcess("tests/apps/operators.py:app", url, "--poll-interval", "0.2", log=log)
        try:
            eventually(lambda: scalar(url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'ok'"
                                           " AND status = 'succeeded'") >= 2
                       and scalar(url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'nope'"
                                       " AND status = 'failed'") >= 2,
                       timeout=30, message="the real runner made a ledger")
        finally:
            assert proc.terminate() == 0, proc.output()
        with psycopg.connect(url, autocommit=True) as conn:
            settlement_ledger(conn)
        db_roles.apply(url)
        operator = db_roles.url(url, "operator")
        slot = scalar(url, "SELECT min(schedule_slot) FROM runner.job_runs WHERE job_name = 'nope'"
                           " AND status = 'failed'")
        for args in (("rerun", "nope", "--slot", slot.isoformat(), "--reason", "flaky vendor, try again",
                      "--by", "recipes-test"),
                     ("pause", "other", "--reason", "maintenance window", "--by", "recipes-test")):
            out = run_cli(*args, "--yes", url=operator)
            assert out.returncode == 0, out.stderr
        yield db_roles.url(url, "readonly")
    finally:
        clone_pool.give_back(name)


@pytest.mark.parametrize(("number", "question", "query"), RECIPES, ids=[f"{n}" for n, _, _ in RECIPES])
def test_recipe_answers_its_question(readonly_url: str, number: int, question: str, query: str) -> None:
    with psycopg.connect(readonly_url, autocommit=True) as conn:
        if "runner.missing_slots" in query and conn.execute(
                "SELECT to_regclass('runner.missing_slots')").fetchone()[0] is None:
            pytest.skip("runner.missing_slots (the gap scan, revision 0003) is not in this schema")
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query)
            answer = cur.fetchall()
    assert answer, f"recipe {number} ({question}) found nothing"
    assert EXPECTED[number] in repr(answer), (number, question, answer)
