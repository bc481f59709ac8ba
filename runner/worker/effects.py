"""The effect log: side effects outside the database, recorded per key in ``runner.effects``.

The ledger cannot make an email or a payment idempotent; a handler can, with this::

    receipt = ctx.effect(f"{ctx.idempotency_key}:invoice-mail",
                         lambda: mailer.send(invoice, idempotency_key=ctx.idempotency_key),
                         check=lambda key: mailer.was_sent(invoice.id),
                         stage="delivered",
                         unknown_on=(TimeoutError, mailer.Timeout))

Each key (global: the same key in any run, attempt or process is the same effect) moves
through ``planned -> sent -> confirmed | failed | unknown``:

* ``confirmed``: ``send`` is never called again for the key; ``ctx.effect`` returns the
  result stored when it was confirmed (``None`` if it was confirmed by a check, or if the
  result was not JSON-able or larger than ``MAX_RESULT_BYTES``; JSON turns tuples into lists).
* ``failed``: ``send`` raised an exception not in ``unknown_on``, taken to mean "not
  delivered". The exception propagates; the next call sends again.
* ``unknown`` (``send`` raised one of ``unknown_on``, by default a ``TimeoutError``) and
  ``sent`` left behind (the sender died, or lost the database before recording the outcome):
  delivery is unknown. Nothing is sent again until ``check(key)`` answers: ``True``
  (delivered) confirms it without sending, ``False`` (not delivered) sends again. Without a
  check, or when the check answers anything but ``True`` or ``False``, ``ctx.effect`` raises
  ``UnresolvedEffect`` and the run goes to ``dead`` for a human. A check that raises leaves
  the effect unresolved and its exception propagates: the run retries (resolving again) until
  it is out of attempts; raise ``Permanent`` from the check to send it to ``dead`` at once.
* ``planned``: ``ctx.effect(key, stage=...)`` without ``send`` announces an effect (for
  example every stage of a multi-stage completion, up front) so that ``runner.run_stages``
  shows the stages not yet reached.

Before ``send`` is called, the key is marked ``sent`` (``send_count`` + 1) by one autocommit
statement that is fence-checked against the run: a stale owner (its run taken over or
finished) gets ``LostOwnership`` and ``send`` is not called; an attempt the runner gave up on
(timeout, shutdown) gets ``AttemptTimedOut``, as from ``ctx.heartbeat()``. That statement holds the run's
row ``FOR SHARE`` for its instant, so it is ordered with any takeover: the next owner either
sees the ``sent`` mark (and must resolve it) or the stale owner sees the new fence. Outcomes
are recorded in their own autocommit statements too, never in ``ctx.db``'s transaction: the
outside world changed whether or not the handler's transaction commits.

What is guaranteed, exactly:

* A key that is ``confirmed`` is never sent again by the runner, by any run or process,
  also after retention pruned the run that confirmed it: ``runner.prune_v1`` keeps the key in
  ``runner.effect_keys`` (key, job, confirmed_at; not its result, so ``ctx.effect`` returns
  ``None`` for it), ``get_effect`` reads it as confirmed, and ``mark_sent`` refuses it.
* A key is never sent again after a send whose fate is unknown (``sent`` or ``unknown``)
  unless the handler's check said it was not delivered.
* Two callers racing on one key (compare-and-set on the row) never both send from the same
  state; ``send_count`` counts every send, so a repeat is visible.

What is not:

* An effect is exactly-once per key only if the outside API honours an idempotency key
  (pass ``ctx.idempotency_key`` or the effect key), or if the check is truthful and sees
  sends still in flight. A stale owner whose ``sent`` mark landed before a takeover may still
  be sending when the next owner checks; a check that answers ``False`` then can repeat it.
* Without the effect log, or with ``unknown_on`` too narrow (a timeout classed as
  ``failed``), effects are at-least-once, like handler execution itself.
* The runner records what ``send`` and ``check`` report; it cannot see the outside world.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from psycopg_pool import ConnectionPool

from runner.errors import AttemptTimedOut, LostOwnership, UnresolvedEffect, error_text
from runner.sqlfiles import queries

log = logging.getLogger("runner.effects")

Q = queries("effects")

MAX_KEY_BYTES = 2000  # the unique index's entries must stay well below a btree page's third
MAX_RESULT_BYTES = 256 * 1024  # larger results are not stored (the effect is still confirmed)
_READS = 8  # reads of a key whose row keeps changing under us before giving up

Send = Callable[[], Any]
Check = Callable[[str], bool]
ExceptionTypes = type[BaseException] | tuple[type[BaseException], ...]


class JobContext(Protocol):
    """What the effect log needs of a handler's context (runner.context.JobContext): which
    attempt of which run records the effect, and where its short writes go."""

    _control: ConnectionPool[Any]
    _cancelled: str | None

    @property
    def run_id(self) -> int: ...
    @property
    def job_name(self) -> str: ...
    @property
    def partition(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def fence(self) -> int: ...


@dataclass(frozen=True)
class Effect:
    """One row of runner.effects, as far as deciding what to do next needs it."""

    key: str
    status: str
    send_count: int
    result: Any
    run_id: int | None
    attempt: int
    fence: int
    stage: str | None


class EffectContention(Exception):
    """A key's row kept changing between reads (other senders racing on it); nothing was
    sent by this call. Retrying the attempt is safe."""


def lookup(conn: psycopg.Connection[Any], key: str) -> Effect | None:
    """The effect recorded under ``key``, or None."""
    row = conn.execute(Q["get_effect"], {"effect_key": key}).fetchone()
    return None if row is None else Effect(key, *row)


def run_effect(
    ctx: JobContext,
    key: str,
    send: Send | None = None,
    *,
    check: Check | None = None,
    stage: str | None = None,
    unknown_on: ExceptionTypes = (TimeoutError,),
) -> Any:
    """``ctx.effect(key, send, check=..., stage=..., unknown_on=...)``: see the module
    docstring. Returns ``send()``'s result, or the stored one when the key was already
    confirmed (``None`` when confirmed by a check). Without ``send``, plans the effect."""
    _valid_text("effect key", key, MAX_KEY_BYTES)
    if stage is not None:
        _valid_text("stage", stage, MAX_KEY_BYTES)
    if send is None:
        _plan(ctx, key, stage)
        return None
    for _ in range(_READS):
        with ctx._control.connection() as conn:
            seen = lookup(conn, key)
        if seen is not None and seen.status == "confirmed":
            log.debug("effect %r already confirmed: not sent again", key)
            return seen.result
        if seen is not None and seen.status in ("sent", "unknown"):
            if not _delivered(seen, check):
                sent, result = _send(ctx, key, send, stage, seen, unknown_on)
                if sent:
                    return result
            elif _confirm_checked(ctx, seen):
                log.info("effect %r (%s after %d send(s)) confirmed by the handler's check",
                         key, seen.status, seen.send_count)
                return None
            continue  # the row changed under us: read it again
        sent, result = _send(ctx, key, send, stage, seen, unknown_on)
        if sent:
            return result
    raise EffectContention(f"effect {key!r}: its row kept changing under {_READS} reads; nothing sent")


def _plan(ctx: JobContext, key: str, stage: str | None) -> None:
    _not_given_up(ctx)
    with ctx._control.connection() as conn:
        row = conn.execute(Q["plan_effect"], {**_identity(ctx, key), "stage": stage, "now": None}).fetchone()
    assert row is not None
    if not row[0]:
        raise _lost(ctx, key)


def _delivered(seen: Effect, check: Check | None) -> bool:
    """The handler's verdict on a send whose fate is unknown: True delivered, False not."""
    if check is None:
        raise UnresolvedEffect(
            f"effect {seen.key!r} is {seen.status} after {seen.send_count} send(s) (last by run "
            f"{seen.run_id}, attempt {seen.attempt}, fence {seen.fence}) and the handler gave no "
            "check to resolve it: not sent again"
        )
    verdict = check(seen.key)
    if verdict is True or verdict is False:
        return verdict
    raise UnresolvedEffect(
        f"effect {seen.key!r} is {seen.status}: its check returned {type(verdict).__name__} "
        "instead of True or False: not sent again"
    )


