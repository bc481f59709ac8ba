"""Is a connection a session of its own? The check that refuses a transaction pool.

A runner's lock session holds session advisory locks (every run it executes, for the whole
attempt), and ``runner db upgrade`` holds the migrate lock for the whole migration: both need
a server backend that is the connection's own for as long as the connection lives.
A pooler in *transaction* or *statement* mode (PgBouncer ``pool_mode = transaction`` or
``statement``) breaks that without an error: each transaction may run on another backend, a
lock is taken on one and its unlock runs on another (the first keeps it, idle, serving other
clients: run locks and the migrate lock leak), a backend that holds a runner's keys serves an
application (a "squatter" to the runners), and psycopg's server-side prepared statements are
missing or already there on the next backend (``prepared statement "_pg3_1" ...``). PostgreSQL
cannot tell a pooled backend from a direct one, and PgBouncer's pool mode is not readable
through the pooled connection, so ``check_session`` watches what a pooler does:

1. the connection asks for its backend's pid (``mine``), then leaves that backend idle;
2. a second connection to the same URL asks for its backend's pid ``PROBES`` times, one
   autocommit statement each: a transaction pool hands it an idle server backend each time,
   the most recently used first (PgBouncer's default) or the longest idle (``server_round_robin``),
   so within a few statements it gets ``mine``; in session mode or direct, ``mine`` belongs to
   the first connection until it closes, and no other client ever gets it;
3. the first connection asks again: another pid than ``mine`` is a pooler too.

Either sign is proof (no direct or session-mode connection shows it), and the check refuses
the URL with one line that says what to use. A second connection that waits ``PROBE_WAIT``
seconds for a backend (a full session pool; a transaction pool hands it the idle ``mine`` at
once) is cut off, and proves nothing. It cannot prove the opposite: a pool of more idle
servers than ``PROBES``, reused in an order other than PgBouncer's, or kept busy by other
clients throughout, can hide a transaction pool from it (docs/how-to/poolers.md). It
costs two short connections (``check_url``: the checked one is the check's own, never the
lock session, which a cut during the check would send back into its reconnect backoff) and
``PROBES + 2`` short statements, or one statement where the connection is proven direct
(``direct``: over TCP, the server's own address and port are the ones the client connected
to; a pooler redirected there by the network, e.g. by a NAT rule on PostgreSQL's own address
and port, would pass for direct), at ``runner start``, whenever the lock session opens or
reconnects (runner/worker/session.py), and before a migration takes its lock
(migrations/env.py). Neither connection prepares a statement.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from typing import Any

import psycopg

from runner.settings import ConfigError

PROBES = 48  # statements of the second connection (a transaction pool of up to 48 idle backends shows)
PROBE_WAIT = 5  # seconds the second connection waits for a backend at most

REFUSAL = (
    "{what} reaches PostgreSQL through a pooler in transaction or statement mode (its server "
    "backend is shared with other clients between transactions): advisory locks and prepared "
    "statements need a session of their own; use a direct URL or a session-mode pool (PgBouncer "
    "pool_mode = session), see docs/how-to/poolers.md"
)


class PoolerRefused(ConfigError):
    """The URL reaches PostgreSQL through a transaction- or statement-mode pool."""


def _pid(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_backend_pid()", prepare=False).fetchone()
    if not conn.autocommit:
        conn.commit()  # a transaction pool may now hand the backend to another client
    assert row is not None
    return int(row[0])


def direct(conn: psycopg.Connection[Any]) -> bool:
    """Whether ``conn`` provably reaches PostgreSQL with nothing in between: over TCP, the
    server's own address and port are the ones the client connected to (a pooler listens on
    another port or host and connects to PostgreSQL from there). Unix sockets and anything
    else: not proven (the full check decides)."""
    row = conn.execute("SELECT host(inet_server_addr()), inet_server_port()", prepare=False).fetchone()
    if not conn.autocommit:
        conn.commit()
    if row is None or row[0] is None:
        return False
    info = conn.info
    return bool(row[0] == info.hostaddr and row[1] == info.port)


def shared_backend(conn: psycopg.Connection[Any]) -> bool:
    """Whether ``conn`` is proven not to have a backend of its own (module docstring). ``conn``
    is idle (no transaction open); a second connection is opened with its credentials."""
    mine = _pid(conn)
    if _another_gets(conn, mine):
        return True
    return _pid(conn) != mine


def _another_gets(conn: psycopg.Connection[Any], pid: int) -> bool:
    """Whether a second client of ``conn``'s URL is handed the backend ``pid`` within PROBES
    statements. One that waits PROBE_WAIT seconds for a backend (a session pool that is full:
    a transaction pool hands over the idle ``pid`` at once) is cut off: no proof either way."""
    info = conn.info
    try:
        other = psycopg.connect(info.dsn, password=info.password or None, autocommit=True,
                                prepare_threshold=None, connect_timeout=PROBE_WAIT,
                                application_name="runner-probe")
    except psycopg.OperationalError:
        return False
    guard = threading.Lock()
    done = False

    def cut() -> None:  # a waiting statement ignores a cancel request (PgBouncer): end the socket
        with guard:
            if not done:
                with contextlib.suppress(OSError), socket.socket(fileno=os.dup(other.pgconn.socket)) as s:
                    s.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(PROBE_WAIT, cut)
    timer.daemon = True
    timer.start()
    try:
        return any(_pid(other) == pid for _ in range(PROBES))
    except psycopg.OperationalError:
        return False
    finally:
        with guard:
            done = True
        timer.cancel()
        other.close()


def check_url(url: str, what: str = "the database URL") -> None:
    """``check_session`` on a connection of its own to ``url`` (named ``runner-probe``), closed
    after: the session the caller then opens is never the one a check kept busy."""
    with psycopg.connect(url, autocommit=True, prepare_threshold=None, connect_timeout=PROBE_WAIT * 2,
                         application_name="runner-probe") as conn:
        check_session(conn, what)


def check_session(conn: psycopg.Connection[Any], what: str = "the database URL") -> None:
    """PoolerRefused (one line) when ``conn`` is proven to share its backend with other
    clients (a transaction or statement pool); nothing otherwise. A connection proven direct
    (``direct``) costs one statement."""
    try:
        shared = not direct(conn) and shared_backend(conn)
    except psycopg.Error as exc:
        # statement pooling refuses a transaction block; a pooler may refuse the second client
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "pooling mode" in text:
            raise PoolerRefused(REFUSAL.format(what=what)) from None
        raise
    if shared:
        raise PoolerRefused(REFUSAL.format(what=what))
