"""Who is asking, and what they may do: the console's permission model.

Two roles. A *viewer* reads every page and every ``GET /api/`` answer; an *operator* also
acts (rerun, approve, skip, pause, resume, backfills), and is recorded as ``who`` of the
``runner.requests`` row each action writes (``web:<name>``).

Credentials, each only when configured:

* tokens: ``RUNNER_WEB_TOKEN`` (an operator, named ``operator``), ``RUNNER_WEB_VIEWER_TOKEN``
  (a viewer, named ``viewer``), and ``--token-file`` (lines ``NAME ROLE TOKEN`` for one token
  per person, or a single bare token: the operator). A token is given as
  ``Authorization: Bearer <token>`` to the API, or once in the login form, which sets a
  signed session cookie (HttpOnly, SameSite=Strict) for the pages. Tokens are compared in
  constant time, against every configured token.
* a trusted reverse proxy: ``--trust-proxy-header X-Forwarded-User`` takes the user's name
  from that header (the proxy authenticated them); ``--proxy-operator NAME`` makes a proxy
  user an operator, every other one is a viewer. The header is believed as is, so ``runner
  web`` takes it only on a Unix socket (``--unix-socket``, mode 0600 or 0660), never on TCP,
  where any local process could send it. Of several lines of the header the last one counts
  (the proxy's, after the client's); a value with a comma is refused (:meth:`by_proxy`).
* ``--open-reads``: anyone may read (an anonymous viewer). Never actions.

With no credential configured the console does not start (unless ``--open-reads``), and with
no operator credential no action is possible at all.

A session is bound to the credential it was made from and ends at logout. Its cookie
carries a random id and a mark of the token the user logged in with (an HMAC of it under the
session key): when that token is no longer configured for that user and role (rotated,
removed, given to someone else) the cookie is refused, whatever its signature. Logging out
records the id's hash in the ledger (runner.web_sessions_ended, through
runner.end_web_session_v1): every console on that ledger refuses the cookie from then on, so
a copy kept by a client (or a thief) is as dead as the browser's. The ledger is asked on
every page a session cookie requests (one primary-key lookup on ``--database-url``); when it
cannot answer, the page is refused (503), never served on an unchecked session.

Sessions are signed (HMAC-SHA256) with one secret, the same in every ``runner web``
process that should accept each other's sessions (several behind a load balancer, or one
restarted): ``RUNNER_WEB_SESSION_SECRET`` or ``--session-secret-file`` (at least 32
characters; the file readable by its owner only). Without either, the key is derived from
the configured tokens (HMAC of all of them, sorted): processes started with the same tokens
share sessions, a restart keeps them, and changing any token ends every session. That key is
as hard to guess as the tokens themselves, and knowing it gains nothing over knowing the
tokens. A session also outlives no token: the token it was made from must still be
configured, for its user and role.

Failed logins are rate limited (:class:`Throttle`): a wrong token in the login form or in an
API ``Authorization: Bearer`` header counts against the client (its address as the server
sees it: behind a proxy that is the proxy, so every client shares one budget) and against a
global budget. Over either, every token check is refused with 429 and ``Retry-After``
(correct tokens too: a lock that let the right token through would still let guessing find
it) until failures age out of the window; sessions and the proxy header are not affected,
and while only the global budget is spent a client whose token was accepted in the window
keeps being served. The counters are per process (N processes: N budgets).

CSRF: every form POST carries the value of the ``runner_csrf`` cookie (random, HttpOnly,
SameSite=Strict) in a hidden field, compared in constant time (double submit); a POST whose
``Origin`` names another host is refused too. The API takes no cookie: a Bearer token or the
proxy header, and JSON bodies only (a cross-site form cannot send ``application/json``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import stat
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROLES = ("viewer", "operator")
SESSION_COOKIE = "runner_session"
CSRF_COOKIE = "runner_csrf"
CSRF_FIELD = "csrf_token"
MAX_NAME = 200
MIN_SECRET = 32


class AuthConfigError(Exception):
    """A credential setting that cannot be used. One line, shown as is."""


class Throttled(Exception):
    """Too many failed token checks: this one is refused unchecked (HTTP 429)."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many failed logins: try again in {retry_after} s")
        self.retry_after = retry_after


