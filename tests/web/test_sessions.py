"""Sessions and failed logins against real `runner web` processes, over real HTTP (httpx2,
each client from its own loopback address so the console tells them apart):

- a session made by one process is accepted by another with the same secret (two consoles
  behind a load balancer, or a restart) and refused by one with another secret; with no
  secret set, processes with the same tokens share the key derived from them;
- failed token checks (the login form, an API Bearer header) are limited per client and in
  all: over the limit every token check is refused with 429 and Retry-After, other clients
  are not limited by one client's failures, sessions still work, and a client whose token
  was accepted keeps being served while only the global budget is spent."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from runner.web import auth
from tests.support import rows
from tests.web.conftest import (
    HOSTILE_JOB,
    OPERATOR_TOKEN,
    VIEWER_TOKEN,
    Ledger,
    requests_rows,
    runner_web,
    runner_webs,
)

TOKENS = {"RUNNER_WEB_TOKEN": OPERATOR_TOKEN, "RUNNER_WEB_VIEWER_TOKEN": VIEWER_TOKEN}
SECRET_A = "a" * 20 + "-shared-session-secret-0001"
SECRET_B = "b" * 20 + "-another-session-secret-002"


def client(base: str, address: str = "127.0.0.1") -> httpx2.Client:
    return httpx2.Client(base_url=base, follow_redirects=False, timeout=30,
                         transport=httpx2.HTTPTransport(local_address=address))


def login(http: httpx2.Client, token: str = OPERATOR_TOKEN) -> httpx2.Response:
    form = http.get("/login")
    assert form.status_code == 200
    found = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert found
    return http.post("/login", data={"token": token, auth.CSRF_FIELD: found.group(1), "next": "/"})


def session_of(base: str) -> str:
    with client(base) as http:
        done = login(http)
        assert done.status_code == 303, done.text
        cookie = http.cookies.get(auth.SESSION_COOKIE)
        assert cookie
        return cookie


def accepts(base: str, cookie: str) -> bool:
    with client(base) as http:
        page = http.get("/", headers={"Cookie": f"{auth.SESSION_COOKIE}={cookie}"})
        assert page.status_code in (200, 303), page.text
        return page.status_code == 200


@pytest.fixture
def consoles(ledger: Ledger, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Four consoles on one ledger: secret A from the environment, secret A from a file,
    secret B, and none (the key derived from the tokens)."""
    secret = tmp_path / "secret"
    secret.write_text(SECRET_A + "\n")
    secret.chmod(0o600)
    plan: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {"env_a": ((), {"RUNNER_WEB_SESSION_SECRET": SECRET_A}),
            "file_a": (("--session-secret-file", str(secret)), {}),
            "env_b": ((), {"RUNNER_WEB_SESSION_SECRET": SECRET_B}),
            "derived": ((), {})}
    with runner_webs(ledger.operator, tmp_path, {n: (a, {**TOKENS, **e}) for n, (a, e) in plan.items()}) as bases:
        yield bases


def test_a_session_is_shared_by_processes_with_the_same_secret(consoles: dict[str, str]) -> None:
    cookie = session_of(consoles["env_a"])
    assert accepts(consoles["env_a"], cookie)
    assert accepts(consoles["file_a"], cookie), "another process with the same secret refused the session"
    assert not accepts(consoles["env_b"], cookie), "a process with another secret accepted the session"
    assert not accepts(consoles["derived"], cookie)
    assert accepts(consoles["env_a"], session_of(consoles["file_a"]))
    # no secret configured: any process with the same tokens derives the same key (here this
    # test's own), and a token rotation ends those sessions
    user = auth.User(name="operator", role="operator", via="token")
    same = auth.credentials(environ=TOKENS)
    assert same.secret_source == "tokens"
    assert accepts(consoles["derived"], same.session_cookie(user, OPERATOR_TOKEN))
    assert not accepts(consoles["env_a"], same.session_cookie(user, OPERATOR_TOKEN))
    rotated = auth.credentials(environ={**TOKENS, "RUNNER_WEB_VIEWER_TOKEN": VIEWER_TOKEN + "x"})
    assert not accepts(consoles["derived"], rotated.session_cookie(user, OPERATOR_TOKEN))


def test_a_session_secret_must_be_private_long_and_given_once(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SECRET_A)
    secret.chmod(0o644)
    with pytest.raises(auth.AuthConfigError, match="open to group or others"):
        auth.credentials(environ=TOKENS, secret_file=secret)
    secret.chmod(0o600)
    assert auth.credentials(environ=TOKENS, secret_file=secret).secret == SECRET_A.encode()
    with pytest.raises(auth.AuthConfigError, match="at least 32 characters"):
        auth.credentials(environ={**TOKENS, "RUNNER_WEB_SESSION_SECRET": "short"})
    with pytest.raises(auth.AuthConfigError, match="not both"):
        auth.credentials(environ={**TOKENS, "RUNNER_WEB_SESSION_SECRET": SECRET_A}, secret_file=secret)


