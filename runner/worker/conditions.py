"""Backfill pause conditions: an operator's SQL, evaluated off the loop, as the condition role.

A plan's ``pause_when`` (``runner backfill --pause-when``) is a query returning one boolean;
the plan pauses when it returns true, or when it fails (its error is the pause reason).
The operator who writes it is not the runner: the condition is untrusted text that every
runner serving the job will run, so it runs where it can do no harm.

* **Not on the lock session, not on the loop thread.** Each ``runner start`` process runs
  ``pass_of`` on a thread with a connection of its own (``application_name`` runner-condition).
  Advisory locks a condition takes (session locks survive a rollback) are counted, then
  released, and the session is reset (``DISCARD ALL``) after every evaluation; they never
  touch the locks the process holds for its runs. Because of that reset the condition
  session never uses server-side prepared statements (psycopg's ``prepare_threshold=None``):
  psycopg would otherwise prepare a statement run five times and, after a ``DISCARD ALL``
  it does not see as dropping them, fail every later pass with ``prepared statement
  "_pg3_N" does not exist``. The loop only sees the outcome: a paused
  plan, which its backfill lane stops claiming.
* **As the condition role.** The condition runs inside ``runner.pause_condition_v1``, a
  SECURITY DEFINER function that sql/roles.sql gives to the NOLOGIN role
  ``runner_condition``: SELECT on the runner schema, whatever the DBA grants it on the
  application's tables, nothing else. Inside it current_user is that role whatever the
  runner's login (a superuser's included) and PostgreSQL refuses SET ROLE / SET SESSION
  AUTHORIZATION, so the condition cannot write, take a table lock stronger than a read's,
  end sessions, read server files or run programs. Until sql/roles.sql ran, the function is
  owned by the schema owner (after `runner db upgrade`) and refuses to run: a plan with a
  condition then pauses, with that refusal as its reason. There is no other path: a
  runner never evaluates a condition with its own privileges.
* **One statement, one boolean, bounded.** The condition is first parsed and described
  without being run (exactly one statement, returning exactly one column, a boolean); then
  run in a read-only transaction that is always rolled back, with a statement timeout of
  ``STATEMENT_TIMEOUT``; the function fetches at most two rows (exactly one is accepted) and
  refuses a row over 1 kB; the runner receives one boolean. The whole evaluation of a plan
  is cut at ``EVALUATION_TIMEOUT`` seconds (the statement is cancelled from another thread).
* **One runner at a time per plan.** An evaluation runs in a transaction holding the plan's
  condition lock (the two-int advisory key ``(lock namespace, -plan id)``, taken with try;
  see sql/queries/conditions.sql), re-checks under it that the condition is still due, and
  records the check (``pause_checked_at``) in the same transaction, so each condition runs
  at most once every ``pause_every`` seconds across all runners: the plan's own pace
  (``runner backfill --pause-every``, ``MIN_EVERY`` to ``MAX_EVERY``; ``EVERY`` when not
  given, and for the plans of older clients and misfire tiers). A runner looks for due
  conditions every ``POLL`` seconds: a running fleet evaluates a condition again within
  about ``pause_every + POLL`` seconds of its last check.

A condition that took advisory locks fails (its locks are released; the plan pauses saying
so): a key it held even for a second may have blocked a claim or a takeover. PostgreSQL
grants the advisory lock functions to PUBLIC and cannot withhold them from the condition
role alone, so the locks are looked for where they are visible (issue 28, point 3), three
times:

* **While its statement runs** (``Watcher``): from a connection of its own
  (``runner-condition-watch``, the runner's login, opened at a pass's first SQL evaluation
  and closed at its end; never one the claims need), the runner lists the condition
  session's advisory locks (pg_locks, by its backend pid) just before the statement, then
  every ``WATCH_INTERVAL`` seconds on a thread until the statement returns, one short query
  each; a lock seen that was not there before (the plan's condition lock is) fails the
  evaluation: ``the condition took N advisory lock(s), held during its statement``. This
  sees a session lock the condition releases (``pg_advisory_unlock``) before its statement
  ends, which no look afterwards can. What it can miss: a lock taken and released between
  two looks (held under ``WATCH_INTERVAL``); a claim that met that key meanwhile is
  released uncounted (below). A watch that breaks off (its connection lost, a look
  unanswered) records no outcome: the duty fails and evaluates the condition again at its
  next pass.
* **When the statement ends**: ``runner.pause_condition_v1`` lists its session's advisory
  locks, transaction-level ones included (they would go with the rollback, unseen), and
  fails the condition if it holds any new one.
* **After the function**: the session-level ones are counted again (``advisory_locks_held``).

While a condition runs, its session is a runner's condition session
(``runner.condition_sessions_v1``: this connection's name, the runner's login, a young
transaction): a run whose claim meets a key it holds is released uncounted (the executor's
``_key_held``), and the takeover duty does not end it as a squatter.

**On a hot standby** (``runner start --condition-url``, ``RUNNER_CONDITION_URL``). Advisory
locks on a standby are the standby's own: a condition run there cannot touch a run key of
the ledger, whatever it locks. With that URL, each pass that has a condition due opens a
condition session there (``open_standby``: it must be in recovery and show the ledger's
system identifier and database oid, else the pass fails saying so, and ``runner start``
refuses the URL in one line), and the condition's statement runs on it, through the same
``runner.pause_condition_v1``, as the condition role, read-only, unwatched (its end-of-
statement check still fails a condition holding a lock there); the condition lock, the
re-check and the record (``pause_checked_at``, a pause) stay on the ledger's condition
session, and the timeout cancels both. The condition reads the standby's data, as of its
replay; a statement cancelled for a conflict with recovery pauses the plan like any
failing condition; a standby that cannot be reached fails the pass (logged, counted,
retried), and the plan's condition is not evaluated meanwhile. The creation checks
(``evaluate_apart``: ``runner backfill`` and a misfire tier's plan) run once on the ledger,
watched.

**Prometheus.** A condition may instead be a Prometheus instant query: ``pause_when`` then
reads ``prometheus:`` followed by the query (``runner backfill --pause-when-prometheus Q``;
no SQL starts so). It is sent as an HTTP GET to ``<Prometheus URL>/api/v1/query`` — the URL
is the runner's setting (``RUNNER_PROMETHEUS_URL`` / ``--prometheus-url``), never the
plan's, so a plan cannot point a runner at another address — within the evaluation's time
and at most ``MAX_PROMETHEUS_BYTES`` of response. It is true when the result has a sample
whose value is not zero (a vector: any of its samples; a scalar: its value); an empty
vector is false; an error (no URL configured, unreachable, a query error, another result
type, a response too large) pauses the plan like a failing SQL condition. It is evaluated
under the same plan lock and at the same pace.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.pq import ExecStatus

from runner.errors import error_text
from runner.settings import redact
from runner.sqlfiles import queries
from runner.store import ledger

log = logging.getLogger("runner.conditions")
Q = queries("conditions")
BQ = queries("backfill")  # the lane's read-only limits and its pause statements: one way to pause a plan

STATEMENT_TIMEOUT = "1s"  # the condition's statement timeout
EVALUATION_TIMEOUT = 3.0  # seconds: one plan's whole evaluation (lock, describe, run, record)
EVERY = 5  # seconds between two evaluations of a plan's condition (across all runners), by default
MIN_EVERY, MAX_EVERY = 1, 3600  # a plan's pause_every (the table's constraint: 0012_pauseevery)
POLL = 1.0  # seconds between two looks for due conditions
WATCH_INTERVAL = 0.05  # seconds between two looks at a running condition's advisory locks
WATCH_JOIN = 2.0  # seconds the watch's last look may take once the statement is done
BOOL_OID = 16
PROMETHEUS = "prometheus:"  # pause_when holding a Prometheus instant query
MAX_PROMETHEUS_BYTES = 256 * 1024


@dataclass(frozen=True)
class Evaluation:
    """A condition's outcome: its value, or the error that stands for it."""

    value: bool | None
    error: str | None = None

    @property
    def pause_reason(self) -> str | None:
        if self.error is not None:
            return f"pause_when failed: {self.error}"
        return "pause_when returned true" if self.value else None


