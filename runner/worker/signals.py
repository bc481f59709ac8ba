"""SIGTERM and SIGINT for ``runner start``: a signal handler that takes no lock.

A Python signal handler runs on the main thread between two bytecodes, wherever that thread
is: inside ``Event.wait()`` or ``Event.set()`` holding the Event's lock (Worker.run's
``_wake.wait``, shutdown's ``_stop.set``), inside a logging call holding the logging locks,
inside another signal handler. What the handler does there can wait forever for a lock its
own thread holds, or fail and raise into whatever the main thread was doing. Seen with
``runner start`` and a flood of SIGTERMs (tests/test_signals.py):

* ``worker.stop()`` (``Event.set()``) from the handler, interrupting ``Event.set()`` of the
  same Event: a runner that never exits (seen once in CI; 834fae1 moved it to a thread);
* a handler that logs, or starts a thread (834fae1), runs long enough, and lets other
  handlers run inside it at enough points, that signals arriving at thousands a second stack
  it up into a RecursionError (the runner exits with 1); a thread started inside a
  ``Thread.start()`` interrupted by the handler breaks threading's bookkeeping (KeyError);
* a logging call from the handler waits for the logging locks while another thread logs
  (reentrant locks: its own thread holding them is no wait), and a write to stderr from it,
  if the signal interrupted one, fails ("reentrant call inside BufferedWriter").

So the handler does nothing at all. Python's own C-level handler, which runs when the signal
arrives and before any Python code, writes the signal's number to a pipe
(``signal.set_wakeup_fd``: a ``write()`` from C, async-signal-safe, no Python lock), in the
order the signals arrive; the Python-level handler installed for the signals is a function of
no statement (it must exist for that C handler to be installed). It never releases the GIL
and has one point where Python may run pending handlers, so even a flood of signals cannot
stack it up into a RecursionError (a handler that logs or calls os.write, at thousands of
signals a second, can: each such call lets another handler run inside it). The
``runner-signals`` thread, started before the handlers are installed, reads the pipe and does
the rest on a thread that holds nothing of the main thread's: the log line, the stop
(``stop_with``), and the exit at once on a second SIGINT.

At exit (``atexit``, after the runner has stopped) the signals are ignored: late in
interpreter finalization Python puts the default action back, and a SIGTERM landing then
would kill a runner that had stopped cleanly by the signal (exit status -15, not 0).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

HandlerType = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class SignalStop:
    """SIGTERM/SIGINT stop ``runner start``: the first stops it (``requested``, and the
    callable of ``stop_with``); a second SIGINT exits at once with code 130."""

    def __init__(self, log: logging.Logger, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)
                 ) -> None:
        self.log = log
        self.signals = signals
        self.requested = threading.Event()  # set by the watcher thread only, never by the handler
        self._stop: Callable[[], None] | None = None
        self._count = 0
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)  # a full pipe drops the mark: never blocks the signal
        self._previous: dict[int, HandlerType] = {}
        self._previous_fd: int | None = None
        self._watcher = threading.Thread(target=self._watch, name="runner-signals", daemon=True)
        self._watcher.start()

    def install(self) -> None:
        """Handle the signals from now on (main thread only); ignore them once Python exits."""
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self.on_signal)
        atexit.register(self._ignore_at_exit)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        """The Python-level handler: nothing (the signal's number is in the pipe already)."""

    def stop_with(self, stop: Callable[[], None]) -> None:
        """A signal calls ``stop`` from now on (on the watcher thread); at once if one came."""
        self._stop = stop
        if self.requested.is_set():
            stop()  # it may be called twice (here and by the watcher): stop() is idempotent

    def close(self) -> None:
        """Put the previous handlers back and end the watcher (tests; ``runner start`` exits)."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()
        if self._previous_fd is not None:
            signal.set_wakeup_fd(self._previous_fd)
            self._previous_fd = None
        atexit.unregister(self._ignore_at_exit)
        os.close(self._write)  # the watcher reads end of file and returns
        self._watcher.join()
        os.close(self._read)

    def _ignore_at_exit(self) -> None:
        for signum in self.signals:
            signal.signal(signum, signal.SIG_IGN)

    def _watch(self) -> None:
        while True:
            try:
                marks = os.read(self._read, 512)
            except OSError:
                return
            if not marks:
                return
            for signum in marks:
                if signum in self.signals:  # (another signal with a Python handler writes too)
                    self._received(signum)
            stop = self._stop
            if stop is not None:
                stop()

    def _received(self, signum: int) -> None:
        self._count += 1
        name = signal.Signals(signum).name
        if self._count > 1 and signum == signal.SIGINT:
            self.log.warning("second interrupt: exiting at once")
            os._exit(130)
        if self._count == 1:
            self.log.info("%s: stopping; waiting for running handlers", name)
        else:
            self.log.debug("%s: stopping already", name)
        # after the log line: a runner whose stop() returns at once is no longer waiting for it
        self.requested.set()
