"""A real PgBouncer for the tests (Debian's ``pgbouncer`` package, 1.18, installed by .ci/run):
``/usr/sbin/pgbouncer`` started by the test itself (never the system service), with its own ini
in the test's tmp_path, listening on 127.0.0.1 and a free port, pooling the test's database in
the pool mode the test asks for. Clients connect as any user (``auth_type = any``); PgBouncer
logs into PostgreSQL as the test database's user. Started as root (CI), it drops to the
``postgres`` user, as PgBouncer refuses to run as root."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.promserver import free_port
from tests.support import eventually

PGBOUNCER = Path("/usr/sbin/pgbouncer")


def need() -> None:
    """Skip the test when the Debian package's program is absent (CI installs it: .ci/run)."""
    if not PGBOUNCER.exists() or shutil.which(str(PGBOUNCER)) is None:
        pytest.skip(f"{PGBOUNCER} is absent: `apt-get install pgbouncer` (.ci/run installs it)")


class Bouncer:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.url, self.proc, self.log = url, proc, log

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def pgbouncer(tmp_path: Path, db_url: str, mode: str, pool_size: int = 4, *extra: str) -> Iterator[Bouncer]:
    """PgBouncer in ``mode`` (session, transaction, statement) in front of ``db_url``'s
    database, until the block ends (``extra``: more lines of its [pgbouncer] section)."""
    need()
    params = conninfo_to_dict(db_url)
    home = tmp_path / f"pgbouncer-{mode}"
    home.mkdir()
    server = " ".join(f"{k}={v}" for k, v in (
        ("host", params.get("host") or "127.0.0.1"), ("port", params.get("port") or "5432"),
        ("dbname", params["dbname"]), ("user", params.get("user") or "postgres"),
        ("password", params.get("password"))) if v)
    port = free_port()
    ini = home / "pgbouncer.ini"
    lines = [
        "[databases]", f"pooled = {server}", "",
        "[pgbouncer]", "listen_addr = 127.0.0.1", f"listen_port = {port}", "unix_socket_dir =",
        "auth_type = any", f"pool_mode = {mode}", f"default_pool_size = {pool_size}",
        "max_client_conn = 200", "server_lifetime = 3600", "server_idle_timeout = 600",
        "ignore_startup_parameters = extra_float_digits,options", "admin_users = postgres", *extra,
    ]
    if os.geteuid() == 0:  # PgBouncer will not run as root
        lines.append("user = postgres")
        uid = pwd.getpwnam("postgres").pw_uid
        os.chown(home, uid, -1)
    ini.write_text("\n".join(lines) + "\n")
    ini.chmod(0o644)
    log = home / "pgbouncer.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(PGBOUNCER), str(ini)], stdout=out, stderr=subprocess.STDOUT)
    url = f"postgresql://{quote(params.get('user') or 'postgres')}@127.0.0.1:{port}/pooled"
    bouncer = Bouncer(url, proc, log)
    try:
        def up() -> bool:
            assert proc.poll() is None, bouncer.output()
            try:
                with psycopg.connect(url, connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return True
            except psycopg.OperationalError:
                return False
        eventually(up, timeout=30, interval=0.1, message="pgbouncer accepting connections")
        yield bouncer
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
