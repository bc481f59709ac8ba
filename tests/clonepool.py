"""Fresh test databases made ahead of the tests that take them, and dropped behind them.

A clone of the migrated template costs about 0.3 s (CREATE DATABASE ... TEMPLATE writes the
template's pages to the WAL) and its drop about 0.1 s; with one made per test, that was a
third of a short test's time, spent while nothing else ran. One background thread per test
process makes the next clone while the current test runs and drops the ones handed back, so
a test finds its database ready and leaves without waiting for the drop. A database is never
used twice: each test still gets a clone nobody has touched.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql


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

    def give_back(self, name: str) -> None:
        with self._cond:
            self._drops.append(name)
            self._cond.notify_all()

    def settle(self, timeout: float = 300.0) -> None:
        """Wait until every database handed back is dropped (the session's roles are dropped
        after their databases: tests/dbroles.py)."""
        with self._cond:
            self._cond.wait_for(lambda: not self._drops and not self._dropping, timeout=timeout)

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=120)
        with psycopg.connect(self._admin_url, autocommit=True) as admin:
            for name in [*self._ready, *self._drops]:
                _drop(admin, name)
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
            with psycopg.connect(self._admin_url, autocommit=True) as admin:
                while True:
                    with self._cond:
                        self._cond.wait_for(lambda: self._stopping or bool(self._drops))
                        if not self._drops:
                            return
                        name = self._drops.popleft()
                        self._dropping = True
                    try:
                        _drop(admin, name)
                    finally:
                        with self._cond:
                            self._dropping = False
                            self._cond.notify_all()
        except BaseException as exc:  # close() reports it; the clones go on
            self._drop_error = exc


def _clone(admin: psycopg.Connection[Any], template: str, name: str) -> None:
    """CREATE DATABASE name TEMPLATE template; a test that has just connected to the template
    itself (to clone it its own way) makes the server refuse for a moment: tried again then."""
    for attempt in range(100):
        try:
            admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)))
            return
        except psycopg.errors.ObjectInUse:
            if attempt == 99:
                raise
            time.sleep(0.1)


def _drop(admin: psycopg.Connection[Any], name: str) -> None:
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