def _first_line(exc: BaseException) -> str:
    text = error_text(exc)[1].strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _shape_error(conn: psycopg.Connection[Any], condition: str) -> str | None:
    """Parse and describe ``condition`` without running it: why it is not one statement
    returning one boolean column, or None. (psycopg has no public call for a describe
    alone, so this speaks libpq's through the connection's pgconn, under its lock.)"""
    if "\x00" in condition:  # libpq would parse only the text before it
        return "it holds a NUL character"
    encoding = conn.info.encoding
    with conn.lock:
        pg = conn.pgconn
        parsed = pg.prepare(b"", condition.encode(encoding))
        if parsed.status != ExecStatus.COMMAND_OK:
            raise psycopg.errors.error_from_result(parsed, encoding=encoding)
        described = pg.describe_prepared(b"")
        if described.status != ExecStatus.COMMAND_OK:
            raise psycopg.errors.error_from_result(described, encoding=encoding)
        columns = [described.ftype(i) for i in range(described.nfields)]
    if not columns:
        return "it returns no rows (it must be a query returning one boolean)"
    if len(columns) != 1:
        return f"it returns {len(columns)} columns (it must return one boolean)"
    if columns[0] != BOOL_OID:
        return "its column is not a boolean"
    return None


def prometheus_query(condition: str) -> str | None:
    """The instant query of a Prometheus condition, or None for SQL."""
    return condition[len(PROMETHEUS):].strip() if condition.startswith(PROMETHEUS) else None


