"""Verification kinds: a backfill verified by its results, not by the count of runs done.

A job declares its kinds with ``verify=[...]`` and how many must pass with ``min_passing``
(2 unless it says otherwise: the notes behind this project ask for at least two)::

    from runner.verification import checksum, count, residual, sample_keys

    @app.job("daily-orders", cron="0 2 * * *", min_passing=3, verify=[
        count("SELECT count(*) FROM report WHERE day >= %(window_start)s AND day < %(window_end)s",
              expect="SELECT count(DISTINCT day) FROM orders WHERE ..."),
        checksum("SELECT sum(total) FROM report WHERE ...",
                 expect="SELECT sum(amount) FROM orders WHERE ..."),
        sample_keys("SELECT id::text FROM orders WHERE ...",
                    present="SELECT order_id::text FROM report WHERE order_id::text = ANY(%(keys)s)"),
        residual("SELECT o.id FROM orders o LEFT JOIN report r ON ... WHERE r.order_id IS NULL AND ..."),
    ])

The four kinds (each query may instead be a Python callable ``(conn, window_start,
window_end, partition)``; ``present`` takes the sample as a fifth argument):

* ``count(query, expect=, tolerance=0)``: the query's one value, an integer, against
  ``expect`` (an integer, or a query or callable giving one); passes within ``tolerance``.
* ``checksum(query, expect=)``: the query's one value against ``expect``'s (a literal, or a
  query or callable giving one): numbers compare as numbers, anything else as text.
* ``sample_keys(keys, present=, size=20)``: ``keys`` gives the keys the output should hold
  (its first column; at most ``MAX_KEYS`` are read); a sample of ``size`` of them, drawn
  with a seed of the plan, partition and kind (so verifying again draws the same sample),
  goes to ``present`` as ``%(keys)s`` (a text[]), which returns those found; passes when
  every sampled key is found. The missing ones are recorded.
* ``residual(query)``: the rows that should have been processed and were not; passes when
  there are none. Up to ``RESIDUAL_LIMIT`` are counted and the first few recorded.

Every query takes the named parameters ``%(window_start)s``, ``%(window_end)s`` and
``%(partition)s`` (and ``%(keys)s`` in ``present``); ``%%`` is a literal ``%``. A kind runs
per partition over the plan's whole window; it passes when it passed in every partition.
The plan passes when at least ``min_passing`` kinds passed; otherwise it failed (or is an
error when no kind failed on the data but some could not run). A kind that raises, times
out or returns the wrong shape has not passed: its error is recorded as its detail, and the
others still run. What is recorded on the plan (``verify_detail``) is structured: the
kinds, each with kind, name, passed, outcome, expected, observed and detail, and the checks
of each kind in each partition.

**SQL is untrusted, and runs as the condition role.** A verification query runs as the
pause conditions do (runner/worker/conditions.py): inside ``runner.verify_query_v1``, a SECURITY
DEFINER function owned by the NOLOGIN role ``runner_condition`` (sql/roles.sql), so it reads
what that role was granted and cannot write whatever the runner's login; in a read-only
transaction that is rolled back, with a statement timeout (the kind's ``timeout``, 60 s
unless it says otherwise); at most a bounded number of rows of at most 4 kB each are
fetched; on a connection of its own (``application_name`` runner-verify-sql), never the
loop's, closed when the verification ends. A query that left an advisory lock behind fails
and the lock is released. Until sql/roles.sql ran (and granted the condition role SELECT
on the tables the checks read), SQL kinds are errors saying so. Python kinds are the job's
own code: they run with the runner's login on a connection of their own
(``runner-verify-python``), in a transaction rolled back afterwards, with the same statement
timeout on what they execute.

**A wall-clock limit for Python kinds.** A statement timeout stops SQL, not Python: a callable
blocked in a socket read, a lock of its own or ``time.sleep`` would hold the verification
forever. Each call of a Python callable (a kind's query, ``expect`` or ``present``, and a
job's single check) therefore runs on a thread of its own, and the verification waits for it
at most the kind's ``timeout`` (60 s unless the kind says otherwise; 10 minutes for a single
check): past it, the kind's outcome is ``error`` with a detail starting ``timeout:``, and the
other kinds still run. Python cannot kill a thread, so the call is *abandoned*: its running
statement is cancelled, the server ends its session once it idles in its transaction (the
transaction's ``idle_in_transaction_session_timeout`` is the same limit, so an abandoned call
never holds a snapshot or a lock for long), the next Python kind gets a new connection, and
the abandoned thread (a daemon) closes its connection if it ever returns; whatever it
returns then is ignored.

Declarations are checked when the job is registered (``check``): a wrong kind, an empty
query, a parameter the kind does not know, a ``min_passing`` that the kinds cannot reach,
two kinds with the same name — each a one-line ``JobDefinitionError``.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar, cast

import psycopg

from runner.sqlfiles import queries

Q = queries("verification")
T = TypeVar("T")

KINDS = ("count", "checksum", "sample_keys", "residual")
DEFAULT_MIN_PASSING = 2
DEFAULT_TIMEOUT = 60.0  # seconds: a kind's statement timeout
MAX_KEYS = 10_000  # keys read from sample_keys' key query
MAX_SAMPLE = 1_000
RESIDUAL_LIMIT = 1_000  # residual rows counted
SHOWN = 5  # rows or keys recorded in a detail
MAX_CHECKS = 200  # checks (kind x partition) recorded on a plan
_POSITIONS = {"window_start": 1, "window_end": 2, "partition": 3, "keys": 4}
_PLACEHOLDER = re.compile(r"%(?:(%)|\((\w*)\)s|)")


class VerificationError(ValueError):
    """A declaration that cannot be checked (the message is one line)."""


@dataclass(frozen=True)
class Source:
    """Where a value comes from: SQL (as declared, and rewritten for verify_query_v1) or a
    Python callable."""

    sql: str | None = None
    positional: str | None = None
    fn: Callable[..., Any] | None = None

    def label(self) -> str:
        if self.fn is not None:
            return f"python {getattr(self.fn, '__qualname__', type(self.fn).__name__)}"
        return "sql"


@dataclass(frozen=True)
class Kind:
    """One declared verification kind (made by count, checksum, sample_keys, residual)."""

    kind: str
    query: Any
    name: str | None = None
    expect: Any = None
    present: Any = None
    size: int = 20
    tolerance: int = 0
    timeout: float = DEFAULT_TIMEOUT
    # set by check(): the sources, ready to run
    source: Source | None = None
    expect_source: Source | None = None
    present_source: Source | None = None

    @property
    def label(self) -> str:
        return self.name or self.kind

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "name": self.label}
        if self.source is not None:
            out["source"] = self.source.label()
        return out


def count(query: str | Callable[..., Any], *, expect: int | str | Callable[..., Any],
          tolerance: int = 0, name: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> Kind:
    """The output's count (the query's one integer) equals ``expect``'s, within ``tolerance``."""
    return Kind("count", query, name=name, expect=expect, tolerance=tolerance, timeout=timeout)


