"""The embedded server is private to its account (issue 12, point 9).

A project path long enough that the socket cannot live in ``./.runner/`` (the earlier
server then put it in a shared directory of mode 0777 and trusted every local user), under
a parent of mode 0700 (which the earlier server widened to 0755). Another local user (made
with ``useradd``), who even knows the password, cannot connect; nobody connects without the
password; no TCP listener; the server runs with no root group. Needs root (to make the
other user); skipped otherwise.

Fails before the fix: the socket directory was /tmp/<hash> of mode 0777, authentication
trust, the server's gid 0, the 0700 parent became 0755, and the other user got in.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psutil
import psycopg
import pytest

from runner.store import embedded

INTRUDER = "runner-intruder"
USER = "runner-tester"  # an ordinary user who runs the runner (the non-root case)
PSQL = shutil.which("psql")
# a Python of the same version as this one that any user may run, to run the runner as USER
USER_PYTHON = Path(f"/usr/bin/python3.{sys.version_info.minor}")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: makes another OS user with useradd")


def os_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        made = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                              capture_output=True, text=True)
        assert made.returncode in (0, 9), made.stderr
        return pwd.getpwnam(name)


@pytest.fixture(scope="module")
def intruder() -> pwd.struct_passwd:
    return os_user(INTRUDER)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """A project directory whose ./.runner/socket path is too long for a socket address,
    under a parent of mode 0700."""
    parent = tmp_path / "private"
    parent.mkdir(mode=0o700)
    parent.chmod(0o700)
    home = parent / ("a-project-with-a-rather-long-name-" * 3) / ".runner"
    assert len(str(home)) >= 79
    home.parent.mkdir()
    yield home
    embedded.destroy(home)


def socket_dir_of(url: str) -> Path:
    return Path(parse_qs(urlsplit(url).query)["host"][0])


def as_user(user: pwd.struct_passwd, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, user=user.pw_uid,
                          group=user.pw_gid, extra_groups=[], cwd="/", env={"PATH": "/usr/bin:/bin", **env})


def test_another_local_user_cannot_connect(project: Path, intruder: pwd.struct_passwd) -> None:
    ancestors = {p: stat.S_IMODE(p.stat().st_mode) for p in list(project.parents)[:4]}
    server = embedded.start(project)
    assert server.started
    # the runner itself connects, with the generated password
    with psycopg.connect(server.url, autocommit=True) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("",)
        assert conn.execute("SHOW password_encryption").fetchone() == ("scram-sha-256",)
        hba = conn.execute("SELECT DISTINCT type, auth_method FROM pg_hba_file_rules").fetchall()
        assert {m for _, m in hba} == {"scram-sha-256"}, hba
    # a private socket directory, whatever the path's length; a private password file
    sock = socket_dir_of(server.url)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o700
    assert stat.S_IMODE((sock / ".s.PGSQL.5432").stat().st_mode) == 0o700
    assert stat.S_IMODE((project / "password").stat().st_mode) == 0o600
    assert stat.S_IMODE(server.pgdata.stat().st_mode) == 0o700
    # no permission of the user's directories widened
    assert {p: stat.S_IMODE(p.stat().st_mode) for p in ancestors} == ancestors
    # the server: not root, no root group, no TCP listener
    proc = psutil.Process(server.pid)
    assert 0 not in proc.uids() and 0 not in proc.gids(), (proc.uids(), proc.gids())
    groups = next(line for line in Path(f"/proc/{server.pid}/status").read_text().splitlines()
                  if line.startswith("Groups:"))
    assert "0" not in groups.split()[1:], groups
    listening = [c for c in proc.net_connections("inet") if c.status == psutil.CONN_LISTEN]
    assert not listening, listening
    # nobody connects without the password, not even root on the socket
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(f"host={sock} port=5432 user=postgres dbname=postgres password=wrong",
                        connect_timeout=5).close()
    # another local user, who even knows the password, is refused at the socket directory
    assert PSQL is not None, "psql is needed to try as another user"
    password = (project / "password").read_text().strip()
    for pw in ("", password):
        tried = as_user(intruder, PSQL, "-X", "-w", f"host={sock} port=5432 user=postgres dbname=postgres",
                        "-c", "SELECT 1", env={"PGPASSWORD": pw, "PGCONNECT_TIMEOUT": "5"})
        assert tried.returncode != 0, tried.stdout
        assert "Permission denied" in tried.stderr, tried.stderr
    # ... and cannot read the password file either
    tried = as_user(intruder, "cat", str(project / "password"), env={})
    assert tried.returncode != 0 and password not in tried.stdout
    # reused by the next command; stopped by stop()
    again = embedded.start(project)
    assert not again.started and again.pid == server.pid and again.url == server.url
    assert embedded.stop(project)
    assert not psutil.pid_exists(server.pid) or psutil.Process(server.pid).status() == psutil.STATUS_ZOMBIE


AS_USER = """
import json, site, sys
site.addsitedir(sys.argv[1])
import psycopg
from pathlib import Path
from runner.store import embedded
home = Path(sys.argv[3])
if sys.argv[2] == "start":
    server = embedded.start(home)
    with psycopg.connect(server.url, autocommit=True) as conn:
        user = conn.execute("SELECT current_user").fetchone()[0]
    print(json.dumps({"url": server.url, "pid": server.pid, "socket_dir": str(server.socket_dir),
                      "pgdata": str(server.pgdata), "user": user}))
