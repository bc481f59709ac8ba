"""Fenced checkpoints (issue 33, runner/worker/checkpoints.py) with real ``runner start`` processes:
a handler that writes 10,000 rows through ``ctx.db`` in chunks of 100, checkpointing after
each, survives kill -9 and SIGTERM of whichever process runs it, and ends with every row
exactly once and little work done twice; a SIGTERM hands the run off to the other runner
within a poll interval."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import RunnerProcess, assert_ledger_clean, eventually, rows, scalar

SLOT = (datetime.now(UTC) - timedelta(minutes=30)).replace(second=0, microsecond=0)
POLL = 0.2  # the runners' poll interval, seconds
TOTAL, CHUNK = 10_000, 100
SETUP = """
CREATE TABLE ck_rows (job text NOT NULL, n integer NOT NULL);
CREATE TABLE ck_work (job text PRIMARY KEY, rows_written bigint NOT NULL DEFAULT 0);
INSERT INTO ck_work (job) VALUES ('settle'), ('asettle');
CREATE TABLE ck_gate (job text PRIMARY KEY, below bigint, gate integer);
"""


@pytest.fixture
def ck_db(db_url: str) -> str:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(SETUP)
    return db_url


def start(url: str, tmp: Path, name: str, job: str) -> RunnerProcess:
    return RunnerProcess("tests/apps/checkpoints.py:app", url, "--poll-interval", str(POLL),
                         "--grace", "1", env={"CK_SLOT": SLOT.isoformat(), "CK_JOBS": job, "CK_PAUSE": "0.01"},
                         log=tmp / f"{name}.log")


def running(url: str, job: str) -> tuple[int, int, int, int] | None:
    """(run id, fence, owner pid, rows committed) while the job's run is running."""
    got = rows(url, """
        SELECT r.id, r.fence, a.owner_pid, coalesce((r.checkpoint ->> 'next')::int, 0)
        FROM runner.job_runs r JOIN runner.attempts a ON a.run_id = r.id AND a.fence = r.fence
        WHERE r.job_name = %s AND r.status = 'running' AND a.status = 'running'""", (job,))
    return got[0] if got else None  # type: ignore[return-value]


