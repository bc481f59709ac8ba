"""Passwords never printed (issue 12, point 8), through the real CLI with URLs that cannot
connect: every way libpq takes a password, and an error of libpq's own that echoes it.

Fails before the fix: ``password = SECRET`` (blanks around '='), the tail of a quoted
``password='SEC RET'``, ``?sslpassword=...`` and a URL password with a space (psycopg's
parse error quotes it) were printed in clear; no warning for a password on the command line.
"""

from __future__ import annotations

import pytest

from tests.support import run_cli

CASES = [
    ("host=127.0.0.1 port=1 user=x password = Sup3rSecretA", ["Sup3rSecretA"]),
    ("host=127.0.0.1 port=1 user=x password='Sup3r SecretB'", ["Sup3r", "SecretB"]),
    ("host=127.0.0.1 port=1 user=x sslpassword=Sup3rSecretC", ["Sup3rSecretC"]),
    ("postgresql://x@127.0.0.1:1/db?sslpassword=Sup3rSecretD", ["Sup3rSecretD"]),
    ("postgresql://x:Sup3r SecretE@127.0.0.1:1/db", ["Sup3r", "SecretE"]),
    ("postgresql://x:Sup3rSecretF@127.0.0.1:1/db?password=Sup3rSecretG", ["Sup3rSecretF", "Sup3rSecretG"]),
    ("postgresql://x:Sup3r%20SecretH@127.0.0.1:1/db", ["Sup3r", "SecretH"]),
]
COMMANDS = [("runs",), ("db", "upgrade"), ("start", "--app", "tests/apps/hello.py:app")]


@pytest.mark.parametrize(("url", "secrets"), CASES)
def test_no_password_in_any_error(url: str, secrets: list[str]) -> None:
    for command in COMMANDS:
        out = run_cli(*command, url=url)
        assert out.returncode == 1, (command, out.stderr)
        lines = out.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("runner: error: "), out.stderr
        assert "***" in lines[0], lines
        for secret in secrets:
            assert secret not in out.stdout + out.stderr, (command, out.stderr)


def test_a_password_on_the_command_line_is_warned_about() -> None:
    url = "postgresql://x:Sup3rSecretI@127.0.0.1:1/db"
    out = run_cli("runs", "--database-url", url)
    warning, error = out.stderr.splitlines()
    assert warning.startswith("runner: warning: a password in --database-url is visible to every local user")
    assert "RUNNER_DATABASE_URL" in warning and "PGPASSFILE" in warning
    assert error.startswith("runner: error: cannot connect") and "Sup3rSecretI" not in out.stderr
    # the same URL from the environment, or a URL with no password: no warning
    assert len(run_cli("runs", url=url).stderr.splitlines()) == 1
    assert len(run_cli("runs", "--database-url", "postgresql://x@127.0.0.1:1/db").stderr.splitlines()) == 1
