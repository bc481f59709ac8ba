"""A pre-imported ``runner`` CLI for the tests: each call is still a process of its own.

Most tests drive the CLI as a user would, one ``runner ...`` process per command, and start
real ``runner start`` processes. A fresh interpreter spends most of such a call importing
(psycopg, typer, rich, croniter: about 0.5 s on a quiet two-core machine, 1-2 s under load),
and the suite makes hundreds of them. This server imports ``runner.cli`` (and what ``runner
start`` imports on its first step) once, listens on a Unix socket, and forks one child per
connection; the child takes the caller's arguments, environment, working directory and
standard streams (file descriptors passed over the socket, as a subprocess inherits them),
runs ``runner.cli.main`` exactly as ``python -m runner`` does, and ends as the interpreter
would (non-daemon threads joined, atexit handlers, streams flushed; an uncaught
KeyboardInterrupt dies of SIGINT). Nothing runs in the server itself, so no state carries
from one command to the next (each child starts from the state right after import), and the
child keeps nothing of the server's: not its listening socket, not the connections of the
other children, not its wake-up pipe nor its SIGCHLD handler (the server has no threads: it
checks).

The server is the children's parent: it reaps each child (waitpid, on SIGCHLD) and reports
its exit status to the caller as subprocess does (``-N`` for a child killed by signal N).

tests/support.py uses it (``run_cli``, and ``RunnerProcess`` through ``ForkedProcess``, a
Popen-like object); it falls back to a plain subprocess for what a forked child would see
differently from a fresh interpreter: ``web``, environments that set differently from the
server's the variables read at import or at interpreter start-up (``RUNNER_CRASH_*``,
``PYTHON*``, the locale's ``LC_*``/``LANG*``), and ``RUNNER_TEST_NO_ZYGOTE=1``.

Protocol (one JSON line each way, then one more from the server): request ``{"args", "env",
"cwd", "session"}`` sent with three file descriptors (SCM_RIGHTS: the child's stdin, stdout
and stderr); with ``session`` the child calls setsid (a CLI call the caller may kill as a
group), else it stays in the server's session and process group, which are the caller's (as
a subprocess's). Answers: ``{"pid": N}`` from the child once it is set up, then ``{"code": N}``
from the server once the child is reaped.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 16)
        if not more:
            raise EOFError("the request ended early")
        data += more
    return json.loads(data), fds


def _finish(code: int) -> int:
    """What the interpreter does at its end (Py_FinalizeEx): wait for non-daemon threads,
    run atexit handlers, flush the standard streams (exit code 120 if that fails)."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except Exception:
        traceback.print_exc()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            code = 120
    return code


def _child(conn: socket.socket, server_sockets: list[socket.socket], server_fds: tuple[int, ...],
           sigchld: Any) -> None:
    code = 1
    interrupted = False
    try:
        # nothing of the server's goes on into the command
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, sigchld)
        for sock in server_sockets:
            os.close(sock.detach())
        for fd in server_fds:
            os.close(fd)
        request, fds = _receive(conn)
        if request["session"]:
            os.setsid()
        for target, passed in zip((0, 1, 2), fds, strict=True):
            os.dup2(passed, target)
        for passed in set(fds) - {0, 1, 2}:
            os.close(passed)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        time.tzset()
        sys.path[0] = request["cwd"]
        conn.sendall((json.dumps({"pid": os.getpid()}) + "\n").encode())
        conn.close()
        import runner
        from runner.cli import main

        # what ``python -m runner`` gives (click names the program after it in usage lines)
        sys.argv = [os.path.join(os.path.dirname(runner.__file__), "__main__.py"), *request["args"]]
        sys.modules["__main__"].__package__ = "runner"

        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except KeyboardInterrupt:
            traceback.print_exc()
            interrupted = True
        except BaseException:
            traceback.print_exc()
            code = 1
        code = _finish(code)
    except KeyboardInterrupt:  # before the command began
        interrupted = True
    except BaseException:
        traceback.print_exc()
    finally:
        if interrupted:  # as the interpreter does after an uncaught KeyboardInterrupt
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code)


def _reap(children: dict[int, socket.socket]) -> None:
    """Collect every child that ended and tell its caller how (subprocess's returncode)."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        try:
            conn.sendall((json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n").encode())
        except OSError:
            pass  # the caller went away
        finally:
            conn.close()


def serve(path: str) -> None:
    # the import every child shares, and what ``runner start`` imports on its first step
    import runner.cli
    import runner.events
    import runner.worker.loop
    import runner.worker.metrics  # noqa: F401

    assert threading.active_count() == 1, "an import started a thread: the children would not have it"
    sigchld = signal.getsignal(signal.SIGCHLD)  # what the children get back (as inherited)
    if sigchld not in (signal.SIG_DFL, signal.SIG_IGN):
        sigchld = signal.SIG_DFL
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes the select below
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:  # until the test process that started it goes (its end of our stdin closes)
        readable, _, _ = select.select([server, sys.stdin, wake_r], [], [])
        if wake_r in readable:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
        _reap(children)
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            return
        if server not in readable:
            continue
        conn, _ = server.accept()
        pid = os.fork()
        if pid == 0:
            _child(conn, [server, *children.values()], (wake_r, wake_w), sigchld)
        children[pid] = conn


if __name__ == "__main__":
    serve(sys.argv[1])
