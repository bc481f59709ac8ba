"""The app of the model-based test (tests/test_model.py), run by real ``runner start``
processes. One app file serves every step: it reads a small JSON control file
(``MODEL_CONTROL``, rewritten by the test) at two moments:

* when the process starts (so a restart applies it): each job's schedule (``every``), its
  static partitions and its misfire policy;
* when the process starts, too: which jobs its code defines (a job with ``"absent": true`` is
  not defined: it was removed from the code, for a retirement);
* live, at every call: the dynamic job's partition list (``partitions=`` is a callable of the
  slot; ``"raise"`` makes it fail), and each job's handler behaviour (``ok``, ``raise``, ``permanent``, ``slow`` with
  its seconds: ticks of 0.1 s with a checkpoint every fifth, resumed from ``ctx.resume`` and
  handed off at a runner's SIGTERM), plus a number of one-shot crashes (``os._exit``: the handler kills its process,
  its other runs with it) taken by whichever handler of that job comes first.

Every execution is noted in ``model.executions`` (autocommit, outside the ledger): ``began``
before the work and ``returned`` just before a normal return, so the test can check that no
attempt is recorded succeeded for work that did not return. Each run sends one side effect
through the effect log (``ctx.effect``, key ``<idempotency key>:model``) before its work; the
send is noted as phase ``sent`` (its key in ``mode``, the sender's fence in ``fence``), and the
effect's check reads those notes (truthful), so the test can check that no key is ever sent
twice but in the one way runner/worker/effects.py allows (a stale owner still sending after a
takeover).

A second code version is the same file run with another control file (``MODEL_CONTROL`` of
that process): the test writes the behaviour into both.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from runner import JobContext, Permanent, Runner

CONTROL = Path(os.environ["MODEL_CONTROL"])
JOBS = ("m-static", "m-dynamic", "m-single")


def control() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CONTROL.read_text())
    return data


_pool: ConnectionPool[Any] | None = None
_pool_lock = threading.Lock()


def outside() -> ConnectionPool[Any]:
    """Connections of the test's own bookkeeping, not the runner's (application_name
    model-app: the test's session kills spare them)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ConnectionPool(os.environ["RUNNER_DATABASE_URL"], min_size=0, max_size=4,
                                   kwargs={"autocommit": True, "application_name": "model-app"},
                                   open=True)
        return _pool


def note(job: str, ctx: JobContext, phase: str, mode: str) -> None:
    with outside().connection() as conn:
        conn.execute("INSERT INTO model.executions (job_name, schedule_slot, partition_key, fence,"
                     " attempt, pid, phase, mode) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                     (job, ctx.slot, ctx.partition, ctx.fence, ctx.attempt, os.getpid(), phase, mode))


def sent(key: str, fence: int) -> None:
    with outside().connection() as conn:
        conn.execute("INSERT INTO model.executions (job_name, schedule_slot, partition_key, fence, attempt, pid,"
                     " phase, mode) VALUES ('', now(), '', %s, 0, %s, 'sent', %s)", (fence, os.getpid(), key))


def was_sent(key: str) -> bool:
    with outside().connection() as conn:
        row = conn.execute("SELECT count(*) FROM model.executions WHERE phase = 'sent' AND mode = %s",
                           (key,)).fetchone()
        return bool(row and row[0])


def take_crash(job: str, crashes: int) -> bool:
    """One of the job's one-shot crashes, if any is left (a marker file per crash: exactly one
    handler, in any process, takes each)."""
    for i in range(crashes):
        try:
            fd = os.open(CONTROL.parent / f"crash-{job}-{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue
        os.close(fd)
        return True
    return False


def work(job: str, ctx: JobContext) -> None:
    behaviour = control()["behaviour"][job]
    mode = behaviour["mode"]
    crash = take_crash(job, int(behaviour.get("crashes", 0)))
    try:
        note(job, ctx, "began", "crash" if crash else mode)
    except psycopg.Error:
        # the bookkeeping database was cut (an outage step): the attempt fails and retries
        raise RuntimeError("model bookkeeping unavailable") from None
    if crash:
        os._exit(3)
    key = f"{ctx.idempotency_key}:model"
    ctx.effect(key, lambda: sent(key, ctx.fence), check=was_sent)
    if mode == "raise":
        raise RuntimeError("model: handler failure")
    if mode == "permanent":
        raise Permanent("model: permanent failure")
    if mode == "slow":
        # ticks of 0.1 s, a checkpoint every fifth (issue 33): a later attempt resumes after the
        # last one committed, and a runner's shutdown hands the run off at the next one
        ticks = round(float(behaviour.get("seconds", 2.0)) / 0.1)
        for tick in range((ctx.resume or {}).get("ticks", 0), ticks):
            time.sleep(0.1)  # the handler's own work (simulated)
            if tick % 5 == 4:
                ctx.checkpoint({"ticks": tick + 1}, summary=f"{tick + 1} of {ticks} ticks")
            else:
                ctx.heartbeat()  # a stale owner stops here
    note(job, ctx, "returned", mode)


def dynamic_partitions(slot: datetime) -> list[str]:
    keys: list[str] | str = control()["dynamic_partitions"]
    if keys == "raise":  # the user's callable fails: that slot fails, never the loop
        raise RuntimeError("model: the partitions callable failed")
    assert isinstance(keys, list)
    return keys


_start = control()
_jobs = _start["jobs"]
COMMON: dict[str, Any] = {"lease": "3s", "grace": "2s", "max_attempts": 3,
                          "backoff": {"base": "200ms", "factor": 2, "cap": "1s", "jitter": 0.1},
                          "max_catch_up": 3}

app = Runner()

if not _jobs["m-static"].get("absent"):
    app.job("m-static", every=_jobs["m-static"]["every"], partitions=_jobs["m-static"]["partitions"],
            misfire=_jobs["m-static"]["misfire"], **COMMON)(functools.partial(work, "m-static"))
if not _jobs["m-dynamic"].get("absent"):
    app.job("m-dynamic", every=_jobs["m-dynamic"]["every"], partitions=dynamic_partitions,
            misfire=_jobs["m-dynamic"]["misfire"], **COMMON)(functools.partial(work, "m-dynamic"))
if not _jobs["m-single"].get("absent"):
    app.job("m-single", every=_jobs["m-single"]["every"], overlap=_jobs["m-single"]["overlap"],
            misfire=_jobs["m-single"]["misfire"], timeout="3s", **COMMON)(functools.partial(work, "m-single"))