def _read_bounded(resp: Any, deadline: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError("the answer took too long")
        chunk = resp.read(16384)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_PROMETHEUS_BYTES:
            raise ValueError(f"the answer is over {MAX_PROMETHEUS_BYTES} bytes")
        chunks.append(chunk)


def _sample_true(value: Any) -> bool:
    number = float(value[1])  # [timestamp, "value"]
    return not math.isnan(number) and number != 0.0


def evaluate_prometheus(base_url: str | None, query: str, timeout: float = EVALUATION_TIMEOUT) -> Evaluation:
    """Ask Prometheus (the runner's configured URL) for the instant query's value now."""
    if not query:
        return Evaluation(None, "the Prometheus query is empty")
    if not base_url:
        return Evaluation(None, "no Prometheus to ask: this runner has no --prometheus-url "
                                "(RUNNER_PROMETHEUS_URL)")
    deadline = time.monotonic() + timeout
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                body = _read_bounded(resp, deadline)
        except urllib.error.HTTPError as exc:  # Prometheus answers a bad query with 400 and JSON
            with exc:
                body = _read_bounded(exc, deadline)
        answer = json.loads(body)
        if not isinstance(answer, dict):
            raise ValueError("the answer is not a JSON object")
        if answer.get("status") != "success":
            return Evaluation(None, f"Prometheus: {answer.get('errorType', 'error')}: "
                                    f"{str(answer.get('error', 'no detail'))[:500]}")
        data = answer.get("data") or {}
        kind, result = data.get("resultType"), data.get("result")
        if kind == "vector" and isinstance(result, list):
            return Evaluation(any(_sample_true(s.get("value")) for s in result))
        if kind == "scalar" and isinstance(result, list):
            return Evaluation(_sample_true(result))
        return Evaluation(None, f"the Prometheus query returned a {kind}, not a vector or scalar")
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        return Evaluation(None, f"Prometheus at {urllib.parse.urlsplit(base_url).netloc}: "
                                f"{type(exc).__name__}: {_first_line(exc)}"[:1000])


class StandbyRefused(Exception):
    """The condition standby (``--condition-url``) cannot be used: not reachable, not a hot
    standby, or not a copy of this ledger. The message is one line."""


def open_standby(conn: psycopg.Connection[Any], url: str) -> psycopg.Connection[Any]:
    """A condition session on the hot standby ``url`` (``connect``'s), checked against the
    ledger of ``conn`` (the primary): in recovery, same system identifier and database oid.
    Raises ``StandbyRefused``, the URL shown redacted."""
    where = redact(url)
    try:
        standby = connect(url)
    except psycopg.Error as exc:
        raise StandbyRefused(f"the condition standby {where} cannot be reached: {_first_line(exc)}") from None
    try:
        there = ledger.dict_rows(standby, Q["ledger_place"], {})[0]
        here = ledger.dict_rows(conn, Q["ledger_place"], {})[0]
        if not there["in_recovery"]:
            raise StandbyRefused(f"the condition standby {where} is not a hot standby "
                                 "(pg_is_in_recovery() is false): conditions run there only "
                                 "where no run key of the ledger can be touched")
        if (there["system_identifier"], there["database_oid"]) != (
                here["system_identifier"], here["database_oid"]):
            raise StandbyRefused(
                f"the condition standby {where} is not a copy of this ledger (cluster "
                f"{there['system_identifier']}, database oid {there['database_oid']}; the ledger: "
                f"cluster {here['system_identifier']}, database oid {here['database_oid']})")
    except psycopg.Error as exc:
        standby.close()
        raise StandbyRefused(f"the condition standby {where}: {type(exc).__name__}: "
                             f"{_first_line(exc)}") from None
    except StandbyRefused:
        standby.close()
        raise
    return standby


class WatchLost(Exception):
    """The watch of a condition's session broke off (its connection failed): the condition
    ran unwatched, so its outcome is not recorded (the duty retries it)."""


class Watcher:
    """Watches a condition session from a connection of its own (``application_name``
    runner-condition-watch, the condition session's login), opened at the first watch and
    kept until ``close``; never a connection of the runner's pool or lock session.

    ``watching`` lists the session's advisory locks (``advisory_locks_of``) before the
    condition's statement, then, on a thread, every ``WATCH_INTERVAL`` seconds while it runs:
    each lock seen that was not there before (the plan's condition lock is) is one the
    condition took, even if it released it again before its statement ended."""

    def __init__(self, of: psycopg.Connection[Any]) -> None:
        self._of = of
        self._conn: psycopg.Connection[Any] | None = None

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self.close()
            info = self._of.info
            self._conn = psycopg.connect(info.dsn, password=info.password or None, autocommit=True,
                                         application_name="runner-condition-watch")
            self._conn.execute("SET statement_timeout = '1s'")
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _locks(conn: psycopg.Connection[Any], pid: int) -> set[str]:
        return {r[0] for r in conn.execute(Q["advisory_locks_of"], {"pid": pid})}

    @contextlib.contextmanager
    def watching(self, pid: int, seen: set[str]) -> Iterator[None]:
        """While the block runs, add to ``seen`` every advisory lock of backend ``pid`` that it
        did not hold when the block began. Raises ``WatchLost`` if a look failed."""
        try:
            conn = self._connection()
            before = self._locks(conn, pid)
        except psycopg.Error as exc:
            raise WatchLost(f"{type(exc).__name__}: {_first_line(exc)}") from exc
        done = threading.Event()
        lost: list[BaseException] = []

        def look() -> None:
            try:
                while not done.wait(WATCH_INTERVAL):
                    seen.update(self._locks(conn, pid) - before)
            except Exception as exc:
                lost.append(exc)

        thread = threading.Thread(target=look, name="runner-condition-watch", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(WATCH_JOIN)
            if thread.is_alive():
                raise WatchLost(f"its last look did not answer within {WATCH_JOIN:g}s")
            if lost:
                raise WatchLost(f"{type(lost[0]).__name__}: {_first_line(lost[0])}") from lost[0]


def _took(seen: set[str]) -> Evaluation:
    return Evaluation(None, f"the condition took {len(seen)} advisory lock(s), held during its "
                            "statement (released); a condition must only read")


def evaluate(conn: psycopg.Connection[Any], condition: str, prometheus_url: str | None = None,
             timeout: float = EVALUATION_TIMEOUT, watch: Watcher | None = None) -> Evaluation:
    """Evaluate ``condition`` once: a Prometheus query is asked of ``prometheus_url``; SQL
    runs on ``conn``, as the condition role, in a transaction (or, inside the caller's, a
    savepoint) that is rolled back, its statement watched by ``watch``: a condition seen
    holding an advisory lock it did not hold before fails. Only a condition session on a
    hot standby goes unwatched (``watch`` None): its locks are the standby's own. The caller
    releases the advisory locks the condition may have taken (``release_locks``). Raises only
    when the connection is lost (``WatchLost`` when the watcher's is)."""
    promql = prometheus_query(condition)
    if promql is not None:
        return evaluate_prometheus(prometheus_url, promql, timeout)
    seen: set[str] = set()
    try:
        with conn.transaction(force_rollback=True):
            conn.execute(BQ["read_only_limits"], {"timeout": STATEMENT_TIMEOUT})
            wrong = _shape_error(conn, condition)
            if wrong is not None:
                return Evaluation(None, wrong)
            with (watch.watching(conn.info.backend_pid, seen) if watch is not None
                  else contextlib.nullcontext()):
                row = conn.execute(Q["evaluate"], {"condition": condition}).fetchone()
    except psycopg.Error as exc:
        if conn.closed or conn.broken:
            raise
        if seen:
            return _took(seen)
        return Evaluation(None, f"{type(exc).__name__}: {_first_line(exc)}"[:1000])
    if seen:
        return _took(seen)
    assert row is not None
    return Evaluation(bool(row[0]))


def evaluate_apart(conn: psycopg.Connection[Any], condition: str,
                   prometheus_url: str | None = None) -> Evaluation:
    """Evaluate ``condition`` once on a short connection of its own, with ``conn``'s login,
    closed afterwards, watched: whatever the condition does to a session never reaches the
    caller's (the creation check of ``runner backfill``). A watch that broke off is the
    evaluation's error (this check is not retried)."""
    if prometheus_query(condition) is not None:
        return evaluate(conn, condition, prometheus_url)
    info = conn.info
    with psycopg.connect(info.dsn, password=info.password or None, autocommit=True,
                         application_name="runner-condition", prepare_threshold=None) as own, \
            Watcher(own) as watch:
        own.execute("SET TIME ZONE 'UTC'")
        try:
            return evaluate(own, condition, watch=watch)
        except WatchLost as exc:
            return Evaluation(None, f"the condition's session could not be watched: {exc}"[:1000])


def release_locks(conn: psycopg.Connection[Any]) -> None:
    """Release every session-level advisory lock of ``conn`` (a condition's)."""
    conn.execute(Q["release_locks"])


def reset_session(conn: psycopg.Connection[Any]) -> None:
    """After an evaluation: no advisory lock, no setting, prepared statement, temporary
    table or listener of the condition's survives on the session. ``conn`` must not use
    server-side prepared statements (``connect`` opens it so): ``DISCARD ALL`` drops them
    without psycopg knowing."""
    if conn.prepare_threshold is not None:
        raise ValueError("a condition session must be opened with prepare_threshold=None")
    release_locks(conn)
    conn.execute("DISCARD ALL")
    conn.execute("SET TIME ZONE 'UTC'")


def _watchdog(conns: list[psycopg.Connection[Any]], seconds: float,
              fired: threading.Event) -> threading.Timer:
    def cancel() -> None:
        fired.set()
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.cancel_safe(timeout=seconds)

    timer = threading.Timer(seconds, cancel)
    timer.daemon = True
    timer.start()
    return timer


def evaluate_plan(conn: psycopg.Connection[Any], namespace: int, plan_id: int,
                  now: datetime | None = None, every: float | None = None,
                  timeout: float = EVALUATION_TIMEOUT,
                  prometheus_url: str | None = None, watch: Watcher | None = None,
                  standby: psycopg.Connection[Any] | None = None) -> Evaluation | None:
    """Evaluate one plan's condition under its condition lock and record the outcome (the
    check's time; a pause, with its reason). ``conn`` is this process's condition session
    (autocommit): the lock and the record are its. The condition's statement runs on
    ``standby`` when given (a condition session on a hot standby of the ledger,
    ``open_standby``), else on ``conn``, watched by ``watch`` (one of its own for this call
    when None). None when another runner holds the lock or the condition is no longer
    due: last checked less than the plan's ``pause_every`` seconds ago (``every`` in place
    of it when given)."""
    if standby is None and watch is None:
        with Watcher(conn) as own:
            return evaluate_plan(conn, namespace, plan_id, now, every, timeout, prometheus_url, own)
    on = conn if standby is None else standby
    fired = threading.Event()
    timer = _watchdog([conn] if standby is None else [conn, standby], timeout, fired)
    try:
        with conn.transaction():
            found = ledger.dict_rows(conn, Q["lock_condition"], {
                "namespace": namespace, "plan_id": plan_id, "now": now, "every": every})
            if not found:
                return None
            result = evaluate(on, found[0]["pause_when"], prometheus_url, timeout,
                              watch if standby is None else None)
            if fired.is_set():
                result = Evaluation(None, f"the evaluation took longer than {timeout:g}s")
            held = ledger.dict_rows(conn, Q["advisory_locks_held"],
                                    {"namespace": namespace, "plan_id": plan_id})[0]["held"]
            if held:
                result = Evaluation(None, f"the condition took {held} advisory lock(s) (released); "
                                          "a condition must only read")
            # released inside the evaluation's transaction: once it ends, the session is no
            # longer a condition session (runner.condition_sessions_v1) and a key it still
            # held would make a run's claim count it as a squatter's
            release_locks(conn)
            timer.cancel()  # recording the outcome is the runner's own work
            conn.execute(BQ["pause_checked"], {"plan_id": plan_id, "now": now})
            reason = result.pause_reason
            if reason is not None:
                paused = ledger.dict_rows(conn, BQ["pause_plan"], {
                    "plan_id": plan_id, "reason": reason[:1000], "now": now})
                if paused:
                    log.warning("backfill_paused plan=%s: %r", plan_id, reason[:300])
    finally:
        timer.cancel()
        reset_session(conn)
        if standby is not None:
            reset_session(standby)
    return result


def run_once(conn: psycopg.Connection[Any], namespace: int, job_names: Iterable[str],
             now: datetime | None = None, every: float | None = None,
             timeout: float = EVALUATION_TIMEOUT, prometheus_url: str | None = None,
             standby_url: str | None = None) -> dict[int, Evaluation]:
    """Evaluate the due conditions of the running plans of ``job_names`` (those a process
    defines), each under its lock, each at its plan's pace (``every`` seconds for all when
    given); returns the outcome of each plan evaluated here. With
    ``standby_url`` their statements run on that hot standby, on a session opened (and
    checked: ``open_standby``, raising ``StandbyRefused``) for this pass when a condition is
    due and closed at its end."""
    done: dict[int, Evaluation] = {}
    due = ledger.dict_rows(conn, Q["due_conditions"], {
        "job_names": list(job_names), "now": now, "every": every})
    if not due:
        return done
    with contextlib.ExitStack() as stack:
        standby = None if standby_url is None else stack.enter_context(open_standby(conn, standby_url))
        watch = stack.enter_context(Watcher(conn))  # connects at its first watch, if any
        for p in due:
            result = evaluate_plan(conn, namespace, p["id"], now, every, timeout, prometheus_url,
                                   watch, standby)
            if result is not None:
                done[p["id"]] = result
    return done


def connect(url: str) -> psycopg.Connection[Any]:
    """A condition session: autocommit, UTC, and no server-side prepared statements (the
    reset after each evaluation, ``DISCARD ALL``, drops them behind psycopg's back)."""
    conn = psycopg.connect(url, autocommit=True, application_name="runner-condition",
                           prepare_threshold=None)
    conn.execute("SET TIME ZONE 'UTC'")
    return conn


def pass_of(namespace: int, job_names: list[str], prometheus_url: str | None = None,
            standby_url: str | None = None) -> Callable[[psycopg.Connection[Any]], None]:
    """The condition duty of a ``runner start`` process: ``run_once`` every ``POLL`` seconds
    on a thread and connection of its own (``duties.on_own_connection``, with ``connect``), so
    untrusted SQL never runs on the lock session; a failure is logged and retried there, a
    lost connection opened again. ``standby_url``: ``--condition-url``."""
    def one_pass(conn: psycopg.Connection[Any]) -> None:
        run_once(conn, namespace, job_names, prometheus_url=prometheus_url, standby_url=standby_url)
    return one_pass
