"""The application the fault suite (scripts/fault_suite.py) runs under faults.

Two jobs due every second, each fanned out over ``FAULT_PARTITIONS`` partitions:

* ``fault-ledger`` writes two rows per run to ``fault.sink`` through ``ctx.db``: part 1, then
  a checkpoint (``ctx.checkpoint``: part 1 commits, fence-checked), its work, then part 2
  (committed with the run's success, fence-checked); an attempt that resumes from the
  checkpoint (``ctx.resume``) writes only part 2. It sends one fake external message;
* ``fault-notify`` only sends the message: it never touches ``ctx.db``, so its success is
  recorded by the runner's batched completer rather than inside the handler's transaction.

Each handler first notes that it ran (``fault.executions``, autocommit: executions beyond one
per run are counted, not hidden), works for a seeded random time, then sends through
``ctx.effect``. The fake external API records every send in ``fault.sends`` on its own
autocommit connection (so duplicate *sends* are countable whatever the ledger says) and
sometimes times out *after* recording it: the effect is then ``unknown``, the handler fails,
and the next attempt's ``check`` looks the key up in ``fault.sends`` (recording its verdict in
``fault.checks``) instead of sending again.

Random choices (work time, timeouts) are drawn from ``FAULT_SEED`` and the run's
idempotency key and attempt, so a given attempt makes the same choices in every process.
Configuration is by environment: ``RUNNER_DATABASE_URL``, ``FAULT_SEED``,
``FAULT_PARTITIONS``, ``FAULT_MAX_WORK`` (seconds), ``FAULT_TIMEOUT_RATE`` and
``FAULT_ASYNC`` (``1``: both handlers are ``async def``, doing the same work in async form on
the runner's event loop: ``await asyncio.sleep``, ``await ctx.heartbeat()``, ``ctx.db`` an
AsyncConnection, ``await ctx.effect(...)``).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import threading
import time
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from runner import AsyncJobContext, JobContext, Runner

SEED = int(os.environ.get("FAULT_SEED", "0"))
PARTITIONS = [f"p{i}" for i in range(int(os.environ.get("FAULT_PARTITIONS", "3")))]
MAX_WORK = float(os.environ.get("FAULT_MAX_WORK", "1.5"))
TIMEOUT_RATE = float(os.environ.get("FAULT_TIMEOUT_RATE", "0.1"))
ASYNC = os.environ.get("FAULT_ASYNC") == "1"
LEASE = "3s"  # the suite stops processes for longer than this
JOBS = ("fault-ledger", "fault-notify")
OPTIONS: dict[str, Any] = {
    "every": "1s", "partitions": PARTITIONS, "lease": LEASE, "max_attempts": 50,
    "backoff": {"base": "500ms", "factor": 1.5, "cap": "3s", "jitter": 0.2},
}

app = Runner()

_pool: ConnectionPool[Any] | None = None
_pool_lock = threading.Lock()


def outside() -> ConnectionPool[Any]:
    """Connections of the fake outside world: not the runner's (the suite's connection
    kills spare them), autocommit."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ConnectionPool(os.environ["RUNNER_DATABASE_URL"], min_size=0, max_size=4,
                                   kwargs={"autocommit": True, "application_name": "fault-app"},
                                   open=True)
        return _pool