def _send(
    ctx: JobContext, key: str, send: Send, stage: str | None, seen: Effect | None,
    unknown_on: ExceptionTypes,
) -> tuple[bool, Any]:
    """Mark the key sent (fence-checked, compare-and-set on ``seen``), call ``send`` and
    record its outcome. Returns (False, None) without sending when the row changed."""
    params = {
        **_identity(ctx, key),
        "stage": stage,
        "seen_status": seen.status if seen else None,
        "seen_send_count": seen.send_count if seen else None,
        "now": None,
    }
    _not_given_up(ctx)
    with ctx._control.connection() as conn:
        row = conn.execute(Q["mark_sent"], params).fetchone()
    assert row is not None
    owned, send_count = row
    if not owned:
        raise _lost(ctx, key)
    if send_count is None:
        return False, None
    try:
        result = send()
    except BaseException as exc:
        # An exception that is not an Exception (KeyboardInterrupt, SystemExit) says nothing
        # about delivery: unknown.
        unknown = isinstance(exc, unknown_on) or not isinstance(exc, Exception)
        try:
            _record(ctx, key, send_count, "unknown" if unknown else "failed", None, _error(exc))
        except Exception as db_exc:
            log.warning("effect %r: could not record the failed send (%s); it stays 'sent' "
                        "and must be resolved by a check", key, db_exc)
        raise
    _record(ctx, key, send_count, "confirmed", _result_json(result), None)
    return True, result


