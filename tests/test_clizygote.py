"""The tests' fork server (tests/clizygote.py): a ``runner start`` forked from it is, as far
as a test can see, what a fresh ``python -m runner start`` subprocess is (signal
dispositions, process group and session, standard streams, nothing of the server's), and
its caller learns how it ended as from subprocess.Popen (the server reaps it: no zombie).

Fails before the change: RunnerProcess always made a plain subprocess (the first assertion);
with the server ignoring SIGCHLD (as it did for CLI calls) a killed child's code was lost.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support import _ZYGOTE, ROOT, ForkedProcess, RunnerProcess, eventually, run_cli, scalar

APP = "tests/apps/hello.py:app"
LIVE = "SELECT count(*) FROM runner.instances WHERE pid = %s AND stopped_at IS NULL"


def _status(pid: int) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if ":\t" in line)


def _standard(mask: str) -> int:
    """A signal mask of /proc/PID/status, signals 1-31 only."""
    return int(mask, 16) & ((1 << 31) - 1)


def _links(pid: int, low: int = 0) -> dict[int, str]:
    """The process's open file descriptors (from ``low`` on) and what each names."""
    found = {}
    for entry in Path(f"/proc/{pid}/fd").iterdir():
        if int(entry.name) >= low:
            with contextlib.suppress(FileNotFoundError):  # closed meanwhile
                found[int(entry.name)] = os.readlink(entry)
    return found


def test_a_forked_runner_start_is_what_a_fresh_one_is(db_url: str, tmp_path: Path) -> None:
    forked = RunnerProcess(APP, db_url, "--poll-interval", "0.2", log=tmp_path / "forked.log")
    fresh = RunnerProcess(APP, db_url, "--poll-interval", "0.2", env={"RUNNER_TEST_NO_ZYGOTE": "1"},
                          log=tmp_path / "fresh.log")
    try:
        assert isinstance(forked.proc, ForkedProcess) and isinstance(fresh.proc, subprocess.Popen)
        for proc in (forked, fresh):
            eventually(lambda p=proc: scalar(db_url, LIVE, (p.proc.pid,)) == 1, timeout=60,  # type: ignore[misc]
                       message=f"runner {proc.proc.pid} registered")
        server = _ZYGOTE[os.getpid()][0].pid
        mine, theirs = _status(forked.proc.pid), _status(fresh.proc.pid)
        assert mine["PPid"] == str(server) and theirs["PPid"] == str(os.getpid())
        # the same signal dispositions: ignored, caught (SIGCHLD: not the server's handler),
        # blocked (sampled until no thread is being started: pthread_create blocks every
        # signal for a moment); of the standard signals (glibc sets real-time ones lazily)
        assert {k: _standard(mine[k]) for k in ("SigIgn", "SigCgt")} == {
            k: _standard(theirs[k]) for k in ("SigIgn", "SigCgt")}
        eventually(lambda: _standard(_status(forked.proc.pid)["SigBlk"])
                   == _standard(_status(fresh.proc.pid)["SigBlk"]), message="the same blocked signals")
        assert not int(mine["SigCgt"], 16) & (1 << (signal.SIGCHLD - 1))
        # the caller's process group and session, as a subprocess's
        assert os.getpgid(forked.proc.pid) == os.getpgid(fresh.proc.pid) == os.getpgid(0)
        assert os.getsid(forked.proc.pid) == os.getsid(fresh.proc.pid) == os.getsid(0)
        # stdin inherited, stdout and stderr the log (one open file: one offset)
        assert _links(forked.proc.pid)[0] == _links(fresh.proc.pid)[0] == os.readlink("/proc/self/fd/0")
        assert _links(forked.proc.pid)[1] == _links(forked.proc.pid)[2] == str(tmp_path / "forked.log")
        # nothing of the server's: no socket or pipe the server holds (its listening socket,
        # the other children's connections, its wake-up pipe, its own stdin and stdout)
        held = {target for target in _links(server).values() if target.startswith(("socket:", "pipe:"))}
        assert held, _links(server)
        assert not held & set(_links(forked.proc.pid, low=3).values())
        assert not held & {_links(forked.proc.pid)[fd] for fd in (1, 2)}
    finally:
        codes = forked.terminate(), fresh.terminate()
    assert codes == (0, 0), forked.output() + fresh.output()
    assert scalar(db_url, "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL") == 0
    assert "runner_started" in forked.output()


def test_a_forked_process_reports_how_it_ended(db_url: str, tmp_path: Path) -> None:
    proc = RunnerProcess(APP, db_url, "--poll-interval", "0.2", log=tmp_path / "runner.log")
    assert isinstance(proc.proc, ForkedProcess)
    pid = proc.proc.pid
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.proc.wait(0.3)
        assert proc.proc.poll() is None and proc.proc.returncode is None
        eventually(lambda: scalar(db_url, LIVE, (pid,)) == 1, timeout=60, message="the runner registered")
        os.kill(pid, signal.SIGSTOP)  # a stopped child is not an ended one
        eventually(lambda: _status(pid)["State"].startswith("T"), message="the runner stopped")
        assert proc.proc.poll() is None
        proc.proc.kill()
        assert proc.proc.wait(10) == -signal.SIGKILL
    finally:
        proc.kill()
    assert proc.proc.returncode == proc.proc.poll() == -signal.SIGKILL
    assert not Path(f"/proc/{pid}").exists()  # reaped by the server: no zombie left
    proc.proc.send_signal(signal.SIGTERM)  # as Popen: a process already reaped gets no signal


def test_a_cli_call_has_a_session_of_its_own_and_its_exit_code(db_url: str, tmp_path: Path) -> None:
    """run_cli's children (``session``): their own session and process group, which run_cli
    kills whole on a timeout."""
    with open(tmp_path / "runner.log", "wb") as log:
        proc = ForkedProcess(["start", "--app", APP, "--poll-interval", "0.2"],
                             {**os.environ, "RUNNER_DATABASE_URL": db_url}, str(ROOT), 0, log.fileno(),
                             log.fileno(), session=True)
    try:
        assert os.getsid(proc.pid) == os.getpgid(proc.pid) == proc.pid != os.getsid(0)
        eventually(lambda: scalar(db_url, LIVE, (proc.pid,)) == 1, timeout=60, message="the runner registered")
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0, (tmp_path / "runner.log").read_text()
    finally:
        proc.kill()
    bad = run_cli("runs", "--limit", "nope", url=db_url)
    assert bad.returncode == 2 and bad.stderr.startswith("runner: error: Invalid value for '--limit'"), bad