def checksum(query: str | Callable[..., Any], *, expect: Any, name: str | None = None,
             timeout: float = DEFAULT_TIMEOUT) -> Kind:
    """The output's checksum (the query's one value) equals ``expect``'s."""
    return Kind("checksum", query, name=name, expect=expect, timeout=timeout)


def sample_keys(keys: str | Callable[..., Any], *, present: str | Callable[..., Any], size: int = 20,
                name: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> Kind:
    """A sample of ``size`` of the keys that should be in the output is all there."""
    return Kind("sample_keys", keys, name=name, present=present, size=size, timeout=timeout)


def residual(query: str | Callable[..., Any], *, name: str | None = None,
             timeout: float = DEFAULT_TIMEOUT) -> Kind:
    """No row that should have been processed was left unprocessed."""
    return Kind("residual", query, name=name, timeout=timeout)


# -- declaration: checked at registration ---------------------------------------------------------


def positional(sql: str, allowed: Sequence[str]) -> str:
    """``sql`` with ``%(name)s`` as ``$n`` (verify_query_v1's parameters) and ``%%`` as ``%``."""
    def sub(m: re.Match[str]) -> str:
        if m.group(1):
            return "%"
        name = m.group(2)
        if name is None:
            raise VerificationError("a % that is not a %(name)s parameter: write %% for a literal %")
        if name not in allowed:
            raise VerificationError(f"unknown parameter %({name})s (a query may use "
                                    + ", ".join(f"%({a})s" for a in allowed) + ")")
        return f"${_POSITIONS[name]}"

    return _PLACEHOLDER.sub(sub, sql)


def _source(what: str, value: Any, allowed: Sequence[str]) -> Source:
    if isinstance(value, str):
        if not value.strip():
            raise VerificationError(f"{what} is an empty query")
        if "\x00" in value:
            raise VerificationError(f"{what} holds a NUL character")
        try:
            return Source(sql=value, positional=positional(value, allowed))
        except VerificationError as exc:
            raise VerificationError(f"{what}: {exc}") from None
    if callable(value):
        return Source(fn=value)
    raise VerificationError(f"{what} must be a SQL string or a callable, got {type(value).__name__}")


def _checked_kind(k: Kind) -> Kind:
    if k.kind not in KINDS:
        raise VerificationError(f"unknown kind {k.kind!r} (the kinds: {', '.join(KINDS)})")
    what = f"{k.label}"
    if k.name is not None and (not isinstance(k.name, str) or not k.name.strip()):
        raise VerificationError(f"{k.kind}: name must be a non-empty string")
    if isinstance(k.timeout, bool) or not isinstance(k.timeout, int | float) or not k.timeout > 0:
        raise VerificationError(f"{what}: timeout must be a number of seconds above 0, got {k.timeout!r}")
    base = ("window_start", "window_end", "partition")
    source = _source(f"{what}: the query", k.query, base)
    expect_source = present_source = None
    if k.kind == "count":
        if isinstance(k.expect, bool) or (not isinstance(k.expect, int | str) and not callable(k.expect)):
            raise VerificationError(f"{what}: expect must be an integer, a SQL string or a callable, "
                                    f"got {k.expect!r}")
        if not isinstance(k.expect, int):
            expect_source = _source(f"{what}: expect", k.expect, base)
        if isinstance(k.tolerance, bool) or not isinstance(k.tolerance, int) or k.tolerance < 0:
            raise VerificationError(f"{what}: tolerance must be an integer >= 0, got {k.tolerance!r}")
    elif k.kind == "checksum":
        if k.expect is None:
            raise VerificationError(f"{what}: expect is required (a value, a SQL string or a callable)")
        if isinstance(k.expect, str) or callable(k.expect):
            expect_source = _source(f"{what}: expect", k.expect, base)
        elif not isinstance(k.expect, int | float | Decimal) or isinstance(k.expect, bool):
            raise VerificationError(f"{what}: expect must be a number, a SQL string or a callable, "
                                    f"got {type(k.expect).__name__}")
    elif k.kind == "sample_keys":
        if k.present is None:
            raise VerificationError(f"{what}: present is required (a SQL string using %(keys)s, "
                                    "or a callable)")
        present_source = _source(f"{what}: present", k.present, (*base, "keys"))
        if isinstance(k.size, bool) or not isinstance(k.size, int) or not 1 <= k.size <= MAX_SAMPLE:
            raise VerificationError(f"{what}: size must be an integer from 1 to {MAX_SAMPLE}, got {k.size!r}")
    return replace(k, source=source, expect_source=expect_source, present_source=present_source)


def check(verify: Any, min_passing: Any) -> tuple[tuple[Kind, ...], int]:
    """The job's kinds, checked and ready to run, and the number that must pass. Raises
    VerificationError saying what is wrong."""
    kinds_in = [verify] if isinstance(verify, Kind) else verify
    if not isinstance(kinds_in, list | tuple) or not kinds_in:
        raise VerificationError("give a list of kinds: count(...), checksum(...), sample_keys(...), "
                                "residual(...)")
    for k in kinds_in:
        if not isinstance(k, Kind):
            raise VerificationError(f"{k!r} is not a verification kind: use count(...), checksum(...), "
                                    "sample_keys(...) or residual(...) from runner.verification")
    kinds = tuple(_checked_kind(k) for k in kinds_in)
    names = [k.label for k in kinds]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise VerificationError(f"two kinds named {twice[0]!r}: give each a name=")
    need = DEFAULT_MIN_PASSING if min_passing is None else min_passing
    if isinstance(need, bool) or not isinstance(need, int) or need < 1:
        raise VerificationError(f"min_passing must be an integer >= 1, got {min_passing!r}")
    if need > len(kinds):
        default = (" (the default: a backfill is verified by at least two kinds)"
                   if min_passing is None else "")
        raise VerificationError(f"{len(kinds)} kind(s) declared but min_passing is {need}{default}; "
                                "declare more kinds or lower min_passing")
    return kinds, need


# -- evaluation ---------------------------------------------------------------------------------


@dataclass
class Result:
    """One kind in one partition."""

    kind: str
    name: str
    partition: str
    outcome: str  # passed | failed | error
    expected: Any = None
    observed: Any = None
    detail: str | None = None

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "partition": self.partition,
                "outcome": self.outcome, "passed": self.passed, "expected": self.expected,
                "observed": self.observed, "detail": self.detail}