else:
    print(json.dumps({"stopped": embedded.stop(home)}))
"""


def _closed_to_others(path: Path) -> Path | None:
    """The first directory above ``path`` that other users cannot enter, if any."""
    for folder in path.resolve().parents:
        if not folder.stat().st_mode & stat.S_IXOTH:
            return folder
    return None


@pytest.mark.skipif(not USER_PYTHON.exists(), reason=f"needs {USER_PYTHON} to run the runner as another user")
def test_an_ordinary_users_server_is_closed_to_other_users(intruder: pwd.struct_passwd) -> None:
    """The non-root case: an ordinary user's embedded server (its own account, data under
    ./.runner/postgres, a long project path: the socket in a fresh 0700 directory under the
    temp directory) refuses another local user."""
    owner = os_user(USER)
    top = Path(tempfile.mkdtemp(prefix="runner-user-test-"))  # /tmp: every user can reach it
    os.chown(top, owner.pw_uid, owner.pw_gid)
    home = top / ("an-ordinary-users-project-with-a-long-name-" * 2) / ".runner"
    site = sysconfig.get_paths()["purelib"]
    unreachable = _closed_to_others(Path(site)) or _closed_to_others(Path(embedded.__file__))
    if unreachable is not None:  # the ordinary user could not import the runner at all
        pytest.skip(f"{unreachable} is closed to other users (a checkout or virtualenv under a 0700 "
                    "directory, e.g. mktemp -d): the runner cannot run as another user from here")

    def run(action: str) -> dict[str, object]:
        done = as_user(owner, str(USER_PYTHON), "-c", AS_USER, site, action, str(home), env={})
        assert done.returncode == 0, done.stderr
        result: dict[str, object] = json.loads(done.stdout)
        return result

    try:
        as_user(owner, "mkdir", "-p", str(home.parent), env={})
        started = run("start")
        assert started["user"] == "postgres"
        sock = Path(str(started["socket_dir"]))
        assert sock.parent == Path(tempfile.gettempdir()) and sock.name.startswith("runner-pg-")
        assert stat.S_IMODE(sock.stat().st_mode) == 0o700 and sock.stat().st_uid == owner.pw_uid
        assert Path(str(started["pgdata"])) == home / "postgres"
        assert stat.S_IMODE((home / "password").stat().st_mode) == 0o600
        proc = psutil.Process(int(str(started["pid"])))
        assert set(proc.uids()) == {owner.pw_uid} and set(proc.gids()) == {owner.pw_gid}
        assert not [c for c in proc.net_connections("inet") if c.status == psutil.CONN_LISTEN]
        assert PSQL is not None
        password = (home / "password").read_text().strip()
        for pw in ("", password):
            tried = as_user(intruder, PSQL, "-X", "-w", f"host={sock} port=5432 user=postgres dbname=postgres",
                            "-c", "SELECT 1", env={"PGPASSWORD": pw, "PGCONNECT_TIMEOUT": "5"})
            assert tried.returncode != 0 and "Permission denied" in tried.stderr, tried.stderr
        assert run("stop") == {"stopped": True}
        assert not sock.exists()  # the temporary socket directory goes with the server
    finally:
        as_user(owner, str(USER_PYTHON), "-c", AS_USER, site, "stop", str(home), env={})
        shutil.rmtree(top, ignore_errors=True)


def test_binaries_copied_for_an_account_that_cannot_reach_them_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """As root, when the server's account cannot reach the installed binaries (a checkout or
    virtualenv under a 0700 directory), the runner copies them where it can. The copy must
    run: the bundled binaries load libpq and the rest through a relative RPATH into the
    wheel's <package>.libs, which the earlier copy (the install directory alone) left behind,
    so its initdb failed ("libpq-....so: cannot open shared object file") and no embedded
    server could start. (The installed binaries are reported unreachable here to take that
    path whatever this checkout's permissions; what runs is the real copy.)"""
    import secrets

    account = embedded._account()
    root = embedded.ROOT_DATA / f"test-copy-{secrets.token_hex(4)}"
    root.mkdir(mode=0o700)
    os.chown(root, account.uid, account.gid)
    real_can_run = embedded._can_run
    monkeypatch.setattr(embedded, "ROOT_DATA", root)
    monkeypatch.setattr(embedded, "_can_run", lambda binary, acct: root in binary.parents and real_can_run(binary, acct))
    try:
        bin_dir = embedded._binaries(root / "no-data-yet", account)
        assert root in bin_dir.parents, bin_dir
        done = subprocess.run([str(bin_dir / "initdb"), "--version"], capture_output=True, text=True,
                              timeout=30, **account.run_as)  # type: ignore[call-overload]
        assert done.returncode == 0 and "PostgreSQL" in done.stdout, done.stderr
        assert embedded._binaries(root / "no-data-yet", account) == bin_dir  # made once, then reused
    finally:
        shutil.rmtree(root, ignore_errors=True)