def draw(ctx: JobContext | AsyncJobContext) -> random.Random:
    """The seeded random choices of this attempt."""
    digest = hashlib.sha256(f"{SEED}:{ctx.idempotency_key}:{ctx.attempt}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def noted(ctx: JobContext | AsyncJobContext) -> None:
    with outside().connection() as conn:
        conn.execute("INSERT INTO fault.executions (run_id, attempt, fence, pid) VALUES (%s, %s, %s, %s)",
                     (ctx.run_id, ctx.attempt, ctx.fence, os.getpid()))


def work_time(rng: random.Random) -> float:
    # mostly short, sometimes longer than the lease (the loop's beats keep it alive)
    return rng.uniform(0, MAX_WORK) if rng.random() < 0.95 else rng.uniform(MAX_WORK, 2 * MAX_WORK + 1)


def work(ctx: JobContext, rng: random.Random) -> None:
    noted(ctx)
    seconds = work_time(rng)
    time.sleep(seconds / 2)  # the handler's own work (simulated)
    ctx.heartbeat()  # a stale owner stops here
    time.sleep(seconds / 2)


async def work_async(ctx: AsyncJobContext, rng: random.Random) -> None:
    await asyncio.to_thread(noted, ctx)
    seconds = work_time(rng)
    await asyncio.sleep(seconds / 2)
    await ctx.heartbeat()
    await asyncio.sleep(seconds / 2)


def notify(ctx: JobContext, rng: random.Random) -> None:
    key, send, check = message(ctx, rng)
    # a lost connection while sending says nothing about delivery either: unknown
    ctx.effect(key, send, check=check, unknown_on=(TimeoutError, psycopg.Error))


async def notify_async(ctx: AsyncJobContext, rng: random.Random) -> None:
    key, send, check = message(ctx, rng)
    await ctx.effect(key, send, check=check, unknown_on=(TimeoutError, psycopg.Error))


def message(ctx: JobContext | AsyncJobContext, rng: random.Random) -> tuple[str, Any, Any]:
    """The effect key, send and check of the fake external message of this attempt."""
    key = f"{ctx.idempotency_key}:notify"
    times_out = rng.random() < TIMEOUT_RATE

    def send() -> str:
        with outside().connection() as conn:
            conn.execute("INSERT INTO fault.sends (effect_key, run_id, attempt, fence, pid)"
                         " VALUES (%s, %s, %s, %s, %s)",
                         (key, ctx.run_id, ctx.attempt, ctx.fence, os.getpid()))
        if times_out:
            raise TimeoutError("the fake API timed out after it received the message")
        return "delivered"

    def check(effect_key: str) -> bool:
        with outside().connection() as conn:
            row = conn.execute("SELECT count(*) FROM fault.sends WHERE effect_key = %s",
                               (effect_key,)).fetchone()
            delivered = row is not None and row[0] > 0
            conn.execute("INSERT INTO fault.checks (effect_key, run_id, attempt, delivered)"
                         " VALUES (%s, %s, %s, %s)", (effect_key, ctx.run_id, ctx.attempt, delivered))
        return delivered

    return key, send, check


SINK = ("INSERT INTO fault.sink (run_id, job_name, slot, partition_key, fence, attempt, part)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)")


def sink_row(ctx: JobContext | AsyncJobContext, part: int) -> tuple[Any, ...]:
    return (ctx.run_id, ctx.job_name, ctx.slot, ctx.partition, ctx.fence, ctx.attempt, part)


def ledger_job(ctx: JobContext) -> None:
    rng = draw(ctx)
    if ctx.resume is None:  # part 1 and its checkpoint (an attempt after it resumes past them)
        ctx.db.execute(SINK, sink_row(ctx, 1))
        ctx.checkpoint({"part": 1})
    work(ctx, rng)
    ctx.db.execute(SINK, sink_row(ctx, 2))
    notify(ctx, rng)


def notify_job(ctx: JobContext) -> None:
    rng = draw(ctx)
    work(ctx, rng)
    notify(ctx, rng)


async def ledger_job_async(ctx: AsyncJobContext) -> None:
    rng = draw(ctx)
    if ctx.resume is None:
        await ctx.db.execute(SINK, sink_row(ctx, 1))
        await ctx.checkpoint({"part": 1})
    await work_async(ctx, rng)
    await ctx.db.execute(SINK, sink_row(ctx, 2))
    await notify_async(ctx, rng)


async def notify_job_async(ctx: AsyncJobContext) -> None:
    rng = draw(ctx)
    await work_async(ctx, rng)
    await notify_async(ctx, rng)


if ASYNC:
    app.job("fault-ledger", **OPTIONS)(ledger_job_async)
    app.job("fault-notify", **OPTIONS)(notify_job_async)
else:
    app.job("fault-ledger", **OPTIONS)(ledger_job)
    app.job("fault-notify", **OPTIONS)(notify_job)
