"""Fresh test databases made ahead of the tests that take them, and dropped behind them.

A clone of the migrated template costs about 0.3 s (CREATE DATABASE ... TEMPLATE writes the
template's pages to the WAL) and its drop about 0.1 s; with one made per test, that was a
third of a short test's time, spent while nothing else ran. One background thread per test
process makes the next clone while the current test runs and drops the ones handed back, so
a test finds its database ready and leaves without waiting for the drop. A database is never
used twice: each test still gets a clone nobody has touched.

Every DROP DATABASE waits for a checkpoint, which takes seconds, or a minute on a server busy
with other writes. The pool also drops the databases the conftest makes otherwise (an empty
one per test that wants it, the session's shared one), so no test and no fixture waits for a
drop; and drops that are waiting together run together, on connections of their own, so that
one checkpoint serves them all (PostgreSQL runs one at a time, and a drop waits only for one
begun after it asked). So the pool drops in batches of ``DROP_BATCH`` (and everything left
when asked to settle, and at the end): a checkpoint per test's database kept the server
checkpointing all the time, and after each checkpoint the first change to every page
writes the whole page to the WAL again.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from runner.testing import drop_databases

DROP_BATCH = 8  # databases handed back before the pool drops them, together


class ClonePool:
    """Clones of ``template`` named ``prefix_N``: ``take()`` returns one no test has used,
    ``give_back(name)`` drops it in the background, ``close()`` drops everything left."""

    def __init__(self, admin_url: str, template: str, prefix: str, url_for: Callable[[str], str],
                 prepare: Callable[[str], None], ready: int = 1) -> None:
        self._admin_url = admin_url
        self._template = template
        self._prefix = prefix
        self._url_for = url_for
        self._prepare = prepare
        self._want = ready
        self._ready: deque[str] = deque()
        self._drops: deque[str] = deque()
        self._seq = 0
        self._error: BaseException | None = None  # a clone that failed: every take() raises it
        self._drop_error: BaseException | None = None  # raised by close()
        self._stopping = False
        self._dropping = False
        self._settling = 0  # callers of settle(): drop what is handed back without a batch
        self._cond = threading.Condition()
        # two threads: a drop may wait for a checkpoint on a busy server, and the next clone
        # must not wait behind it
        self._threads = [threading.Thread(target=self._clone_ahead, name="clone-pool", daemon=True),
                         threading.Thread(target=self._drop_behind, name="clone-drops", daemon=True)]
        for thread in self._threads:
            thread.start()

    def take(self, timeout: float = 300.0) -> str:
        with self._cond:
            if not self._cond.wait_for(lambda: self._ready or self._error is not None, timeout=timeout):
                raise TimeoutError(f"no clone of {self._template} within {timeout:.0f}s")
            if self._error is not None:
                raise RuntimeError(f"cloning {self._template} failed: {self._error}") from self._error
            name = self._ready.popleft()
            self._cond.notify_all()
            return name

    def create(self, name: str, template: str | None = None) -> None:
        """Make database ``name`` now (a copy of ``template``, else an empty one); the caller
        gives it back like a clone."""
        with psycopg.connect(self._admin_url, autocommit=True) as admin:
            _drop(admin, name)  # a leftover of an earlier session of the same pid
            _clone(admin, template, name)

    def create_empty(self) -> str:
        """A new empty database (no runner schema), named after this pool; given back like a
        clone."""
        with self._cond:
            self._seq += 1
            name = f"{self._prefix}_empty_{self._seq}"
        self.create(name)
        return name

    def give_back(self, name: str) -> None:
        with self._cond:
            self._drops.append(name)
            self._cond.notify_all()

    def settle(self, timeout: float = 300.0) -> None:
        """Wait until every database handed back is dropped (the session's roles are dropped
        after their databases: tests/dbroles.py)."""
        with self._cond:
            self._settling += 1
            self._cond.notify_all()
            try:
                self._cond.wait_for(lambda: not self._drops and not self._dropping, timeout=timeout)
            finally:
                self._settling -= 1

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=120)
        try:
            drop_databases(self._admin_url, [*self._ready, *self._drops])
        finally:
            self._ready.clear()
            self._drops.clear()
        if self._drop_error is not None:
            raise RuntimeError(f"dropping a clone failed: {self._drop_error}") from self._drop_error

    def _clone_ahead(self) -> None:
        try:
            with psycopg.connect(self._admin_url, autocommit=True) as admin:
                while True:
                    with self._cond:
                        self._cond.wait_for(lambda: self._stopping or len(self._ready) < self._want)
                        if self._stopping:
                            return
                        self._seq += 1
                        name = f"{self._prefix}_{self._seq}"
                    _drop(admin, name)  # a leftover of an earlier session of the same pid
                    _clone(admin, self._template, name)
                    self._prepare(self._url_for(name))
                    with self._cond:
                        self._ready.append(name)
                        self._cond.notify_all()
        except BaseException as exc:  # reported to the test that waits for a clone
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _drop_behind(self) -> None:
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._stopping or len(self._drops) >= DROP_BATCH
                                        or (self._settling > 0 and bool(self._drops)))
                    if not self._drops:
                        return
                    names = list(self._drops)
                    self._drops.clear()
                    self._dropping = True
                try:
                    drop_databases(self._admin_url, names)
                finally:
                    with self._cond:
                        self._dropping = False
                        self._cond.notify_all()
        except BaseException as exc:  # close() reports it; the clones go on
            self._drop_error = exc


def _clone(admin: psycopg.Connection[Any], template: str | None, name: str) -> None:
    """CREATE DATABASE name TEMPLATE template (no template: an empty database); a test that
    has just connected to the template itself (to clone it its own way) makes the server
    refuse for a moment: tried again then."""
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        statement = sql.SQL("{} TEMPLATE {}").format(statement, sql.Identifier(template))
    for attempt in range(100):
        try:
            admin.execute(statement)
            return
        except psycopg.errors.ObjectInUse:
            if attempt == 99:
                raise
            time.sleep(0.1)


def _drop(admin: psycopg.Connection[Any], name: str) -> None:
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
