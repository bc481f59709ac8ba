"""SIGTERM and SIGINT stop `runner start` cleanly wherever they land (runner/worker/signals.py).

A Python signal handler runs on the main thread between two bytecodes, possibly while that
thread holds a lock (the Event it waits on, a logging handler's): a handler that takes such
a lock waits forever, and one that runs long under a flood of signals stacks up into a
RecursionError. The process test sends signals at random points of real runners' lives,
and a flood of them after the first, while tests/apps/signals.py makes the threads take
turns with the GIL every few microseconds: the handler then runs at many of the points
where the main thread can run it, inside Event.wait() and Event.set() included. A handler
that takes such a lock hangs the runner (a failure after BOUND seconds, with its threads'
stacks, not a hung suite). The unit tests hold the locks
themselves and raise the signal inside them, and check that the handler calls nothing."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT, RunnerProcess, eventually, rows, runner_cmd, scalar

APP = "tests/apps/signals.py:app"
LIVES = int(os.environ.get("RUNNER_TEST_SIGNAL_LIVES", "16"))  # runner processes, in all
AT_ONCE = 4  # of them at a time
BOUND = 20.0  # seconds from the first signal to the exit (handlers last 0.8 s at most)
FLOOD_FOR = 0.4  # seconds of the flood of SIGTERMs after the first signal, at most


@dataclass(frozen=True)
class Life:
    """One runner process: when it gets its first signal and what follows."""

    index: int
    first: signal.Signals
    when: str  # "startup": soon after the app is loaded; "any": at any time; "busy": while
    #            this runner has attempts running (its shutdown then waits for them)
    after: float  # seconds after that
    flood: int  # SIGTERMs sent back to back after the first signal (0: none)
    metrics: bool  # with a metrics endpoint (port 0: any free one)


def plan(rng: random.Random, count: int) -> list[Life]:
    lives = []
    for i in range(count):
        when = rng.choices(["startup", "any", "busy"], [1, 1, 2])[0]
        after = {"startup": rng.uniform(0, 0.3), "any": rng.uniform(0, 2.5), "busy": rng.uniform(0, 0.1)}[when]
        flood = 0 if when != "busy" and rng.random() < 0.3 else rng.randint(1_000, 50_000)
        lives.append(Life(i, signal.SIGINT if rng.random() < 0.3 else signal.SIGTERM, when, after, flood,
                          metrics=rng.random() < 0.5))
    return lives


def live(db_url: str, tmp_path: Path, life: Life) -> str | None:
    """Start a runner, signal it as planned; what went wrong (None: it exited with 0 in time)."""
    mark, log = tmp_path / f"loaded-{life.index}", tmp_path / f"runner-{life.index}.log"
    extra = ["--workers", "4", "--poll-interval", "0.01", "--prune-interval", "0.05", "--grace", "5"]
    if life.metrics:
        extra += ["--metrics-port", "0"]
    # a plain child of this process (not forked by the tests' server): the flood below signals
    # its pid until it is reaped here, which only a child of ours guarantees is never reused
    proc = RunnerProcess(APP, db_url, *extra, env={"RUNNER_TEST_SIGNAL_MARK": str(mark),
                                                   "RUNNER_TEST_NO_ZYGOTE": "1"}, log=log)
    pid = proc.proc.pid

    def gone() -> bool:
        return proc.proc.poll() is not None

    try:
        eventually(lambda: mark.exists() or gone(), timeout=60, interval=0.005,
                   message=f"{life}: the app is loaded")
        if life.when == "busy":
            eventually(lambda: gone() or scalar(db_url, "SELECT count(*) FROM runner.attempts WHERE "
                                                "owner_pid = %s AND status = 'running'", (pid,)) > 0,
                       timeout=60, interval=0.01, message=f"{life}: attempts are running")
        if gone():
            return f"{life}: exited with {proc.proc.returncode} before any signal\n" + _tail(log)
        # where in the runner's life the signal lands is the point of the test: this sleep
        # chooses that moment, it does not wait for an outcome
        time.sleep(life.after)
        proc.proc.send_signal(life.first)
        if life.first == signal.SIGINT and life.flood:
            # a SIGTERM handled before it would make it a second interrupt (an exit at once):
            # it is handled first, then comes the flood
            eventually(lambda: gone() or "SIGINT: stopping" in log.read_text(), timeout=BOUND,
                       interval=0.001, message=f"{life}: SIGINT handled")
        sent, until = 0, time.monotonic() + FLOOD_FOR
        # os.kill on the child until it is reaped (by poll, in gone()): its pid is not reused
        while sent < life.flood and not gone() and time.monotonic() < until:
            os.kill(pid, signal.SIGTERM)
            sent += 1
        try:
            code = proc.proc.wait(BOUND)
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGUSR1)  # its threads' stacks, to its log (tests/apps/signals.py)
            _written(log)
            return (f"{life}: still running {BOUND}s after the first signal ({sent} more sent)\n"
                    + _tail(log, 60))
        if code != 0:
            return f"{life}: exit code {code} ({sent} more signals sent)\n" + _tail(log)
        return None
    finally:
        proc.kill()


def _written(log: Path) -> None:
    """Until the stacks asked for are in the log (it has stopped growing), 10 s at most."""
    sizes = [-1]

    def still() -> bool:
        text = log.read_text(errors="replace")
        sizes.append(len(text))
        return "most recent call first" in text and sizes[-1] == sizes[-2]

    with contextlib.suppress(AssertionError):  # the failure is the hang, stacks or not
        eventually(still, timeout=10, interval=0.2)


def _tail(log: Path, lines: int = 15) -> str:
    return "".join(log.read_text(errors="replace").splitlines(keepends=True)[-lines:])


@pytest.mark.slow
def test_sigterm_and_sigint_anywhere_in_a_runners_life_stop_it_cleanly(db_url: str, tmp_path: Path) -> None:
    seed = int(os.environ.get("RUNNER_TEST_SIGNAL_SEED") or time.time_ns() % 1_000_000)
    lives = plan(random.Random(seed), LIVES)
    with ThreadPoolExecutor(AT_ONCE) as pool:
        failures = [f for f in pool.map(lambda life: live(db_url, tmp_path, life), lives) if f]
    assert not failures, (f"seed {seed} (RUNNER_TEST_SIGNAL_SEED): {len(failures)} of {len(lives)} "
                          "runners did not stop cleanly:\n\n" + "\n\n".join(failures))
    # every runner that registered deregistered on its way out
    left = rows(db_url, "SELECT pid, started_at FROM runner.instances WHERE stopped_at IS NULL")
    assert left == [], f"seed {seed}: runners still registered: {left}"
    # the signals landed during startup and later: some runners stopped before registering,
    # the others after, once handlers had run (the flood often lands in the shutdown grace)
    registered = scalar(db_url, "SELECT count(*) FROM runner.instances")
    ran = scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'")
    assert registered > 0 and ran > 0, (seed, registered, ran)


# -- the handler itself ---------------------------------------------------------------------


def _worker() -> Any:
    """A Worker that is never started (its stop() sets its two Events; no database)."""
    from runner import Runner
    from runner.worker.loop import Worker

    app = Runner()

    @app.job("nothing", every="1h")
    def nothing(ctx: Any) -> None:
        pass

    return Worker(app, "postgresql:///never-connected")


main_thread_only = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                                      reason="signal handlers are installed on the main thread")


@main_thread_only
def test_a_signal_inside_the_locks_the_main_thread_holds_is_handled_at_once() -> None:
    """The race of 834fae1 made certain: the main thread holds the locks of the Worker's two
    Events (as inside Event.wait and Event.set) and threading's shutdown lock (as at the end
    of a join), another thread holds the logging locks, and the signal is raised right
    there. A handler that calls stop(), logs or starts a (non-daemon) thread waits for one
    of them: a watchdog lets them all go after WAIT seconds (no hung suite); the test fails."""
    from runner.worker.signals import SignalStop

    wait = 5.0
    worker = _worker()
    runner_log = logging.getLogger("runner")
    level = runner_log.level
    runner_log.setLevel(logging.INFO)  # a handler's log line would reach the root's handlers
    stopping = SignalStop(runner_log)
    stopping.install()
    stopping.stop_with(worker.stop)
    locks = [worker._wake._cond._lock, worker._stop._cond._lock]
    if hasattr(threading, "_shutdown_locks_lock"):  # CPython 3.11, 3.12
        locks.append(threading._shutdown_locks_lock)
    held_logging, free_logging, armed, handled = (threading.Event() for _ in range(4))
    decide, released, rescued = threading.Lock(), [], []

    def hold_logging() -> None:  # RLocks: only their owner may let them go
        handlers = logging.getLogger().handlers
        with logging._lock:  # type: ignore[attr-defined]
            for h in handlers:
                h.acquire()
            held_logging.set()
            free_logging.wait()
            for h in handlers:
                h.release()

    def release() -> None:
        with decide:
            if not released:
                released.append(True)
                for lock in locks:
                    lock.release()

    def watchdog() -> None:
        armed.wait()
        if not handled.wait(wait):
            rescued.append(True)
            free_logging.set()
            release()

    # both threads begin before the locks are taken (a thread begins under the shutdown lock)
    holder = threading.Thread(target=hold_logging, daemon=True)
    guard = threading.Thread(target=watchdog, daemon=True)
    holder.start()
    guard.start()
    try:
        assert held_logging.wait(10)
        for lock in locks:
            lock.acquire()
        armed.set()
        began = time.monotonic()
        signal.raise_signal(signal.SIGTERM)  # the handler runs here, inside the held locks
        took = time.monotonic() - began
        handled.set()
        release()
        free_logging.set()
        guard.join(10)
        holder.join(10)
        assert not rescued, f"the handler waited {took:.1f}s for a lock its own thread held"
        # the watcher thread stops the worker once the locks are free
        eventually(worker._stop.is_set, timeout=10, message="the worker is stopped")
        assert worker._wake.is_set()
    finally:
        armed.set()
        handled.set()
        release()
        free_logging.set()
        stopping.close()
        runner_log.setLevel(level)


@main_thread_only
def test_the_handler_calls_nothing() -> None:
    """No lock, no logging, no Event, no thread, not even os.write (each call that lets the
    GIL go lets another handler run inside this one): a profiler sees the handler called
    for each signal, and nothing called from it, Python function or C function."""
    from runner.worker.signals import SignalStop

    stopping = SignalStop(logging.getLogger("runner"))
    stopping.install()
    calls: list[str] = []

    def profile(frame: Any, what: str, arg: Any) -> None:
        if what == "call":
            calls.append(frame.f_code.co_qualname)
        elif what == "c_call":
            calls.append(f"{getattr(arg, '__module__', None)}.{arg.__qualname__}")

    try:
        for signum in (signal.SIGINT, signal.SIGTERM):  # (SIGTERM then SIGINT: an exit at once)
            sys.setprofile(profile)
            try:
                signal.raise_signal(signum)
            finally:
                sys.setprofile(None)
            assert calls == ["_signal.raise_signal", "SignalStop.on_signal", "sys.setprofile"], calls
            calls.clear()
        # and the signals reach the watcher all the same (Python's C handler wrote them)
        eventually(stopping.requested.is_set, timeout=10, message="the stop is requested")
    finally:
        stopping.close()


class Gate(logging.Handler):
    """A log handler that holds up whoever logs until it is opened (but the main thread: a
    handler that logs fails the test, it does not hang it)."""

    def __init__(self) -> None:
        super().__init__()
        self.opened = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.opened.wait(30)


@main_thread_only
def test_a_flood_of_signals_fills_the_pipe_and_nothing_blocks() -> None:
    """A flood of signals fills the pipe while the watcher is held up (here by its first log
    line): the signals still return at once (a full pipe drops the mark, and says nothing),
    and the stop happens once the watcher goes on."""
    from runner.worker.signals import SignalStop

    gate = Gate()
    held_up = logging.Logger("runner-test-signals", logging.INFO)
    held_up.addHandler(gate)
    stopping = SignalStop(held_up)
    stopping.install()
    worker = _worker()
    stopping.stop_with(worker.stop)
    try:
        began = time.monotonic()
        for _ in range(100_000):  # more than a pipe holds (64 KiB on Linux)
            signal.raise_signal(signal.SIGTERM)
        took = time.monotonic() - began
        with pytest.raises(BlockingIOError):  # the pipe is full indeed
            os.write(stopping._write, b"\x0f")
        assert not worker._stop.is_set()
        gate.opened.set()
        eventually(worker._stop.is_set, timeout=10, message="the worker is stopped")
        assert took < 30, took
    finally:
        gate.opened.set()
        stopping.close()


# -- the console ----------------------------------------------------------------------------


@pytest.mark.slow
def test_runner_web_stops_at_a_flood_of_sigterms(db_url: str, tmp_path: Path) -> None:
    """`runner web` takes its signals through SignalStop, as `runner start` does (the
    handler does nothing; a thread sets uvicorn's exit flag), not through uvicorn's handlers,
    which raised the signal again once shut down (the console then died by SIGTERM: 143). It
    stops within BOUND seconds however many come, and exits 0."""
    from tests.web.conftest import free_port

    port, log = free_port(), tmp_path / "web.log"
    with log.open("w") as out:
        proc = subprocess.Popen(runner_cmd("web", "--port", str(port), "--database-url", db_url, "--open-reads"),
                                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            def serving() -> bool:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/login", timeout=2) as r:
                        return bool(r.status == 200)
                except OSError:
                    return False

            eventually(lambda: proc.poll() is not None or serving(), timeout=60, interval=0.05,
                       message="runner web serves /login")
            assert proc.poll() is None, log.read_text()
            proc.send_signal(signal.SIGTERM)
            until = time.monotonic() + FLOOD_FOR
            while proc.poll() is None and time.monotonic() < until:
                os.kill(proc.pid, signal.SIGTERM)
            code = proc.wait(BOUND)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert code == 0, log.read_text()