def test_failed_logins_are_limited_per_client_and_in_all(ledger: Ledger, tmp_path: Path) -> None:
    limits = ("--login-failures-per-client", "3", "--login-failures-global", "5", "--login-window", "600")
    with runner_web(ledger.operator, tmp_path, *limits, env=TOKENS) as base, \
            client(base, "127.0.0.2") as a, client(base, "127.0.0.3") as b, \
            client(base, "127.0.0.4") as c, client(base, "127.0.0.5") as d:
        assert login(b).status_code == 303  # b: a session, and a token accepted
        session = b.cookies.get(auth.SESSION_COOKIE)
        assert session
        for _ in range(3):
            assert login(a, "wrong-token-0123456789").status_code == 401
        over = login(a)  # the right token, but a is over its budget: not even checked
        assert over.status_code == 429, over.text
        assert "too many failed logins" in over.text and 1 <= int(over.headers["retry-after"]) <= 600
        api = a.get("/api/jobs", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
        assert api.status_code == 429 and "too many failed logins" in api.json()["error"]
        assert int(api.headers["retry-after"]) >= 1
        # another client is not limited by a's failures
        assert c.get("/api/whoami", headers={"Authorization": f"Bearer {VIEWER_TOKEN}"}).status_code == 200
        # two more failures (Bearer) spend the global budget of 5
        for _ in range(2):
            assert d.get("/api/jobs", headers={"Authorization": "Bearer nope-0123456789abcdef"}).status_code == 401
        refused = d.get("/api/jobs", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
        assert refused.status_code == 429, refused.text
        # clients whose token was accepted in the window keep being served; sessions too
        assert c.get("/api/jobs", headers={"Authorization": f"Bearer {VIEWER_TOKEN}"}).status_code == 200
        assert d.get("/", headers={"Cookie": f"{auth.SESSION_COOKIE}={session}"}).status_code == 200
    log = (tmp_path / "web.log").read_text()
    assert "wrong token from 127.0.0.2" in log and OPERATOR_TOKEN not in log


# -- issue 28, point 4: a session outlives neither its token nor its logout ----------------------

ALICE_OLD = "alice-old-token-0123456789abcdef"
ALICE_NEW = "alice-new-token-fedcba9876543210"


def pause_with(base: str, cookie: str, reason: str) -> int:
    """The attack: a client that kept ``cookie`` (and nothing else) pauses a job through the
    console's form; the status answered."""
    with client(base) as http:
        http.cookies.set(auth.SESSION_COOKIE, cookie)
        form = http.get("/login")
        found = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert found
        return http.post("/actions/pause", data={"job": HOSTILE_JOB, "reason": reason,
                                                 auth.CSRF_FIELD: found.group(1)}).status_code


def pauses(ledger: Ledger) -> list[tuple[str, str]]:
    return [(r["who"], r["reason"]) for r in requests_rows(ledger.admin) if r["action"] == "pause"][1:]


def test_a_session_ends_with_its_token_and_at_logout_in_every_console(ledger: Ledger, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    env = {"RUNNER_WEB_SESSION_SECRET": SECRET_A}
    tokens.write_text(f"alice operator {ALICE_OLD}\nbob viewer {VIEWER_TOKEN}\n")
    with runner_web(ledger.operator, tmp_path, "--token-file", str(tokens), env=env) as base:
        with client(base) as http:
            assert login(http, ALICE_OLD).status_code == 303
            old = http.cookies.get(auth.SESSION_COOKIE)
        assert old and accepts(base, old)
        assert pause_with(base, old, "before the rotation") == 200
    assert pauses(ledger) == [("web:alice", "before the rotation")]
    # alice's token is replaced (it leaked) and the console restarted, with the same secret
    tokens.write_text(f"alice operator {ALICE_NEW}\nbob viewer {VIEWER_TOKEN}\n")
    with runner_webs(ledger.operator, tmp_path, {"one": (("--token-file", str(tokens)), env),
                                                 "two": (("--token-file", str(tokens)), env)}) as bases:
        assert not accepts(bases["one"], old), "a session made with alice's old token still works"
        assert pause_with(bases["one"], old, "with the old token's session") == 401
        with client(bases["one"]) as http:
            assert login(http, ALICE_OLD).status_code == 401
            assert login(http, ALICE_NEW).status_code == 303
            new = http.cookies.get(auth.SESSION_COOKIE)
            assert new and accepts(bases["one"], new) and accepts(bases["two"], new)
            form = http.get("/")
            assert form.status_code == 200
            out = http.post("/logout", data={auth.CSRF_FIELD: http.cookies.get(auth.CSRF_COOKIE)})
            assert out.status_code == 303
            assert http.cookies.get(auth.SESSION_COOKIE) is None  # the browser's copy
        # a client that kept the cookie: refused by this console and by the other one
        assert not accepts(bases["one"], new), "the cookie still works after logout"
        assert not accepts(bases["two"], new), "another console still accepts a logged-out session"
        assert pause_with(bases["two"], new, "after logout") == 401
    ended = rows(ledger.admin, "SELECT user_name, expires_at > now() FROM runner.web_sessions_ended")
    assert ended == [("alice", True)]
    with runner_web(ledger.operator, tmp_path, "--token-file", str(tokens), env=env) as base:
        assert not accepts(base, new), "a logged-out session came back with a restart"
    assert pauses(ledger) == [("web:alice", "before the rotation")]
