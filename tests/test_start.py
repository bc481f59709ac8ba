"""`runner start` as a user runs it: real processes on one database."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from tests.support import RunnerProcess, eventually, rows, scalar

SINK = """CREATE TABLE sink (
    job_name text, slot timestamptz, partition_key text, fence bigint, idempotency_key text)"""


def test_three_processes_run_each_slot_once(db_url: str, tmp_path: Path) -> None:
    with __import__("psycopg").connect(db_url, autocommit=True) as conn:
        conn.execute(SINK)
    procs = [
        RunnerProcess("tests/apps/three_partitions.py:app", db_url, "--workers", "4",
                      log=tmp_path / f"runner{i}.log")
        for i in range(3)
    ]
    try:
        # wait until six distinct slots are fully done by the ledger
        eventually(
            lambda: scalar(db_url, "SELECT count(*) FROM (SELECT schedule_slot FROM runner.job_runs"
                           " WHERE status = 'succeeded' GROUP BY 1 HAVING count(*) = 3) s") >= 6,
            timeout=30, message="six slots succeeded",
        )
    finally:
        codes = [p.terminate() for p in procs]
    logs = "\n".join(p.output() for p in procs)
    assert codes == [0, 0, 0], logs

    runs = rows(db_url, "SELECT schedule_slot, partition_key, status, attempt FROM runner.job_runs"
                        " ORDER BY 1, 2")
    # shutdown lets running handlers finish: nothing is left running
    assert {r[2] for r in runs} == {"succeeded"}, runs
    slots = sorted({r[0] for r in runs})
    # no missing slot between the first and the last, and every partition of each
    expected = [slots[0] + timedelta(seconds=i)
                for i in range(int((slots[-1] - slots[0]).total_seconds()) + 1)]
    assert slots == expected
    # every partition of each slot, but the last: the processes may be stopped while they claim
    # its partitions; those it lacks are then not lost but listed by the gap scan
    *whole, last = expected
    assert [(r[0], r[1]) for r in runs if r[0] != last] == [(s, p) for s in whole for p in "abc"]
    claimed = {r[1] for r in runs if r[0] == last}
    listed = {r[0] for r in rows(db_url, "SELECT partition_key FROM runner.missing_slots"
                                         " WHERE schedule_slot = %s", (last,))}
    assert claimed | listed == set("abc") and not claimed & listed, (claimed, listed)
    # exactly one sink row per slot x partition, written by the run that succeeded
    sink = rows(db_url, "SELECT slot, partition_key, count(*) FROM sink GROUP BY 1, 2 ORDER BY 1, 2")
    assert [(s, p) for s, p, _ in sink] == [(r[0], r[1]) for r in runs]
    assert {c for _, _, c in sink} == {1}
    joined = scalar(db_url, "SELECT count(*) FROM sink s JOIN runner.job_runs r"
                            " ON r.schedule_slot = s.slot AND r.partition_key = s.partition_key"
                            " AND r.fence = s.fence AND r.idempotency_key = s.idempotency_key")
    assert joined == len(runs)
    # each attempt is recorded with its owner, and closed
    attempts = rows(db_url, "SELECT status, count(DISTINCT owner_instance) FROM runner.attempts"
                            " GROUP BY 1")
    assert [a[0] for a in attempts] == ["succeeded"]
    # the processes deregistered and released every lock
    assert scalar(db_url, "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL") == 0
    assert scalar(db_url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())") == 0