def _record(ctx: JobContext, key: str, send_count: int, status: str, result: str | None,
            error: str | None) -> None:
    params = {"effect_key": key, "send_count": send_count, "status": status, "result": result,
              "error": error, "now": None}
    with ctx._control.connection() as conn:
        landed = conn.execute(Q["record_outcome"], params).fetchone() is not None
    if not landed:
        log.warning("effect %r: send %d ended %s, but a newer send of the key exists; "
                    "its outcome is not recorded", key, send_count, status)


def _confirm_checked(ctx: JobContext, seen: Effect) -> bool:
    params = {**_identity(ctx, seen.key), "seen_status": seen.status,
              "seen_send_count": seen.send_count, "now": None}
    with ctx._control.connection() as conn:
        return conn.execute(Q["confirm_checked"], params).fetchone() is not None


def _identity(ctx: JobContext, key: str) -> dict[str, Any]:
    return {"effect_key": key, "run_id": ctx.run_id, "job_name": ctx.job_name,
            "partition_key": ctx.partition, "attempt": ctx.attempt, "fence": ctx.fence}


def _not_given_up(ctx: JobContext) -> None:
    """An attempt the runner gave up on (timeout, shutdown) starts nothing new, even in the
    instant before its outcome moves the run on and the fence check would refuse it."""
    if ctx._cancelled:
        raise AttemptTimedOut(ctx._cancelled)


def _lost(ctx: JobContext, key: str) -> LostOwnership:
    return LostOwnership(
        f"run {ctx.run_id} is no longer owned by attempt {ctx.attempt} (fence {ctx.fence}): "
        f"effect {key!r} not sent"
    )


def _error(exc: BaseException) -> str:

    error_class, message = error_text(exc)
    return f"{error_class}: {message}"


def _result_json(value: Any) -> str | None:
    """``value`` as JSON text that jsonb accepts, or None when it cannot be stored."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        size = len(text.encode("utf-8"))  # lone surrogates fail here
    except (TypeError, ValueError, RecursionError):
        return None
    if size > MAX_RESULT_BYTES or "\\u0000" in text:  # jsonb refuses NUL characters
        return None
    return text


def _valid_text(what: str, value: object, max_bytes: int) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    if "\x00" in value:
        raise ValueError(f"{what} {value!r} contains a NUL character, which PostgreSQL cannot store")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{what} {value!r} is not valid Unicode (a lone surrogate)") from None
    if size > max_bytes:
        raise ValueError(f"{what} is {size} bytes in UTF-8; at most {max_bytes}")