@dataclass(frozen=True)
class User:
    name: str
    role: str  # viewer | operator
    via: str  # token | session | proxy | open

    @property
    def can_act(self) -> bool:
        return self.role == "operator"

    @property
    def who(self) -> str:
        """The ``who`` of the requests this user's actions write."""
        return f"web:{self.name}"


@dataclass(frozen=True)
class Session:
    """A console session, as its signed cookie holds it."""

    user: User
    key: str  # the SHA-256 (hex) of its random id: the row logout writes
    expires: int  # epoch seconds


@dataclass(frozen=True)
class Credentials:
    tokens: tuple[tuple[str, User], ...] = ()  # (token, its user)
    proxy_header: str | None = None
    proxy_operators: frozenset[str] = frozenset()
    open_reads: bool = False
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    secret_source: str = "random"  # env | file | tokens | random (tests)
    session_seconds: int = 12 * 3600
    secure_cookies: bool = False

    @property
    def any_configured(self) -> bool:
        return bool(self.tokens) or self.proxy_header is not None

    @property
    def can_anyone_act(self) -> bool:
        return any(u.can_act for _, u in self.tokens) or bool(self.proxy_operators)

    def by_token(self, given: str) -> User | None:
        """The user of a token, compared in constant time against every configured token."""
        found = None
        probe = given.encode()
        for token, user in self.tokens:
            if hmac.compare_digest(probe, token.encode()):
                found = user
        return found

    def by_proxy(self, values: list[str]) -> User | None:
        """The proxy's user: the value of the *last* of the request's ``proxy_header`` lines,
        the one the proxy appended after whatever the client sent (a proxy that sets the
        header replaces the client's; one that adds a line puts its own last). A value with a
        comma is refused (None): that is a proxy appending to the client's value in one line
        (``mallory, alice``), configured to add rather than set."""
        if self.proxy_header is None or not values:
            return None
        name = values[-1].strip()
        if not name or "," in name or len(name) > MAX_NAME or not name.isprintable():
            return None
        return User(name=name, role="operator" if name in self.proxy_operators else "viewer", via="proxy")

    # -- the session cookie: {"u": name, "r": role, "e": expiry, "s": id, "k": token mark} ---

    def token_mark(self, token: str) -> str:
        """What a session cookie keeps of the token it was made from: an HMAC of it under the
        session key (the token cannot be read back from it, nor checked offline without the
        key), so the session ends when that token is no longer configured."""
        mac = hmac.new(self.secret, b"token:" + token.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac[:18]).decode()

    def session_cookie(self, user: User, token: str, now: float | None = None) -> str:
        """A new session of ``user``, logged in with ``token``: a random id (what logout
        records), the expiry, and the token's mark, HMAC-SHA256 signed."""
        expiry = int((time.time() if now is None else now) + self.session_seconds)
        payload = json.dumps({"u": user.name, "r": user.role, "e": expiry, "s": secrets.token_urlsafe(32),
                              "k": self.token_mark(token)}, separators=(",", ":"))
        body = base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")
        return f"{body}.{self._sign(body)}"

    def session(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session a cookie holds, when its signature is this key's, it has not expired,
        and the token it was made from is still configured for its user with its role. Whether
        it was ended (logged out) is the ledger's to say (runner.web_sessions_ended; the
        console asks, see runner/web/app.py)."""
        if not cookie or "." not in cookie:
            return None
        body, _, signature = cookie.rpartition(".")
        if not hmac.compare_digest(signature.encode(), self._sign(body).encode()):
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            name, role, expiry = str(data["u"]), str(data["r"]), int(data["e"])
            sid, mark = str(data["s"]), str(data["k"])
        except (ValueError, KeyError, TypeError):
            return None
        if expiry < (time.time() if now is None else now) or role not in ROLES or len(sid) < 32:
            return None
        # a session outlives no token: the very token it was made from must still be this
        # user's, with this role (a rotated, removed or reassigned token ends its sessions)
        if not any(u.name == name and u.role == role and hmac.compare_digest(self.token_mark(t), mark)
                   for t, u in self.tokens):
            return None
        key = hashlib.sha256(sid.encode()).hexdigest()
        return Session(user=User(name=name, role=role, via="session"), key=key, expires=expiry)

    def by_session(self, cookie: str | None, now: float | None = None) -> User | None:
        """The user of a cookie's session (``session``), ended or not."""
        found = self.session(cookie, now)
        return found.user if found is not None else None

    def _sign(self, body: str) -> str:
        mac = hmac.new(self.secret, b"session:" + body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def csrf_matches(cookie: str | None, submitted: str | None) -> bool:
    if not cookie or not submitted:
        return False
    return hmac.compare_digest(cookie.encode(), submitted.encode())


def _checked_token(token: str, where: str) -> str:
    token = token.strip()
    if len(token) < 16:
        raise AuthConfigError(f"{where}: a token must have at least 16 characters")
    return token


def read_token_file(path: Path) -> list[tuple[str, User]]:
    """``NAME ROLE TOKEN`` per line (``#`` comments, blank lines), or one bare token (the
    operator)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AuthConfigError(f"cannot read --token-file {path}: {exc.strerror}") from None
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)
             if line.strip() and not line.strip().startswith("#")]
    if len(lines) == 1 and len(lines[0][1].split()) == 1:
        return [(_checked_token(lines[0][1], f"{path}:{lines[0][0]}"),
                 User(name="operator", role="operator", via="token"))]
    found = []
    for number, line in lines:
        parts = line.split()
        if len(parts) != 3 or parts[1] not in ROLES:
            raise AuthConfigError(f"{path}:{number}: expected NAME ROLE TOKEN with ROLE viewer or operator")
        name, role, token = parts
        if len(name) > MAX_NAME or not name.isprintable():
            raise AuthConfigError(f"{path}:{number}: the name must be printable, at most {MAX_NAME} chars")
        found.append((_checked_token(token, f"{path}:{number}"), User(name=name, role=role, via="token")))
    return found


def _checked_secret(value: str, where: str) -> bytes:
    value = value.strip()
    if len(value) < MIN_SECRET:
        raise AuthConfigError(f"{where}: a session secret must have at least {MIN_SECRET} characters "
                              "(e.g. openssl rand -hex 32)")
    return value.encode()


def read_secret_file(path: Path) -> bytes:
    """The session secret of ``--session-secret-file``: refused when group or others may
    read or write it (anyone who reads it can forge a session)."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AuthConfigError(f"cannot read --session-secret-file {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise AuthConfigError(f"--session-secret-file {path} is open to group or others "
                              f"(mode {stat.S_IMODE(mode):o}): chmod 600 it")
    return _checked_secret(text, f"--session-secret-file {path}")


def session_secret(tokens: list[tuple[str, User]], secret_file: Path | None,
                   env: dict[str, str] | os._Environ[str]) -> tuple[bytes, str]:
    """The key that signs sessions, and where it came from (see the module's docstring)."""
    if secret_file is not None and env.get("RUNNER_WEB_SESSION_SECRET"):
        raise AuthConfigError("give the session secret once: RUNNER_WEB_SESSION_SECRET or "
                              "--session-secret-file, not both")
    if secret_file is not None:
        return read_secret_file(secret_file), "file"
    if env.get("RUNNER_WEB_SESSION_SECRET"):
        return _checked_secret(env["RUNNER_WEB_SESSION_SECRET"], "RUNNER_WEB_SESSION_SECRET"), "env"
    if tokens:
        material = b"\0".join(sorted(token.encode() for token, _ in tokens))
        return hmac.new(b"runner-web-session-key", material, hashlib.sha256).digest(), "tokens"
    # no token: no session can be made (the login form takes tokens), any key will do
    return secrets.token_bytes(32), "random"


def credentials(token_file: Path | None = None, proxy_header: str | None = None,
                proxy_operators: tuple[str, ...] = (), open_reads: bool = False,
                secure_cookies: bool = False, environ: dict[str, str] | None = None,
                secret_file: Path | None = None) -> Credentials:
    """The credentials from the environment and the options."""
    env = os.environ if environ is None else environ
    tokens: list[tuple[str, User]] = []
    if env.get("RUNNER_WEB_TOKEN"):
        tokens.append((_checked_token(env["RUNNER_WEB_TOKEN"], "RUNNER_WEB_TOKEN"),
                       User(name="operator", role="operator", via="token")))
    if env.get("RUNNER_WEB_VIEWER_TOKEN"):
        tokens.append((_checked_token(env["RUNNER_WEB_VIEWER_TOKEN"], "RUNNER_WEB_VIEWER_TOKEN"),
                       User(name="viewer", role="viewer", via="token")))
    if token_file is not None:
        tokens.extend(read_token_file(token_file))
    seen: set[str] = set()
    for token, _ in tokens:
        if token in seen:
            raise AuthConfigError("the same token is configured twice (each token names one user)")
        seen.add(token)
    if proxy_operators and proxy_header is None:
        raise AuthConfigError("--proxy-operator needs --trust-proxy-header")
    if proxy_header is not None and not proxy_header.strip():
        raise AuthConfigError("--trust-proxy-header needs a header name, e.g. X-Forwarded-User")
    secret, source = session_secret(tokens, secret_file, env)
    return Credentials(tokens=tuple(tokens), proxy_header=proxy_header.strip() if proxy_header else None,
                       proxy_operators=frozenset(proxy_operators), open_reads=open_reads,
                       secure_cookies=secure_cookies, secret=secret, secret_source=source)


class Throttle:
    """Failed token checks per client and in all, over a sliding window (see the module's
    docstring). Thread-safe; memory bounded (at most ``max_clients`` clients tracked; failures
    of further clients count globally only)."""

    def __init__(self, per_client: int = 10, overall: int = 100, window: float = 300.0,
                 max_clients: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        if per_client < 1 or overall < 1 or window <= 0:
            raise AuthConfigError("login limits must be positive")
        self.per_client, self.overall, self.window = per_client, overall, window
        self.max_clients, self.clock = max_clients, clock
        self._lock = threading.Lock()
        self._failures: dict[str, deque[float]] = {}
        self._all: deque[float] = deque()
        self._good: dict[str, float] = {}  # client -> its last accepted token

    def _expire(self, now: float) -> None:
        horizon = now - self.window
        while self._all and self._all[0] <= horizon:
            self._all.popleft()
        for client in [c for c, q in self._failures.items() if not q or q[-1] <= horizon]:
            del self._failures[client]
        for client in [c for c, t in self._good.items() if t <= horizon]:
            del self._good[client]

    def retry_after(self, client: str) -> int | None:
        """Seconds until this client may present a token again; None when it may now."""
        with self._lock:
            now = self.clock()
            self._expire(now)
            waits = []
            mine = self._failures.get(client)
            if mine is not None:
                while mine and mine[0] <= now - self.window:
                    mine.popleft()
                if len(mine) >= self.per_client:
                    waits.append(mine[len(mine) - self.per_client] + self.window - now)
            if len(self._all) >= self.overall and client not in self._good:
                waits.append(self._all[len(self._all) - self.overall] + self.window - now)
            return max(1, int(max(waits) + 0.999)) if waits else None

    def failed(self, client: str) -> None:
        with self._lock:
            now = self.clock()
            self._all.append(now)
            mine = self._failures.get(client)
            if mine is None and len(self._failures) < self.max_clients:
                mine = self._failures[client] = deque()
            if mine is not None:
                mine.append(now)
                while len(mine) > self.per_client:
                    mine.popleft()
            while len(self._all) > self.overall:
                self._all.popleft()

    def succeeded(self, client: str) -> None:
        with self._lock:
            if client in self._good or len(self._good) < self.max_clients:
                self._good[client] = self.clock()
