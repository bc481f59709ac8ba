"""A pre-imported ``runner`` CLI for the tests: each call is still a process of its own.

Most tests drive the CLI as a user would, one ``runner ...`` process per command. A fresh
interpreter spends most of such a call importing (psycopg, typer, rich, croniter: about 0.5 s
on a quiet two-core machine, 1-2 s under load), and the suite makes hundreds of calls. This
server imports ``runner.cli`` once, listens on a Unix socket, and forks one child per
connection; the child takes the caller's arguments, environment, working directory and
output files, runs ``runner.cli.main`` exactly as ``python -m runner`` does, and reports its
pid and then its exit code. Nothing runs in the server itself, so no state carries from one
command to the next (each child starts from the state right after import).

tests/support.py ``run_cli`` uses it; it falls back to a plain subprocess for what a forked
child would see differently from a fresh interpreter: ``start`` and ``web`` (long-lived
processes the tests signal), environments that set the fault-injection variables read at
import (``RUNNER_CRASH_*``) or any ``PYTHON*`` variable, and ``RUNNER_TEST_NO_ZYGOTE=1``.

Protocol (one JSON line each way, then one more from the child): request ``{"args", "env",
"cwd", "stdin", "stdout", "stderr"}`` (the last three are file paths); answers ``{"pid": N}``
then ``{"code": N}``. A child killed by a signal closes the socket without a code.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time


def _child(conn: socket.socket) -> None:
    code = 1
    try:
        request = json.loads(conn.makefile("r").readline())
        conn.sendall((json.dumps({"pid": os.getpid()}) + "\n").encode())
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.setsid()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        time.tzset()
        sys.path[0] = request["cwd"]
        for fd, path, mode in ((0, request["stdin"], os.O_RDONLY),
                               (1, request["stdout"], os.O_WRONLY | os.O_TRUNC),
                               (2, request["stderr"], os.O_WRONLY | os.O_TRUNC)):
            opened = os.open(path, mode)
            os.dup2(opened, fd)
            os.close(opened)
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
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        try:
            conn.sendall((json.dumps({"code": code}) + "\n").encode())
        finally:
            os._exit(code)


def serve(path: str) -> None:
    import runner.cli  # noqa: F401 - the import every child shares

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    print("ready", flush=True)
    while True:  # until the test process that started it goes (its end of our stdin closes)
        readable, _, _ = select.select([server, sys.stdin], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            return
        if server not in readable:
            continue
        conn, _ = server.accept()
        if os.fork() == 0:
            server.close()
            _child(conn)
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