class KindFailed(Exception):
    """A kind could not produce its value (its detail says why)."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Session:
    """Where a verification's queries run: SQL on a connection of its own, through
    runner.verify_query_v1; Python on ``conn`` (the verification's connection)."""

    def __init__(self, conn: psycopg.Connection[Any], start: datetime, end: datetime) -> None:
        self.conn = conn
        self.start, self.end = start, end
        self._apart: psycopg.Connection[Any] | None = None
        self._py: psycopg.Connection[Any] | None = None  # Python kinds' connection

    def close(self) -> None:
        for own in (self._apart, self._py):
            if own is not None:
                own.close()
        self._apart = self._py = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _own(self) -> psycopg.Connection[Any]:
        if self._apart is None or self._apart.closed or self._apart.broken:
            info = self.conn.info
            self._apart = psycopg.connect(info.dsn, password=info.password or None, autocommit=True,
                                          application_name="runner-verify-sql")
            self._apart.execute("SET TIME ZONE 'UTC'")
        return self._apart

    def rows(self, source: Source, partition: str, max_rows: int, timeout: float,
             keys: list[str] | None = None) -> tuple[list[list[Any]], bool]:
        """Up to ``max_rows`` rows of ``source`` (as lists), and whether there were more."""
        if source.fn is not None:
            return self._python_rows(source.fn, partition, max_rows, timeout, keys)
        assert source.positional is not None
        own = self._own()
        try:
            with own.transaction(force_rollback=True):
                own.execute(Q["limits"], {"timeout": f"{int(timeout * 1000)}ms"})
                found = own.execute(Q["verify_query"], {
                    "query": source.positional, "window_start": self.start, "window_end": self.end,
                    "partition": partition, "keys": keys, "max_rows": max_rows}).fetchall()
        except psycopg.Error as exc:
            if own.broken or own.closed:
                self.close()
            raise KindFailed(f"{type(exc).__name__}: {_first_line(exc)}") from None
        held = own.execute(Q["advisory_locks_held"]).fetchone()
        if held and held[0]:
            own.execute(Q["release_locks"])
            raise KindFailed(f"the query took {held[0]} advisory lock(s) (released); a verification "
                              "query must only read")
        out = [json.loads(r[0], parse_float=Decimal) for r in found]
        return out[:max_rows], len(out) > max_rows

    def _python_conn(self) -> psycopg.Connection[Any]:
        if self._py is None or self._py.closed or self._py.broken:
            info = self.conn.info
            self._py = psycopg.connect(info.dsn, password=info.password or None, autocommit=True,
                                       application_name="runner-verify-python")
            self._py.execute("SET TIME ZONE 'UTC'")
        return self._py

    def python(self, work: Callable[[psycopg.Connection[Any]], T], timeout: float, what: str) -> T:
        """``work(conn)``, the job's own Python, within ``timeout`` seconds of wall clock (module
        docstring): on the Python kinds' connection, in a transaction rolled back afterwards,
        with ``timeout`` as its statement and idle-in-transaction timeouts, on a thread of its
        own. Past the limit, the call is abandoned: its statement is cancelled, the server ends
        its session once it idles (the thread closes the connection if it ever returns), the
        next call gets a new connection, and KindFailed says timeout."""
        conn = self._python_conn()
        limit = f"{max(int(timeout * 1000), 1)}ms"
        box: dict[str, Any] = {}
        state = {"done": False, "abandoned": False}
        lock = threading.Lock()
        finished = threading.Event()

        def body() -> None:
            try:
                with conn.transaction(force_rollback=True):
                    conn.execute(Q["time_limit"], {"timeout": limit})
                    box["value"] = work(conn)
            except BaseException as exc:  # handed to the caller
                box["error"] = exc
            finally:
                with lock:
                    state["done"] = True
                    abandoned = state["abandoned"]
                finished.set()
                if abandoned:
                    with contextlib.suppress(Exception):
                        conn.close()

        threading.Thread(target=body, name="runner-verify-python", daemon=True).start()
        if not finished.wait(timeout):
            with lock:
                state["abandoned"] = not state["done"]
            if state["abandoned"]:
                self._py = None
                with contextlib.suppress(Exception):
                    conn.cancel_safe(timeout=1.0)
                raise KindFailed(f"timeout: {what} did not return within {timeout:g}s (its wall-clock "
                                 "limit); abandoned")
        if "error" in box:
            raise box["error"]
        return cast(T, box["value"])

    def _python_rows(self, fn: Callable[..., Any], partition: str, max_rows: int, timeout: float,
                     keys: list[str] | None) -> tuple[list[list[Any]], bool]:
        def work(conn: psycopg.Connection[Any]) -> list[list[Any]]:
            args: list[Any] = [conn, self.start, self.end, partition]
            if keys is not None:
                args.append(keys)
            value = fn(*args)
            if not isinstance(value, Iterable) or isinstance(value, str | bytes):
                return [[value]]
            out: list[list[Any]] = []
            for item in value:
                out.append(list(item) if isinstance(item, list | tuple) else [item])
                if len(out) > max_rows:
                    break
            return out

        out = self.python(work, timeout, _named(fn))
        return out[:max_rows], len(out) > max_rows

    def scalar(self, source: Source, partition: str, timeout: float) -> Any:
        """The one value of ``source`` (one row, one column; a callable returns the value)."""
        fn = source.fn
        if fn is not None:
            return self.python(lambda conn: fn(conn, self.start, self.end, partition), timeout, _named(fn))
        found, more = self.rows(source, partition, 1, timeout)
        if more or len(found) != 1:
            many = "more than one" if more else "no"
            raise KindFailed(f"the query returned {many} row (it must return one)")
        if len(found[0]) != 1:
            raise KindFailed(f"the query returned {len(found[0])} columns (it must return one value)")
        return found[0][0]


def _named(fn: Callable[..., Any]) -> str:
    return f"the Python callable {getattr(fn, '__qualname__', type(fn).__name__)}"


def _integer(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise KindFailed(f"{what} is a boolean, not a count")
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal | float) and value == int(value):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise KindFailed(f"{what} is {value!r}, not an integer")


def _same(a: Any, b: Any) -> bool:
    def number(v: Any) -> Decimal | None:
        if isinstance(v, bool) or not isinstance(v, int | float | Decimal | str):
            return None
        try:
            return Decimal(str(v))
        except InvalidOperation:
            return None

    na, nb = number(a), number(b)
    if na is not None and nb is not None and not (isinstance(a, str) or isinstance(b, str)):
        return na == nb
    return str(a) == str(b)


def _shown(value: Any) -> Any:
    """A value as recorded (JSON): numbers and strings as they are, others as text."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float | Decimal):
        return str(value) if isinstance(value, Decimal) else value
    return str(value)


def _evaluate(s: Session, k: Kind, partition: str, seed: str) -> Result:
    r = Result(k.kind, k.label, partition, "error")
    assert k.source is not None
    if k.kind == "count":
        observed = _integer(s.scalar(k.source, partition, k.timeout), "the count")
        r.observed = observed
        expected = (k.expect if k.expect_source is None
                    else _integer(s.scalar(k.expect_source, partition, k.timeout), "the expected count"))
        r.expected = expected
        ok = abs(observed - expected) <= k.tolerance
        r.outcome = "passed" if ok else "failed"
        r.detail = (f"{observed} counted, {expected} expected"
                    + (f" (tolerance {k.tolerance})" if k.tolerance else ""))
    elif k.kind == "checksum":
        observed = s.scalar(k.source, partition, k.timeout)
        r.observed = _shown(observed)
        expected = k.expect if k.expect_source is None else s.scalar(k.expect_source, partition, k.timeout)
        r.expected = _shown(expected)
        ok = observed is not None and _same(observed, expected)
        r.outcome = "passed" if ok else "failed"
        r.detail = "checksums match" if ok else f"checksum {observed!s}, expected {expected!s}"
    elif k.kind == "sample_keys":
        assert k.present_source is not None
        found, more = s.rows(k.source, partition, MAX_KEYS, k.timeout)
        keys = list(dict.fromkeys(str(row[0]) for row in found if row and row[0] is not None))
        sample = random.Random(seed).sample(keys, min(k.size, len(keys)))
        present_rows, _ = s.rows(k.present_source, partition, len(sample) or 1, k.timeout, keys=sample)
        present = {str(row[0]) for row in present_rows if row}
        missing = [key for key in sample if key not in present]
        r.expected, r.observed = len(sample), len(sample) - len(missing)
        r.outcome = "failed" if missing else "passed"
        of = f"{len(keys)}{'+ (the first ' + str(MAX_KEYS) + ')' if more else ''}"
        r.detail = (f"{len(missing)} of {len(sample)} sampled key(s) missing (of {of}): "
                    + ", ".join(map(repr, missing[:SHOWN])) if missing
                    else f"{len(sample)} sampled key(s) of {of} all present")
    elif k.kind == "residual":
        found, more = s.rows(k.source, partition, RESIDUAL_LIMIT, k.timeout)
        r.expected, r.observed = 0, len(found)
        r.outcome = "failed" if found else "passed"
        if found:
            r.detail = (f"{'at least ' if more else ''}{len(found)} row(s) left unprocessed, e.g. "
                        + "; ".join(json.dumps(row, default=str) for row in found[:SHOWN]))[:1000]
        else:
            r.detail = "no row left unprocessed"
    return r


def run(conn: psycopg.Connection[Any], plan_id: int, kinds: Sequence[Kind], min_passing: int,
        start: datetime, end: datetime, partitions: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """Evaluate every kind in every partition over [start, end); the plan's verify status
    and the structured detail to record. A kind's failure to run is its outcome, never the
    caller's exception (except a lost verification connection)."""
    results: list[Result] = []
    with Session(conn, start, end) as s:
        for k in kinds:
            for partition in partitions:
                try:
                    results.append(_evaluate(s, k, partition, f"{plan_id}/{partition}/{k.label}"))
                except Exception as exc:
                    if conn.closed or conn.broken:
                        raise
                    why = (str(exc) if isinstance(exc, KindFailed)
                           else f"{type(exc).__name__}: {_first_line(exc)}")
                    results.append(Result(k.kind, k.label, partition, "error", detail=why[:1000]))
    summary: list[dict[str, Any]] = []
    for k in kinds:
        mine = [r for r in results if r.name == k.label]
        bad = [r for r in mine if not r.passed]
        outcome = ("passed" if not bad else "failed" if any(r.outcome == "failed" for r in bad) else "error")
        shown = bad[0] if bad else mine[0]
        summary.append({**k.describe(), "passed": not bad, "outcome": outcome, "partitions": len(mine),
                        "partitions_not_passing": [r.partition for r in bad][:SHOWN],
                        "expected": shown.expected, "observed": shown.observed, "detail": shown.detail})
    passing = sum(1 for s_ in summary if s_["passed"])
    if passing >= min_passing:
        status = "passed"
    else:
        status = "failed" if any(s_["outcome"] == "failed" for s_ in summary) else "error"
    ordered = sorted(results, key=lambda r: r.passed)  # the ones not passing first
    detail: dict[str, Any] = {"min_passing": min_passing, "passing": passing, "kinds": summary,
              "checks": [r.as_dict() for r in ordered[:MAX_CHECKS]], "checks_total": len(results)}
    return status, detail
