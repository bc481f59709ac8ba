"""sql/roles.sql in tests: roles are cluster-wide and several test sessions may share a
server, so each session applies the file under role names of its own (the file takes them
from the runner.*_role settings) and drops its roles at the end."""

from __future__ import annotations

import os
import secrets
from urllib.parse import quote

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from tests.support import ROOT

KINDS = ("worker", "operator", "readonly")


class SessionRoles:
    """The three group roles under unique names, and one LOGIN user in each."""

    def __init__(self) -> None:
        tag = f"{os.getpid()}_{secrets.token_hex(3)}"
        self.groups = {kind: f"runner_{kind}_t{tag}" for kind in KINDS}
        self.groups["condition"] = f"runner_condition_t{tag}"  # NOLOGIN, no login user
        self.users = {kind: f"rt_{kind}_{tag}" for kind in KINDS}
        self.password = secrets.token_hex(8)

    def settings(self) -> str:
        return "".join(f"SET runner.{kind}_role = '{name}';\n" for kind, name in self.groups.items())

    def apply(self, url: str) -> None:
        """Run sql/roles.sql in the database of ``url`` (as the test superuser), and make
        sure the LOGIN users exist."""
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(self.settings())
            conn.execute((ROOT / "sql" / "roles.sql").read_text())
            for kind, user in self.users.items():
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (user,)).fetchone() is None:
                    conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
                        sql.Identifier(user), sql.Literal(self.password),
                        sql.Identifier(self.groups[kind])))

    def url(self, url: str, kind: str) -> str:
        """A postgresql:// URL for the LOGIN user of ``kind`` on the database of ``url``."""
        params = conninfo_to_dict(url)
        host = str(params.get("host") or "127.0.0.1")
        port = params.get("port") or 5432
        dbname = quote(str(params["dbname"]))
        auth = f"{quote(self.users[kind], safe='')}:{quote(self.password, safe='')}"
        if host.startswith("/"):
            return f"postgresql://{auth}@/{dbname}?host={quote(host)}&port={port}"
        return f"postgresql://{auth}@{host}:{port}/{dbname}"

    def drop(self, admin_url: str) -> None:
        """Drop the session's roles. Their grants lived in per-test databases, dropped by
        then; any left in a database that still exists are dropped there first."""
        names = [*self.users.values(), *self.groups.values()]
        with psycopg.connect(admin_url, autocommit=True) as conn:
            dbs = [r[0] for r in conn.execute(
                "SELECT DISTINCT d.datname FROM pg_shdepend s JOIN pg_database d ON d.oid = s.dbid"
                " JOIN pg_roles r ON r.oid = s.refobjid WHERE r.rolname = ANY(%s)", (names,))]
        for db in dbs:
            params = {**conninfo_to_dict(admin_url), "dbname": db}
            with psycopg.connect(**params, autocommit=True) as conn:
                for name in names:
                    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
                        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        with psycopg.connect(admin_url, autocommit=True) as conn:
            for name in names:
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))
