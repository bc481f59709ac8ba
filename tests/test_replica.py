"""A streaming replica's replay lag is not job lag (issue 29, point 5; runner.ledger_now_v1).

A primary and a streaming replica of our own (PostgreSQL's initdb, pg_basebackup -R, on free
ports in a temporary directory: the machine's server has no replication entry), a real
`runner start` on the primary and a real `runner web` reading the replica. With replay
paused, the replica judges every view as of its last replayed commit: no `late` alert, no
missing slots growing, lag not growing; the console shows the replay lag with a warning over
--replay-lag-warning. Resumed, and once idle with nothing to replay, it is current again.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import ROOT, RunnerProcess, eventually, rows, run_cli, runner_cmd, scalar
from tests.web.conftest import free_port

BINDIRS = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
BIN = next((Path(d) for d in BINDIRS if (Path(d) / "initdb").exists()), None)
pytestmark = pytest.mark.skipif(BIN is None or shutil.which("pg_basebackup") is None,
                                reason="PostgreSQL server binaries (initdb, pg_ctl) are not installed")
APP = "tests/apps/replica.py:app"


def _account() -> dict[str, Any]:
    """How to run PostgreSQL's tools: as we are, or, as root (which they refuse), as the OS
    account ``postgres``."""
    if os.geteuid() != 0:
        return {}
    import pwd

    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("run as root, and no OS account postgres to run a server as")
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _pg(tool: str, *args: str, timeout: float = 120) -> None:
    assert BIN is not None
    done = subprocess.run([str(BIN / tool), *args], capture_output=True, text=True, timeout=timeout,
                          cwd="/", **_account())
    assert done.returncode == 0, f"{tool}: {done.stderr[-2000:]}"


@contextmanager
def server(data: Path, port: int, log: Path, settings: list[str]) -> Iterator[str]:
    options = " ".join(f"-c {s}" for s in settings)
    _pg("pg_ctl", "start", "-w", "-t", "120", "-D", str(data), "-l", str(log), "-o",
        f"-p {port} -k {data} -c listen_addresses=127.0.0.1 {options}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}"
    finally:
        _pg("pg_ctl", "stop", "-m", "immediate", "-w", "-D", str(data))


@pytest.fixture
def cluster() -> Iterator[tuple[str, str]]:
    """(primary URL, replica URL) of the database ``app``, migrated on the primary. Their
    directories are the servers' account's (pytest's tmp_path may be root's, unreachable)."""
    account = _account()
    base = Path(tempfile.mkdtemp(prefix="runner-replica-"))
    try:
        if account:
            os.chown(base, account["user"], account["group"])
        yield from _cluster(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _cluster(tmp_path: Path) -> Iterator[tuple[str, str]]:
    primary_dir, replica_dir = tmp_path / "primary", tmp_path / "replica"
    _pg("initdb", "-D", str(primary_dir), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    # small, fast, and no autovacuum: an idle primary then commits nothing (appended by the
    # servers' account, which owns the file)
    settings = ["fsync=off", "synchronous_commit=off", "shared_buffers=16MB", "max_connections=40",
                "autovacuum=off", "wal_level=replica", "max_wal_senders=4"]
    primary_port, replica_port = free_port(), free_port()
    with server(primary_dir, primary_port, tmp_path / "primary.log", settings) as primary:
        with psycopg.connect(primary + "/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE app")
        up = run_cli("db", "upgrade", url=primary + "/app", timeout=300)
        assert up.returncode == 0, up.stderr
        _pg("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary_port), "-U", "postgres", "-D",
            str(replica_dir), "-R", "-X", "stream", "--no-sync", "--checkpoint=fast")
        with server(replica_dir, replica_port, tmp_path / "replica.log", settings) as replica:
            yield primary + "/app", replica + "/app"


@contextmanager
def console(primary: str, replica: str, log: Path) -> Iterator[int]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_WEB_")}
    with log.open("w") as out:
        proc = subprocess.Popen(runner_cmd("web", "--port", str(port), "--database-url", primary,
                                           "--read-database-url", replica, "--open-reads",
                                           "--replay-lag-warning", "3"),
                                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            def up() -> bool:
                assert proc.poll() is None, log.read_text()
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/login", timeout=2) as r:
                        return bool(r.status == 200)
                except OSError:
                    return False

            eventually(up, timeout=60, interval=0.1, message="runner web serves /login")
            yield port
        finally:
            proc.terminate()
            proc.wait(30)


def get(port: int, path: str) -> tuple[str, dict[str, str]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        return r.read().decode(), dict(r.headers)


TICK_AT_NOW = ("SELECT count(*) FROM runner.missing_slots_v1(now(), 'tick') "
               "WHERE state = 'never_started'")


@pytest.mark.slow
def test_a_paused_replica_is_judged_as_of_its_replay(cluster: tuple[str, str], tmp_path: Path) -> None:
    primary, replica = cluster
    proc = RunnerProcess(APP, primary, "--poll-interval", "0.2", log=tmp_path / "runner.log")
    try:
        eventually(lambda: scalar(replica, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'tick' "
                                           "AND status = 'succeeded'") >= 3,
                   timeout=60, message="the primary's runs replayed on the replica")
        with console(primary, replica, tmp_path / "web.log") as port:
            page, _ = get(port, "/")
            assert "read from a replica: the ledger as of" in page and "replay lag over" not in page
            with psycopg.connect(replica, autocommit=True) as conn:
                conn.execute("SELECT pg_wal_replay_pause()")
            # the primary goes on (runs, heartbeats): WAL arrives and waits
            eventually(lambda: scalar(replica, "SELECT now() - pg_last_xact_replay_timestamp() "
                                               "> interval '5 seconds'"),
                       timeout=60, message="the replica's replay is 5 s behind")
            as_of, replayed, lag = (scalar(replica, q) for q in (
                "SELECT runner.ledger_now_v1()", "SELECT pg_last_xact_replay_timestamp()",
                "SELECT extract(epoch FROM now() - runner.ledger_now_v1())"))
            assert as_of == replayed and lag > 5
            # judged at the replica's clock, the slots since the pause look never started ...
            assert scalar(replica, TICK_AT_NOW) >= 3
            # ... judged as of the replay, nothing is late, missing or lagging that was not then
            assert scalar(replica, "SELECT count(*) FROM runner.alerts WHERE kind = 'late'") == 0
            missing = scalar(replica, "SELECT count(*) FROM runner.missing_slots WHERE job_name = 'tick'")
            assert missing <= 1  # at most the slot of the instant replayed, its run not yet
            assert scalar(replica, "SELECT lag < interval '3 seconds' FROM runner.job_health "
                                   "WHERE job_name = 'tick'")
            page, _ = get(port, "/")
            assert "replay lag over 3 s" in page and 'role="alert"' in page, page
            alerts, _ = get(port, "/alerts")
            assert "late" not in alerts.split("<main", 1)[1]
            _, headers = get(port, "/api/jobs")
            assert float(headers["x-runner-replay-lag-seconds"]) > 5
            status = run_cli("status", "--json", url=replica)
            assert status.returncode == 0, status.stderr
            report = json.loads(status.stdout)
            assert report["replica"] and report["replay_lag_seconds"] > 5
            assert not [a for a in report["alerts"] if a["kind"] == "late"]
            # the lag does not grow while replay stays paused: the same missing slots later
            eventually(lambda: scalar(replica, "SELECT extract(epoch FROM now() - runner.ledger_now_v1())")
                       > lag + 2, timeout=30, message="time passes on the replica")
            assert scalar(replica, "SELECT count(*) FROM runner.missing_slots "
                                   "WHERE job_name = 'tick'") == missing
            assert scalar(replica, "SELECT count(*) FROM runner.alerts WHERE kind = 'late'") == 0

            with psycopg.connect(replica, autocommit=True) as conn:
                conn.execute("SELECT pg_wal_replay_resume()")
            eventually(lambda: "replay lag over" not in get(port, "/")[0], timeout=60,
                       message="the warning goes once the replica caught up")
    finally:
        assert proc.terminate() == 0, proc.output()
    # idle: nothing committed on the primary, the replica has replayed all it received; its
    # last replayed commit ages, but it is current: judged at now()
    eventually(lambda: scalar(replica, "SELECT now() - pg_last_xact_replay_timestamp() > interval '3 seconds' "
                                       "AND pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()"),
               timeout=60, message="an idle, caught-up replica")
    assert scalar(replica, "SELECT runner.ledger_now_v1() = now()")
    # (the job is late now, for real: its runner stopped; the replica says what the primary says)
    assert rows(replica, "SELECT kind, job_name FROM runner.alerts ORDER BY 1, 2") \
        == rows(primary, "SELECT kind, job_name FROM runner.alerts ORDER BY 1, 2")
