"""Hostile input end to end: names and keys with any characters, handlers that misbehave,
a database that is not there at start or goes away mid-run. Real ``runner start`` processes;
what an operator sees through ``runner runs --json``."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import psycopg
import pytest

from tests.apps.hostile import INCOMPRESSIBLE, KEYS, QUOTED_JOB
from tests.support import RunnerProcess, eventually, rows, run_cli, scalar
from tests.test_cli import one_line_error

APP = "tests/apps/hostile.py"
NEWLINE_KEY = next(k for k in KEYS if "\n" in k)
SINK = "CREATE TABLE sink (job_name text, slot timestamptz, partition_key text, fence bigint)"


@pytest.fixture
def sink_db(db_url: str) -> str:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(SINK)
    return db_url


def start(url: str, tmp: Path, app: str = "app", *extra: str) -> RunnerProcess:
    return RunnerProcess(f"{APP}:{app}", url, "--poll-interval", "0.2", "--grace", "1", *extra,
                         log=tmp / f"{app}.log")


def listed(url: str, *args: str) -> list[dict]:
    out = run_cli("runs", "--json", "--limit", "100000", *args, url=url)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_names_and_keys_with_any_characters_round_trip(sink_db: str, tmp_path: Path) -> None:
    proc = start(sink_db, tmp_path)
    try:
        def every_key_succeeded() -> bool:
            got = rows(sink_db, "SELECT DISTINCT partition_key FROM runner.job_runs"
                                " WHERE job_name = %s AND status = 'succeeded'", (QUOTED_JOB,))
            return {k for (k,) in got} == set(KEYS)
        eventually(every_key_succeeded, timeout=30, message="a succeeded run for every hostile key")
    finally:
        assert proc.terminate() == 0, proc.output()
    runs = listed(sink_db, "--job", QUOTED_JOB, "--status", "succeeded")
    assert {r["partition_key"] for r in runs} == set(KEYS)
    assert {r["job_name"] for r in runs} == {QUOTED_JOB}
    # filtering by a hostile key is exact too (parameters, not string-built SQL)
    for key in KEYS:
        assert {r["partition_key"] for r in listed(sink_db, "--partition", key)} == {key}
    # what the handlers wrote through ctx.db: byte for byte the same keys, once per run
    assert rows(sink_db, "SELECT count(*), count(DISTINCT (slot, partition_key)) FROM sink"
                         " WHERE job_name = %s", (QUOTED_JOB,))[0] == (
        scalar(sink_db, "SELECT count(*) FROM runner.job_runs WHERE job_name = %s AND status = 'succeeded'",
               (QUOTED_JOB,)),) * 2
    assert scalar(sink_db, "SELECT count(*) FROM runner.jobs WHERE job_name = %s", (QUOTED_JOB,)) == 1


def test_hostile_keys_cannot_forge_log_lines(sink_db: str, tmp_path: Path) -> None:
    """Every line of the text log is one record: a key with a newline or carriage return
    (``'tab\\tnewline\\nreturn\\r'``) must come out escaped, not as a second line that
    reads like a record of its own.

    Fails today: runner/events.py ``_text`` quotes a string only when it is empty or holds a
    space or '=', so control characters are written raw."""
    proc = start(sink_db, tmp_path)
    try:
        eventually(lambda: scalar(sink_db, "SELECT count(*) FROM runner.job_runs WHERE partition_key = %s"
                                           " AND status = 'succeeded'", (NEWLINE_KEY,)) >= 1, timeout=30)
    finally:
        assert proc.terminate() == 0, proc.output()
    record = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
    strays = [line for line in proc.output().split("\n")
              if line and not record.match(line) and not line.startswith((" ", "Traceback"))]
    assert not strays, strays[:5]


def test_handlers_that_misbehave(sink_db: str, tmp_path: Path) -> None:
    proc = start(sink_db, tmp_path)
    try:
        def count(job: str, status: str) -> int:
            return scalar(sink_db, "SELECT count(*) FROM runner.job_runs WHERE job_name = %s AND status = %s",
                          (job, status))
        eventually(lambda: count("unprintable-error", "dead") >= 2, timeout=30)
        eventually(lambda: count("returns-a-value", "succeeded") >= 2, timeout=30)
    finally:
        assert proc.terminate() == 0, proc.output()
    # an exception whose str() and repr() raise is still recorded, with its class
    got = rows(sink_db, "SELECT DISTINCT a.error_class, a.error_message FROM runner.attempts a"
                        " JOIN runner.job_runs r ON r.id = a.run_id"
                        " WHERE r.job_name = 'unprintable-error' AND a.status <> 'released'")
    assert len(got) == 1, got
    ((error_class, message),) = got
    assert error_class.endswith("Unprintable")
    assert "Unprintable" in message and "raised" in message
    runs = listed(sink_db, "--job", "unprintable-error", "--status", "dead")
    assert runs and all("Unprintable" in r["last_error"] for r in runs)
    # a handler's return value is ignored: its runs succeeded, each write committed once
    assert rows(sink_db, "SELECT count(*), count(DISTINCT slot) FROM sink WHERE job_name = 'returns-a-value'") == [
        (count("returns-a-value", "succeeded"),) * 2]


def test_a_partition_key_the_ledger_cannot_hold_stops_no_other_job(sink_db: str, tmp_path: Path) -> None:
    """A dynamic partition key of 10 kB that does not compress cannot enter the ledger's unique
    index (btree entries hold at most 8191 bytes). Whatever the runner does about that slot
    (refuse the key, log it, leave the slot to the gap scan), the other jobs of the process must
    keep running.

    Fails today (runner/worker/loop.py): PostgreSQL's ProgramLimitExceeded is a psycopg
    OperationalError, so ``claim()`` puts the whole claim batch back and re-raises, and
    ``run()`` takes it for a lost connection: it reconnects, claims the same poisoned batch,
    and so on, every few milliseconds, opening a new connection each time; no job of the
    process ever runs again."""
    assert len(INCOMPRESSIBLE.encode()) == 10240
    proc = start(sink_db, tmp_path, "huge")
    try:
        eventually(lambda: scalar(sink_db, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'steady'"
                                           " AND status = 'succeeded'") >= 3,
                   timeout=20, message="the steady job keeps running beside the poisoned one")
    finally:
        proc.terminate()
    assert scalar(sink_db, "SELECT count(*) FROM runner.job_runs WHERE length(partition_key) > 8000") == 0


def test_unreachable_database_at_start_variants(db_url: str, tmp_path: Path) -> None:
    """Beyond tests/test_cli.py's closed port: a server that is up but has no such database,
    and a host name that does not resolve. One line, exit 1, and nothing created."""
    base = db_url.rsplit("/", 1)[0]
    for url in (f"{base}/runner_no_such_database", "postgresql://nobody@host.invalid:5432/x"):
        out = run_cli("start", "--app", f"{APP}:steady", url=url, timeout=60)
        assert out.returncode == 1, out.stderr
        line = one_line_error(out)
        assert "cannot connect" in line
        out = run_cli("runs", "--json", url=url, timeout=60)
        assert out.returncode == 1 and "cannot connect" in one_line_error(out)
    assert scalar(db_url, "SELECT count(*) FROM pg_database WHERE datname = 'runner_no_such_database'") == 0


def test_database_gone_mid_run_loses_nothing(sink_db: str, tmp_path: Path) -> None:
    """Every session of a live runner is ended, again and again, for four seconds. The runner
    retries its connections with backoff and says so in its log, and loses nothing: after the
    storm every slot of the steady job from its first run on ends succeeded, exactly once
    (one sink row per run, under the run's final fence).

    That covers the slots due *during* the storm too: under current semantics the process
    keeps its own queue of due slots through reconnections and claims them once it is back
    (they are late only past the job's grace, 60 s, well beyond this outage). Slots missed
    while *no* runner process is alive are a different matter: the misfire policy decides
    them (tests/test_misfire.py).

    Fails today: every cut ``ctx.db`` connection leaks a slot of the handler pool (see
    tests/test_fault_suite.py::test_a_lost_ctx_db_connection_goes_back_to_the_pool), so after
    the storm each handler waits 30 s for a connection and fails with PoolTimeout."""
    proc = start(sink_db, tmp_path, "steady", "--workers", "4")
    try:
        eventually(lambda: scalar(sink_db, "SELECT count(*) FROM runner.job_runs"
                                           " WHERE status = 'succeeded'") >= 4, timeout=20)
        storm_end = time.monotonic() + 4.0
        ended = 0
        with psycopg.connect(sink_db, autocommit=True) as conn:
            while time.monotonic() < storm_end:
                ended += conn.execute(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND application_name IN ('runner', 'runner-worker')"
                ).fetchone()[0]
                time.sleep(0.05)  # the storm's own pace, not a wait for an outcome
        assert ended >= 10
        assert proc.proc.poll() is None, "the runner exited during the storm:\n" + proc.output()
        after = scalar(sink_db, "SELECT now()")
        # recovery: slots after the storm run, and everything before settles
        eventually(lambda: scalar(sink_db, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'"
                                           " AND schedule_slot > %s", (after,)) >= 4, timeout=30)
        last = scalar(sink_db, "SELECT max(schedule_slot) FROM runner.job_runs WHERE status = 'succeeded'")
        eventually(lambda: scalar(sink_db, "SELECT count(*) FROM runner.job_runs WHERE schedule_slot <= %s"
                                           " AND status <> 'succeeded'", (last,)) == 0,
                   timeout=30, message="every run up to the last success settled as succeeded")
    finally:
        code = proc.terminate()
    assert code == 0, proc.output()
    log = proc.output()
    assert "database connection lost" in log or "database unreachable" in log
    assert "retrying" in log or "re-established" in log
    first = scalar(sink_db, "SELECT min(schedule_slot) FROM runner.job_runs")
    expected = int((last - first).total_seconds()) + 1
    got = rows(sink_db, "SELECT partition_key, count(*), count(*) FILTER (WHERE status = 'succeeded')"
                        " FROM runner.job_runs WHERE schedule_slot BETWEEN %s AND %s GROUP BY 1 ORDER BY 1",
               (first, last))
    assert got == [("a", expected, expected), ("b", expected, expected)]
    assert scalar(sink_db, "SELECT count(*) FROM sink s JOIN runner.job_runs r ON r.job_name = s.job_name"
                           " AND r.schedule_slot = s.slot AND r.partition_key = s.partition_key"
                           " WHERE s.fence = r.fence AND s.slot BETWEEN %s AND %s", (first, last)) == 2 * expected
    assert scalar(sink_db, "SELECT count(*) FROM sink WHERE slot BETWEEN %s AND %s", (first, last)) == 2 * expected
