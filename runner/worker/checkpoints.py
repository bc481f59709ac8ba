"""Fenced checkpoints of long jobs (issue 33): ``ctx.checkpoint(state)``, ``ctx.resume``,
``ctx.stopping``, and the shutdown handoff.

A long handler (a settlement over 10,000 tenants' rows, an hour of work) used to have two
outcomes when its process was stopped or killed: finish within ``--grace``, or lose the whole
attempt, whose ``ctx.db`` work rolled back, and start the window again. With checkpoints it
loses at most the work since its last checkpoint.

**One transaction.** ``ctx.checkpoint(state)`` runs ``runner.checkpoint_v1`` on the
handler's ``ctx.db`` connection, in the transaction that holds everything the handler wrote
through ``ctx.db`` since its last checkpoint, then commits it. The function's UPDATE takes
the run's row lock and compares the attempt's fence in the same statement: the writes and
the state commit together only while this attempt owns the run. After the commit ``ctx.db``
goes on in a new transaction (psycopg begins one at the next statement); the run's final
success still commits with the work after the last checkpoint, as before. A stale attempt's
checkpoint (taken over: a newer fence exists) matches no row: the transaction is rolled back
and ``LostOwnership`` is raised, so the handler stops; its outcome is refused as every stale
outcome is (the attempt is closed ``stale``). Work done outside ``ctx.db`` (an HTTP call, a
write on another connection) is not part of that transaction: use ``ctx.effect`` for it.

**The state** is any JSON value (``json.dumps`` of it) of at most ``MAX_BYTES`` (64 KiB) of
UTF-8 text: a cursor, a last key, counters; not the data itself. A larger state, or one
``json`` cannot encode, raises ``CheckpointError`` (one line) before anything is written;
the handler's transaction is left as it was. It is stored on the run (``runner.job_runs.
checkpoint``, with ``checkpoint_at``, ``checkpoint_fence``, ``checkpoint_bytes``,
``checkpoint_summary`` and the run's count ``checkpoints``). ``summary`` (default: the start
of the state's JSON) is what the run page and ``runner runs --show`` print, 200 characters.

**Resume.** ``ctx.resume`` is the run's last committed state, ``None`` on the run's first
attempt (read without a query: no earlier attempt could have checkpointed) or when none was
taken. Retries, takeovers after a crash and handoffs resume. An operator's re-queue starts
from scratch unless the operator asks to resume (``runner rerun --resume``, the registry's
``resume`` parameter, so the console has it too): ``runner.rerun_v2`` clears the state (the
count stays) and the impact shown first says which of the two the next attempt does. A
backfill's re-queued runs (``--force`` of succeeded ones too) start from scratch the same
way unless ``runner backfill --resume`` (``runner.create_backfill_v2``; the plan's ``resume``
column remembers it), and its impact lists each run's start.

**Shutdown handoff.** When the runner stops (SIGTERM), every running attempt's
``ctx.stopping`` becomes true. Its next ``ctx.checkpoint`` commits and then raises
``HandedOff``; its next ``ctx.heartbeat`` raises ``HandedOff`` too once the attempt has
committed a checkpoint (a handler that never checkpoints keeps the old rule: finish within
the grace or be released). The handler should let it propagate (it may also look at
``ctx.stopping`` and return early itself, but then the run succeeds). The attempt is
recorded ``handed_off``: the run goes back to pending at once, uncounted against
``max_attempts`` (like a release), the completer unlocks it, and another runner claims it at
its next poll and resumes from the checkpoint, without waiting for the grace or a lease.
Work since that checkpoint (none, when the handoff came from ``checkpoint``) rolls back.

**Cost.** One checkpoint is one function call and one commit on the handler's connection
(the commit waits for the WAL flush): ``scripts/bench/checkpoint_cost.py`` measures it;
docs/how-to/long-jobs.md has the figure.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from runner.sqlfiles import queries

MAX_BYTES = 65536  # a checkpoint state's JSON text, at most (bytes of UTF-8)
SUMMARY_CHARS = 200

Q = queries("ledger")


class CheckpointError(ValueError):
    """A checkpoint state that cannot be stored: not JSON-encodable, or over MAX_BYTES.
    Nothing was written; the handler's transaction is as it was."""


class HandedOff(Exception):  # a state the handler is told about, not an error
    """The runner is shutting down and this attempt's work up to its last checkpoint is
    committed: the handler stops, and another runner resumes the run from that checkpoint.
    Raised by ``ctx.checkpoint`` (after its commit) and ``ctx.heartbeat`` once
    ``ctx.stopping`` is true."""


def encode(state: Any, summary: str | None) -> tuple[str, str]:
    """The state's JSON text and the summary stored with it; CheckpointError otherwise."""
    try:
        text = json.dumps(state, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"a checkpoint state must be JSON: {exc}") from None
    size = len(text.encode("utf-8"))
    if size > MAX_BYTES:
        raise CheckpointError(f"a checkpoint state of {size} bytes of JSON is over the limit of "
                              f"{MAX_BYTES} bytes: store a cursor or a key, not the data")
    if "\x00" in text:
        raise CheckpointError("a checkpoint state must not contain NUL characters (\\u0000)")
    if summary is None:
        summary = text
    elif not isinstance(summary, str):
        raise CheckpointError("a checkpoint summary must be a string")
    summary = " ".join(summary.replace("\x00", "").split())
    if len(summary) > SUMMARY_CHARS:
        summary = summary[: SUMMARY_CHARS - 3] + "..."
    return text, summary


def commit_checkpoint(conn: psycopg.Connection[Any], run_id: int, fence: int, text: str,
                      summary: str) -> int | None:
    """Store the state in the connection's transaction and commit it: the run's checkpoint
    count, or None (rolled back) when the attempt no longer holds the fence."""
    row = conn.execute(Q["checkpoint"], {"run_id": run_id, "fence": fence, "state": text,
                                         "summary": summary, "max_bytes": MAX_BYTES}).fetchone()
    if row is None:
        conn.rollback()
        return None
    conn.commit()
    return int(row[0])


async def commit_checkpoint_async(conn: psycopg.AsyncConnection[Any], run_id: int, fence: int,
                                  text: str, summary: str) -> int | None:
    """``commit_checkpoint`` on an AsyncConnection."""
    cur = await conn.execute(Q["checkpoint"], {"run_id": run_id, "fence": fence, "state": text,
                                               "summary": summary, "max_bytes": MAX_BYTES})
    row = await cur.fetchone()
    if row is None:
        await conn.rollback()
        return None
    await conn.commit()
    return int(row[0])


def read_resume(conn: psycopg.Connection[Any], run_id: int) -> Any:
    row = conn.execute(Q["run_checkpoint"], {"run_id": run_id}).fetchone()
    return None if row is None else row[0]


async def read_resume_async(conn: psycopg.AsyncConnection[Any], run_id: int) -> Any:
    cur = await conn.execute(Q["run_checkpoint"], {"run_id": run_id})
    row = await cur.fetchone()
    return None if row is None else row[0]