def gate(url: str, job: str, below: int | None, at: int | None) -> None:
    """The job's attempts at a fence above ``below`` wait before their next chunk, and so do
    all of them before a chunk starting at or past ``at`` rows (tests/apps/checkpoints.py)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO ck_gate VALUES (%s, %s, %s) ON CONFLICT (job) DO UPDATE "
                     "SET below = excluded.below, gate = excluded.gate", (job, below, at))


@pytest.mark.parametrize("job", ["settle", "asettle"])
def test_kill_9_three_times_and_sigterm_twice_ends_with_every_row_once(
        ck_db: str, tmp_path: Path, job: str) -> None:
    rng = random.Random()
    disruptions = ["kill"] * 3 + ["term"] * 2
    rng.shuffle(disruptions)
    # each disruption comes 1 to 8 chunks after the previous one's resumption point, the run
    # stopped by its gate 1 to 3 chunks after that until the test has picked its moment
    target = rng.randint(1, 8) * CHUNK
    gate(ck_db, job, None, target + rng.randint(1, 3) * CHUNK)
    procs = [start(ck_db, tmp_path, f"{job}-0", job), start(ck_db, tmp_path, f"{job}-1", job)]
    handoff_gaps: list[float] = []
    try:
        for n, what in enumerate(disruptions):
            # both runners up (a handoff needs the other one to take the run)
            eventually(lambda: scalar(ck_db, "SELECT count(*) FROM runner.instances WHERE pid = ANY(%s) "
                                             "AND stopped_at IS NULL", ([p.proc.pid for p in procs],)) == 2,
                       timeout=30, message="both runners registered")
            run = eventually(lambda t=target: (r := running(ck_db, job)) and r[3] >= t and r,
                             timeout=30, message=f"{job}'s run past {target} rows")
            run_id, fence, pid = run[0], run[1], run[2]
            [i] = [i for i, p in enumerate(procs) if p.proc.pid == pid]
            # the attempts after this one wait until the stopped runner is replaced (else the
            # run could end before the next disruption); a stopped runner's attempt must reach
            # its next checkpoint, so its gate goes
            gate(ck_db, job, fence, None if what == "term" else target + 100 * CHUNK)
            time.sleep(rng.uniform(0, 0.06))  # anywhere in a chunk: insert, count, checkpoint, pause
            if what == "kill":
                procs[i].kill()
            else:
                assert procs[i].terminate(timeout=20) == 0, procs[i].output()
                # handed off at its next checkpoint, the run back to pending at once, and
                # started by the other runner within a poll interval
                status, ended = rows(ck_db, "SELECT status, finished_at FROM runner.attempts "
                                            "WHERE run_id = %s AND fence = %s", (run_id, fence))[0]
                assert status == "handed_off", procs[i].output()
                started = eventually(lambda r=run_id, f=fence: scalar(
                    ck_db, "SELECT started_at FROM runner.attempts WHERE run_id = %s AND fence = %s",
                    (r, f + 1)), timeout=10, message="the handed-off run resumed")
                handoff_gaps.append((started - ended).total_seconds())
            procs[i] = start(ck_db, tmp_path, f"{job}-{i}-{n}", job)
            # the next disruption hits the attempt after this one, held where it resumed
            again = eventually(lambda f=fence: (r := running(ck_db, job)) and r[1] > f and r, timeout=30,
                               message="the run running again")
            target = again[3] + rng.randint(1, 8) * CHUNK
            gate(ck_db, job, None, target + rng.randint(1, 3) * CHUNK
                 if n < len(disruptions) - 1 else None)
        eventually(lambda: scalar(ck_db, "SELECT status FROM runner.job_runs WHERE job_name = %s",
                                  (job,)) == "succeeded", timeout=60, message=f"{job} succeeded")
    finally:
        for p in procs:
            p.terminate(timeout=20)
    count, distinct, low, high = rows(ck_db, "SELECT count(*), count(DISTINCT n), min(n), max(n) "
                                             "FROM ck_rows WHERE job = %s", (job,))[0]
    assert (count, distinct, low, high) == (TOTAL, TOTAL, 0, TOTAL - 1)
    work = scalar(ck_db, "SELECT rows_written FROM ck_work WHERE job = %s", (job,))
    assert TOTAL <= work < TOTAL + len(disruptions) * CHUNK, work
    attempts = rows(ck_db, "SELECT a.status, a.fence FROM runner.attempts a JOIN runner.job_runs r "
                           "ON r.id = a.run_id WHERE r.job_name = %s ORDER BY a.fence", (job,))
    statuses = [s for s, _ in attempts]
    assert statuses.count("abandoned") == 3 and statuses.count("handed_off") == 2, attempts
    assert statuses[-1] == "succeeded", attempts
    run: dict[str, Any] = rows(ck_db, "SELECT row_to_json(r) FROM runner.job_runs r WHERE job_name = %s",
                               (job,))[0][0]
    # the handoffs did not count against max_attempts; the kills did
    assert run["attempt"] - run["uncounted_attempts"] == 4, run
    assert run["checkpoint"] == {"next": TOTAL} and run["checkpoints"] >= TOTAL // CHUNK, run
    # within a poll interval (and the few tens of milliseconds of the claiming tick itself)
    assert all(gap <= POLL + 0.15 for gap in handoff_gaps), handoff_gaps
    print(f"{job}: handoff to the other runner after {handoff_gaps} s; {work} rows written for {TOTAL}")
    assert_ledger_clean(ck_db)


# -- in-process: the state's limits, a stale checkpoint, and an operator's rerun -----------------


def one_run_app(handler: Any, max_attempts: int = 1) -> Any:
    from runner import Runner
    from tests.support import one_late_slot

    app = Runner()
    app.job("long", max_attempts=max_attempts, **one_late_slot())(handler)
    return app


def run_row(url: str) -> dict[str, Any]:
    got = rows(url, "SELECT row_to_json(r) FROM runner.job_runs r WHERE job_name = 'long'")
    return got[0][0] if got else {}


def test_a_rerun_starts_from_scratch_unless_asked_to_resume(ck_db: str) -> None:
    """A run that died halfway (its checkpoints committed) is rerun twice by an operator:
    from scratch by default (ctx.resume None, the state cleared), then, after it died
    halfway again, with --resume (it continues from the checkpoint; every row once)."""
    from runner.errors import Permanent
    from tests.support import run_cli, running_worker

    seen: list[Any] = []

    def long(ctx: Any) -> None:
        seen.append(ctx.resume)
        start = (ctx.resume or {"next": 0})["next"]
        for first in range(start, 1000, 100):
            ctx.db.execute("INSERT INTO ck_rows (job, n) SELECT 'long', g FROM generate_series(%s::int, %s::int) g",
                           (first, first + 99))
            ctx.checkpoint({"next": first + 100})
            if first + 100 == 500 and len(seen) < 3:
                raise Permanent("upstream gone")  # dies halfway (the first two attempts)

    app = one_run_app(long)
    with running_worker(app, ck_db):
        eventually(lambda: run_row(ck_db).get("status") == "dead", timeout=30, message="died halfway")
        slot = run_row(ck_db)["schedule_slot"]
        assert run_row(ck_db)["checkpoint"] == {"next": 500}
        out = run_cli("rerun", "long", "--slot", slot, "--reason", "upstream back", "--yes", url=ck_db)
        assert out.returncode == 0, out.stderr
        assert "starts from scratch: its last checkpoint" in out.stdout and "--resume keeps it" in out.stdout
        eventually(lambda: len(seen) == 2 and run_row(ck_db).get("status") == "dead", timeout=30,
                   message="the rerun died halfway too")
        assert seen[1] is None  # from scratch
        # (from scratch wrote rows 0-499 again: a handler that reruns from scratch must undo or
        # upsert; this one's table shows it)
        assert scalar(ck_db, "SELECT count(*) FROM ck_rows") == 1000
        out = run_cli("rerun", "long", "--slot", slot, "--reason", "continue", "--resume", "--yes",
                      "--json", url=ck_db)
        assert out.returncode == 0, out.stderr
        assert "from its last checkpoint" in out.stdout
        eventually(lambda: run_row(ck_db).get("status") == "succeeded", timeout=30, message="resumed")
    assert seen[2] == {"next": 500}
    assert scalar(ck_db, "SELECT count(*) FROM ck_rows WHERE n >= 500") == 500  # the resumed half once
    requests = rows(ck_db, "SELECT touched -> 'resume', touched #> '{runs,0,checkpoint,kept}' "
                           "FROM runner.requests WHERE action = 'rerun' ORDER BY id")
    assert requests == [(False, False), (True, True)]


def test_a_state_too_large_or_not_json_is_refused_and_nothing_is_written(ck_db: str) -> None:
    from runner.worker.checkpoints import MAX_BYTES, CheckpointError
    from tests.support import running_worker

    errors: list[str] = []

    def long(ctx: Any) -> None:
        ctx.db.execute("INSERT INTO ck_rows (job, n) VALUES ('long', 1)")
        for state in ({"blob": "x" * MAX_BYTES}, {"when": object()}, float("nan")):
            try:
                ctx.checkpoint(state)
            except CheckpointError as exc:
                errors.append(str(exc))
        ctx.checkpoint({"blob": "é" * ((MAX_BYTES - 20) // 2)})  # multi-byte, just under the limit

    with running_worker(one_run_app(long), ck_db):
        eventually(lambda: run_row(ck_db).get("status") == "succeeded", timeout=30, message="done")
    assert len(errors) == 3 and "over the limit of 65536 bytes" in errors[0], errors
    assert all("\n" not in e for e in errors)
    run = run_row(ck_db)
    assert run["checkpoints"] == 1 and MAX_BYTES - 40 < run["checkpoint_bytes"] <= MAX_BYTES, run
    # the database refuses a larger state on its own, whatever the caller
    with psycopg.connect(ck_db, autocommit=True) as conn, pytest.raises(psycopg.Error, match="over the limit"):
        conn.execute("SELECT runner.checkpoint_v1(%s, %s, %s::jsonb, 's')",
                     (run["id"], run["fence"], '"' + "x" * MAX_BYTES + '"'))
