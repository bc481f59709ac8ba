"""Jobs for the verification-kind tests (tests/test_verification.py).

Each job copies the rows of ``vf_src`` in its window into ``vf_report`` (tagged with the
job's name) through ``ctx.db``, exactly once with the run's success. ``lossy`` and
``lenient`` skip the rows with a negative amount: every run succeeds, and the output is
still wrong. ``live`` is a realtime job, so a running runner has live lag to report;
``failing`` always fails (a plan of it pauses past max_failures).
"""

import os
import time
from datetime import datetime
from typing import Any

from runner import JobContext, Permanent, Runner
from runner.verification import checksum, count, residual, sample_keys

app = Runner()
WORK = float(os.environ.get("VF_WORK_SECONDS", "0"))
WINDOW = "at >= %(window_start)s AND at < %(window_end)s"


def four(job: str) -> list[Any]:
    """The four kinds over vf_src (the truth) and the job's rows of vf_report (its output)."""
    mine = f"FROM vf_report WHERE job = '{job}' AND {WINDOW}"
    return [
        count(f"SELECT count(*) {mine}", expect=f"SELECT count(*) FROM vf_src WHERE {WINDOW}"),
        checksum(f"SELECT coalesce(sum(amount), 0) {mine}",
                 expect=f"SELECT coalesce(sum(amount), 0) FROM vf_src WHERE {WINDOW}"),
        sample_keys(f"SELECT id FROM vf_src WHERE {WINDOW}", size=5,
                    present=f"SELECT src_id FROM vf_report WHERE job = '{job}' AND src_id::text = ANY(%(keys)s)"),
        residual(f"SELECT s.id, s.amount FROM vf_src s WHERE s.{WINDOW.replace('AND ', 'AND s.')}"
                 f" AND NOT EXISTS (SELECT 1 FROM vf_report r WHERE r.job = '{job}' AND r.src_id = s.id)"
                 " ORDER BY s.id"),
    ]


def succeeded_runs(conn: Any, start: datetime, end: datetime, partition: str) -> int:
    """Python: the job's runs that succeeded in the window (what a count of work done sees)."""
    row = conn.execute("SELECT count(*) FROM runner.job_runs WHERE job_name = 'lossy' AND status = 'succeeded'"
                       " AND window_start >= %s AND window_end <= %s", (start, end)).fetchone()
    return int(row[0])


def slots_in(conn: Any, start: datetime, end: datetime, partition: str) -> int:
    return int((end - start).total_seconds() // 3600)


def copy(ctx: JobContext, lossy: bool = False) -> None:
    time.sleep(WORK)
    ctx.db.execute("INSERT INTO vf_report (src_id, at, amount, job) SELECT id, at, amount, %s FROM vf_src"
                   " WHERE at >= %s AND at < %s" + (" AND amount >= 0" if lossy else ""),
                   (ctx.job_name, ctx.window_start, ctx.window_end))


def broken(conn: Any, start: datetime, end: datetime, partition: str) -> int:
    raise RuntimeError("the verifier itself is broken")


@app.job("good", every="1h", verify=four("good"))
def good(ctx: JobContext) -> None:
    copy(ctx)


@app.job("lossy", every="1h", verify=[count(succeeded_runs, expect=slots_in, name="runs"),
                                      four("lossy")[3]])
def lossy(ctx: JobContext) -> None:
    copy(ctx, lossy=True)


@app.job("lenient", every="1h", min_passing=1,
         verify=[count("SELECT count(*) FROM runner.job_runs WHERE job_name = 'lenient' AND status = 'succeeded'"
                       " AND window_start >= %(window_start)s AND window_end <= %(window_end)s",
                       expect=slots_in, name="runs"), four("lenient")[3]])
def lenient(ctx: JobContext) -> None:
    copy(ctx, lossy=True)


@app.job("raising", every="1h", verify=[count(broken, expect=0, name="broken"), four("raising")[3]])
def raising(ctx: JobContext) -> None:
    copy(ctx)


@app.job("hostile", every="1h", min_passing=1, verify=[
    residual("WITH gone AS (DELETE FROM vf_report RETURNING src_id) SELECT * FROM gone", name="delete"),
    count("UPDATE vf_report SET amount = 0 RETURNING 1", expect=1, name="update"),
    count("SELECT count(*) FROM vf_report, pg_sleep(30)", expect=0, timeout=0.5, name="slow"),
    checksum("SELECT 1 FROM pg_advisory_lock(4242)", expect=1, name="lock"),
    residual("SELECT * FROM vf_secret", name="secret"),
    checksum("SELECT pg_terminate_backend(pid)::text FROM pg_stat_activity"
             " WHERE datname = current_database() AND application_name <> 'runner-verify-sql' LIMIT 1",
             expect=1, name="terminate"),
])
def hostile(ctx: JobContext) -> None:
    copy(ctx)


@app.job("live", every="1s", grace="30s")
def live(ctx: JobContext) -> None:
    pass


@app.job("failing", every="1h", max_attempts=1)
def failing(ctx: JobContext) -> None:
    raise Permanent(f"bad input for slot {ctx.slot.isoformat()}")


def hangs(conn: Any, start: datetime, end: datetime, partition: str) -> int:
    """Python that never returns in time (a stuck socket read, say): 30 s against a 0.5 s limit."""
    time.sleep(30)
    return 0


@app.job("hanging", every="1h", min_passing=1,
         verify=[count(hangs, expect=0, name="hangs", timeout=0.5), count(slots_in, expect=3, name="slots")])
def hanging(ctx: JobContext) -> None:
    copy(ctx)
