"""The operator console: an ASGI app (Starlette) of pages and a JSON API over the ledger.

Pages and API share their code: every page renders what a function of runner/web/reads.py
returned, and ``GET /api/...`` returns the same data as JSON; every action, from a form or
``POST /api/...``, goes through runner/web/actions.py, an adapter over the action registry
(runner/actions/registry.py) the CLI dispatches through too: ``/actions/NAME`` and
``/api/actions/NAME`` serve every action of it. Times in a page's query are read by the
registry's one time parser. Who may do what is runner/web/auth.py.

Two connection pools: reads (``--read-database-url``, e.g. a replica; else the main URL)
and actions (``--database-url``, which should be a login in the operator role of
sql/roles.sql: SELECT and the action functions, nothing else). The action pool is not even
opened when no operator credential is configured.

Before any route, authentication included, every request passes :class:`RequestGuard`: its
``Host`` must be one of the console's names (421 otherwise: DNS rebinding) and its body at
most 64 KiB, counted as it arrives (413 otherwise, nothing buffered beyond the limit). A
session cookie is checked against the ledger's ended sessions (logout) on a pool of its own
on ``--database-url`` (runner/web/auth.py says why).

A replica's pages are judged as of its last replayed commit (runner.ledger_now_v1: the
views call it instead of now()), so its replay lag never reads as job lag; every page read
from a replica says so with that instant and the lag in seconds, a warning over
``--replay-lag-warning``, and API reads carry it in ``X-Runner-Ledger-As-Of`` and
``X-Runner-Replay-Lag-Seconds`` (``Console.freshness``; one more statement per page).

Every response carries a strict Content-Security-Policy (no inline script or style; nothing
from elsewhere), ``X-Frame-Options: DENY`` and ``frame-ancestors 'none'``, ``nosniff`` and
``no-store``. Templates are autoescaped: names, partition keys, errors and reasons from the
ledger are shown as text. No page or answer holds a password: the database URL is shown
redacted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

import psycopg
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from psycopg_pool import ConnectionPool, PoolTimeout
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runner.actions import operate
from runner.actions.registry import parse_time
from runner.model.app import Runner
from runner.settings import redact
from runner.sqlfiles import queries
from runner.store import ledger
from runner.web import actions, auth, charts, openapi, reads
from runner.web.auth import User
from runner.web.openapi import ACTION_ROUTES, API_READS

log = logging.getLogger("runner.web")
QW = queries("web")

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "font-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
       "base-uri 'none'; object-src 'none'")
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
    "permissions-policy": "camera=(), microphone=(), geolocation=()",
}
MAX_BODY = 64 * 1024
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class WebConfig:
    database_url: str
    read_database_url: str | None
    credentials: auth.Credentials
    app: Runner | None = None
    privilege_warning: str | None = None  # shown on every page to operators
    pool_size: int = 4
    # failed token checks allowed per client and in all within the window (auth.Throttle)
    login_failures_per_client: int = 10
    login_failures_global: int = 100
    login_window_seconds: float = 300.0
    # seconds of replay lag over which the pages read from a replica carry a warning
    replay_lag_warning: float = 30.0
    # the names this console answers to (RequestGuard); ``runner web`` adds its listen address
    # and --allowed-host
    allowed_hosts: tuple[str, ...] = LOOPBACK_NAMES


class SecurityHeaders:
    """Adds the security headers to every response (pages, API, static files, errors)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
                if not static:
                    headers["cache-control"] = "no-store"
            await send(message)

        await self.app(scope, receive, with_headers)


def host_name(value: str) -> str:
    """The name of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lowercase,
    without its port, brackets or a trailing dot."""
    value = value.strip().lower()
    if value.startswith("["):
        value = value[1:value.find("]")] if "]" in value else value[1:]
    elif value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")



class RequestGuard:
    """What every request passes before any route, authentication included:

    * its ``Host`` names this console (one of ``allowed_hosts``), else 421: a page of another
      site whose name resolves to this console's address (DNS rebinding) is refused before it
      is read or acted on, whatever its ``Origin``;
    * its body is at most ``limit`` bytes, else 413 and the connection closed: a declared
      ``Content-Length`` over the limit is refused before a byte of the body is read, a
      chunked body is counted as it arrives and refused once the count passes the limit (at
      most ``limit`` plus one chunk is ever held). The body of an accepted request is then
      handed to the route from memory."""

    def __init__(self, app: ASGIApp, allowed_hosts: tuple[str, ...], limit: int = MAX_BODY) -> None:
        self.app = app
        self.allowed = frozenset(host_name(h) for h in allowed_hosts)
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        hosts = [v.decode("latin-1") for k, v in scope["headers"] if k == b"host"]
        if len(hosts) != 1 or host_name(hosts[0]) not in self.allowed:
            log.warning("request refused: Host %r is not one of this console's names (--allowed-host)",
                        hosts[0][:100] if hosts else None)
            await _refuse(scope, send, 421, "this console does not answer to that Host (see --allowed-host)")
            return
        lengths = [v for k, v in scope["headers"] if k == b"content-length"]
        if lengths:
            if len(lengths) > 1 or not lengths[0].isdigit():
                await _refuse(scope, send, 400, "bad Content-Length")
                return
            if int(lengths[0]) > self.limit:
                await _refuse(scope, send, 413, f"the body is over {self.limit // 1024} KiB")
                return
        held: list[Message] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before its body was read: nothing to answer
            size += len(message.get("body", b""))
            if size > self.limit:
                await _refuse(scope, send, 413, f"the body is over {self.limit // 1024} KiB")
                return
            held.append(message)
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return held.pop(0) if held else await receive()

        await self.app(scope, replay, send)


async def _refuse(scope: Scope, send: Send, status: int, message: str) -> None:
    """An answer given before any route (RequestGuard), closing the connection (the rest of a
    body is never read)."""
    api = str(scope.get("path", "")).startswith("/api/")
    body = (json.dumps({"error": message}) if api else message + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json" if api else b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if hasattr(value, "as_dict"):
        return jsonable(value.as_dict())
    return str(value)


def _span(value: Any) -> str:
    if not isinstance(value, timedelta):
        return ""
    left = int(value.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return " ".join(parts[:2]) or "0s"


def _iso(value: Any) -> str:
    """A time as ISO 8601 text (a form field's value)."""
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    return "" if value is None else str(value)


def _when(value: Any) -> Markup:
    """A time as the pages show it: ``<time datetime=...>`` holding its UTC ISO text, which
    static/console.js shows in the zone the viewer picks (their own, the job's, UTC)."""
    if isinstance(value, datetime):
        utc = value.astimezone(UTC) if value.tzinfo is not None else value
        text = utc.isoformat(timespec="seconds")
        return Markup('<time datetime="{0}">{0}</time>').format(text)
    return Markup("{0}").format("" if value is None else str(value))


def _query(**params: Any) -> str:
    """A page's query string: blanks left out, times as ISO 8601, a list as the key repeated."""
    return urlencode({k: v.isoformat() if isinstance(v, datetime) else v
                      for k, v in params.items() if v is not None and v != "" and v != [] and v != ()},
                     doseq=True)


def _json_text(value: Any) -> str:
    return json.dumps(jsonable(value), ensure_ascii=False, indent=2, sort_keys=True)


def templates() -> Environment:
    env = Environment(loader=PackageLoader("runner.web", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters.update(span=_span, when=_when, iso=_iso, pretty=_json_text, touched_runs=reads.touched_runs)
    env.globals.update(q=_query, statuses=reads.SEVERITY, titles=actions.titles(),
                       run_statuses=reads.RUN_STATUSES, triggers=reads.TRIGGERS)
    return env


class Console:
    """The running console: its credentials, pools and templates."""

    def __init__(self, config: WebConfig) -> None:
        self.config = config
        self.creds = config.credentials
        self.throttle = auth.Throttle(config.login_failures_per_client, config.login_failures_global,
                                      config.login_window_seconds)
        self.env = templates()
        self.read_pool = self._pool(config.read_database_url or config.database_url, "runner-web-read",
                                    read_only=True)
        self.act_pool = (self._pool(config.database_url, "runner-web-act", read_only=False)
                         if self.creds.can_anyone_act else None)
        # sessions (tokens only: the login form takes tokens) are checked against, and ended
        # in, the ledger at --database-url, never a replica: a logout holds at once
        self.session_pool = (self._pool(config.database_url, "runner-web-session", read_only=False, size=2)
                             if self.creds.tokens else None)
        self.shown_url = redact(config.database_url)
        self.shown_read_url = redact(config.read_database_url) if config.read_database_url else None

    def _pool(self, url: str, name: str, read_only: bool, size: int | None = None) -> ConnectionPool:
        def configure(conn: psycopg.Connection[Any]) -> None:
            conn.execute("SET TIME ZONE 'UTC'")
            # the views' laterals carry large cost estimates: compiling them (JIT) costs more
            # than running them, on every page
            conn.execute("SET jit = off")
            if read_only:  # a page never waits long, and never writes
                conn.execute("SET statement_timeout = '15s'")
                conn.execute("SET default_transaction_read_only = on")

        return ConnectionPool(url, min_size=1, max_size=size or self.config.pool_size, open=False, name=name,
                              kwargs={"autocommit": True, "application_name": name, "connect_timeout": 10},
                              configure=configure)

    @asynccontextmanager
    async def lifespan(self, _: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(self.read_pool.open, True, 30.0)
        if self.act_pool is not None:
            await run_in_threadpool(self.act_pool.open, True, 30.0)
        if self.session_pool is not None:
            await run_in_threadpool(self.session_pool.open, True, 30.0)
        try:
            yield
        finally:
            await run_in_threadpool(self.read_pool.close)
            if self.act_pool is not None:
                await run_in_threadpool(self.act_pool.close)
            if self.session_pool is not None:
                await run_in_threadpool(self.session_pool.close)

    # -- who is asking ----------------------------------------------------------------------

    async def user(self, request: Request, api: bool) -> User | None:
        creds = self.creds
        if creds.proxy_header is not None:
            found = creds.by_proxy(request.headers.getlist(creds.proxy_header))
            if found is not None:
                return found
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            return self.check_token(request, header[7:].strip())
        if not api:
            session = creds.session(request.cookies.get(auth.SESSION_COOKIE))
            if session is not None and not await run_in_threadpool(self.session_ended, session):
                return session.user
        if creds.open_reads:
            return User(name="anonymous", role="viewer", via="open")
        return None

    def session_ended(self, session: auth.Session) -> bool:
        """Whether a console on this ledger ended the session (logout). A ledger that cannot
        answer refuses the request (SessionUnchecked: 503), never serves it unchecked."""
        if self.session_pool is None:
            return True
        try:
            with self.session_pool.connection(timeout=10) as conn:
                row = conn.execute(QW["session_ended"], {"session_hash": session.key}).fetchone()
        except (psycopg.Error, PoolTimeout) as exc:
            log.warning("cannot check a session in the ledger: %s", _error_text(exc))
            raise SessionUnchecked() from None
        return bool(row and row[0])

    def end_session(self, session: auth.Session) -> None:
        """Record the session as ended in the ledger: every console refuses it from now on."""
        if self.session_pool is None:
            return
        with self.session_pool.connection(timeout=10) as conn:
            conn.execute(QW["end_session"], {"session_hash": session.key, "user_name": session.user.name,
                                             "expires": session.expires})

    def check_token(self, request: Request, token: str) -> User | None:
        """The token's user; every failure counts against the client and in all, and a client
        over its budget (or anyone over the global one) is refused unchecked (auth.Throttled)."""
        client = request.client.host if request.client else "?"
        wait = self.throttle.retry_after(client)
        if wait is not None:
            log.warning("token check refused from %s: too many failures (retry in %s s)", client, wait)
            raise auth.Throttled(wait)
        found = self.creds.by_token(token)
        if found is None:
            self.throttle.failed(client)
            log.warning("wrong token from %s", client)
        else:
            self.throttle.succeeded(client)
        return found

    def same_origin(self, request: Request) -> bool:
        """A POST's Origin (when the browser sends one) must be this console's."""
        origin = request.headers.get("origin")
        if origin is None or origin == "null":
            return origin is None
        return urlsplit(origin).netloc == request.headers.get("host", "")

    # -- reads -------------------------------------------------------------------------------

    def read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self.read_pool.connection() as conn:
            return fn(conn, *args, **kwargs)

    def act(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.act_pool is None:
            raise PermissionError("actions are off: no operator credential is configured")
        with self.act_pool.connection() as conn:
            return fn(conn, *args, **kwargs)

    async def liveness(self) -> dict[str, Any] | None:
        """The banner's facts (reads.liveness): how many runners are live, the newest beat.
        None when they cannot be read (the page itself then says what failed)."""
        try:
            return dict(await run_in_threadpool(self.read, reads.liveness))
        except Exception as exc:  # the banner never breaks a page
            log.debug("the runners banner could not be read: %s", exc)
            return None

    # -- rendering ---------------------------------------------------------------------------

    def freshness(self, clock: ledger.Clock) -> dict[str, Any] | None:
        """What every page says of the ledger it read: nothing on a primary; on a replica, the
        instant it is judged at (runner.ledger_now_v1) and its replay lag, a warning over
        ``replay_lag_warning`` seconds."""
        if not clock.replica:
            return None
        return {"as_of": clock.as_of, "lag": round(clock.replay_lag),
                "warn": clock.replay_lag > self.config.replay_lag_warning,
                "threshold": self.config.replay_lag_warning}

    def render(self, request: Request, name: str, user: User | None, status: int = 200,
               **context: Any) -> HTMLResponse:
        csrf = request.cookies.get(auth.CSRF_COOKIE) or auth.new_csrf_token()
        body = self.env.get_template(name).render(
            user=user, csrf=csrf, csrf_field=auth.CSRF_FIELD, path=request.url.path,
            database=self.shown_url, read_database=self.shown_read_url,
            warning=self.config.privilege_warning if user and user.can_act else None,
            actions_on=self.act_pool is not None, **context)
        response = HTMLResponse(body, status_code=status)
        if request.cookies.get(auth.CSRF_COOKIE) != csrf:
            response.set_cookie(auth.CSRF_COOKIE, csrf, httponly=True, samesite="strict",
                                secure=self.creds.secure_cookies, path="/")
        return response


class SessionUnchecked(Exception):
    """The ledger could not say whether a session was ended: the request is refused (503)."""


def _error_text(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return redact(first)


def _status_of(exc: BaseException) -> int:
    if isinstance(exc, reads.NotFound):
        return 404
    if isinstance(exc, PermissionError):
        return 403
    if isinstance(exc, operate.OperatorError | ValueError):
        return 400
    return 500


EXPECTED = (reads.NotFound, PermissionError, operate.OperatorError, ValueError, psycopg.Error)


def _parse_time(value: str | None, name: str) -> datetime | None:
    """A time of a page's query: the registry's one time parser (blank: none)."""
    if value is None or not value.strip():
        return None
    return parse_time(value, name)


def _int(value: str | None, name: str, default: int | None = None, high: int = 10_000) -> int | None:
    if value is None or not value.strip():
        return default
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if not 1 <= number <= high:
        raise ValueError(f"{name} must be between 1 and {high}")
    return number


# -- the reads of each page, from a request's query ---------------------------------------------


def page_reads(console: Console) -> dict[str, Callable[[Request], Any]]:
    """Page name -> a function of the request that reads its data (pages and API share them)."""
    q = console.read
    app = console.config.app

    def jobs(request: Request) -> Any:
        # the alert counts on a second read connection when one is free (reads.jobs)
        return q(reads.jobs, app, request.query_params.get("sort", "health"),
                 request.query_params.get("dir") == "desc",
                 side=lambda: console.read_pool.connection(timeout=0.05),
                 search=request.query_params.get("search") or None)

    def job(request: Request) -> Any:
        name = request.query_params.get("name")
        if not name:
            raise ValueError("name is required")
        data = q(reads.job, app, name, _parse_time(request.query_params.get("until"), "until"))
        data["chart"] = charts.timings_chart(data["timings"])
        return data

    def runs(request: Request) -> Any:
        p = request.query_params
        statuses = tuple(dict.fromkeys(s for s in p.getlist("status") if s))
        filters = reads.RunFilters(
            job=p.get("job") or None, partition=p.get("partition") if p.get("partition") else None,
            statuses=statuses, trigger=p.get("trigger") or None, lane=p.get("lane") or None,
            since=_parse_time(p.get("since"), "since"), until=_parse_time(p.get("until"), "until"))
        return q(reads.runs, filters, reads.parse_cursor(p.get("after")),
                 _int(p.get("limit"), "limit", 100, 1000) or 100)

    def run(request: Request) -> Any:
        return q(reads.run, int(request.path_params["run_id"]))

    def gaps(request: Request) -> Any:
        p = request.query_params
        states = [s for s in p.getlist("state") if s]
        return q(reads.gaps, p.get("job") or None, states, _parse_time(p.get("since"), "since"),
                 _parse_time(p.get("until"), "until"), _int(p.get("limit"), "limit", 500) or 500)

    def backfills(request: Request) -> Any:
        return q(reads.backfills, request.query_params.get("job") or None)

    def one_backfill(request: Request) -> Any:
        return q(reads.one_backfill, int(request.path_params["plan_id"]))

    def alerts(request: Request) -> Any:
        return q(reads.alerts, request.query_params.get("job") or None)

    def requests(request: Request) -> Any:
        p = request.query_params
        return q(reads.requests, p.get("job") or None, _int(p.get("before"), "before", None, 2**62),
                 _int(p.get("limit"), "limit", 100, 1000) or 100)

    def runners(request: Request) -> Any:
        return q(reads.runners)

    return {"jobs": jobs, "job": job, "runs": runs, "run": run, "gaps": gaps, "backfills": backfills,
            "backfill": one_backfill, "alerts": alerts, "requests": requests, "runners": runners}


def create_app(config: WebConfig) -> Starlette:
    console = Console(config)
    getters = page_reads(console)

    # -- pages ---------------------------------------------------------------------------------

    def page(name: str, template: str) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            user = await console.user(request, api=False)
            if user is None:
                return RedirectResponse("/login?" + _query(next=request.url.path + (
                    "?" + request.url.query if request.url.query else "")), status_code=303)
            live = await console.liveness()
            try:
                data = await run_in_threadpool(getters[name], request)
                clock = await run_in_threadpool(console.read, ledger.ledger_clock)
            except EXPECTED as exc:
                return console.render(request, "error.html", user, status=_status_of(exc),
                                      message=_error_text(exc), liveness=live)
            return console.render(request, template, user, page=name, data=data,
                                  params=dict(request.query_params), freshness=console.freshness(clock),
                                  liveness=live)
        return endpoint

    async def login_form(request: Request) -> Response:
        return console.render(request, "login.html", None, next=_safe_next(request.query_params.get("next")),
                              failed=False)

    async def login(request: Request) -> Response:
        form = await _form(request)
        if form is None or not console.same_origin(request) or not auth.csrf_matches(
                request.cookies.get(auth.CSRF_COOKIE), form.get(auth.CSRF_FIELD)):
            return console.render(request, "error.html", None, status=403,
                                  message="the form expired or came from another site: reload the page")
        target = _safe_next(form.get("next"))
        token = str(form.get("token") or "").strip()
        try:
            user = console.check_token(request, token)
        except auth.Throttled as exc:
            refused = console.render(request, "login.html", None, status=429, next=target, failed=False,
                                     throttled=str(exc))
            refused.headers["retry-after"] = str(exc.retry_after)
            return refused
        if user is None:
            return console.render(request, "login.html", None, status=401, next=target, failed=True)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(auth.SESSION_COOKIE, console.creds.session_cookie(user, token), httponly=True,
                            samesite="strict", secure=console.creds.secure_cookies, path="/",
                            max_age=console.creds.session_seconds)
        # a fresh CSRF token with the new session
        response.set_cookie(auth.CSRF_COOKIE, auth.new_csrf_token(), httponly=True, samesite="strict",
                            secure=console.creds.secure_cookies, path="/")
        return response

    async def logout(request: Request) -> Response:
        form = await _form(request)
        if form is None or not auth.csrf_matches(request.cookies.get(auth.CSRF_COOKIE),
                                                 form.get(auth.CSRF_FIELD)):
            return console.render(request, "error.html", None, status=403, message="CSRF check failed")
        # ended in the ledger, not only in this browser: a copy of the cookie is refused too
        session = console.creds.session(request.cookies.get(auth.SESSION_COOKIE))
        if session is not None:
            try:
                await run_in_threadpool(console.end_session, session)
            except (psycopg.Error, PoolTimeout) as exc:
                log.warning("logout of %s not recorded: %s", session.user.name, _error_text(exc))
                return console.render(request, "error.html", session.user, status=503,
                                      message="the logout could not be recorded in the ledger: the session "
                                              "is still valid; try again")
            log.info("session of %s ended (logout)", session.user.name)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(auth.SESSION_COOKIE, path="/")
        return response

    async def action_page(request: Request) -> Response:
        """GET: the impact of an action and its form (a reason is required)."""
        user = await console.user(request, api=False)
        if user is None:
            return RedirectResponse("/login?" + _query(next=str(request.url.path) + "?" + request.url.query),
                                    status_code=303)
        name = request.path_params["action"]
        params = {k: request.query_params.get(k) for k in actions.fields(name)}
        try:
            actions.check(name)
            if not user.can_act:
                raise PermissionError(f"{user.name} is a viewer: actions need an operator")
            impact = await run_in_threadpool(console.act, actions.impact, name, params, console.config.app)
        except EXPECTED as exc:
            return console.render(request, "error.html", user, status=_status_of(exc),
                                  message=_error_text(exc))
        if name == "rerun" and impact.get("run"):  # the run as shown: refused if it changes first
            seen = impact["run"]
            params = {**params, "seen_status": seen["status"], "seen_fence": str(seen["fence"])}
        if name == "rerun_many" and impact.get("runs") and not impact.get("refusal"):
            # the runs as shown: refused if the selection holds others by the time of the POST
            params = {**params, "seen_runs": ",".join(str(r["id"]) for r in impact["runs"])}
        return console.render(request, "action.html", user, action=name, params=params, impact=impact,
                              done=None, liveness=await console.liveness())

    async def action_post(request: Request) -> Response:
        user = await console.user(request, api=False)
        if user is None:
            return console.render(request, "error.html", None, status=401, message="log in first")
        form = await _form(request)
        if form is None or not console.same_origin(request) or not auth.csrf_matches(
                request.cookies.get(auth.CSRF_COOKIE), form.get(auth.CSRF_FIELD)):
            return console.render(request, "error.html", user, status=403,
                                  message="CSRF check failed: the form expired or came from another site; "
                                          "nothing written")
        name = request.path_params["action"]
        params = {k: form.get(k) for k in actions.fields(name)}
        try:
            actions.check(name)
            done = await run_in_threadpool(console.act, actions.perform, name, params, user,
                                           form.get("reason"), console.config.app)
        except EXPECTED as exc:
            return console.render(request, "error.html", user, status=_status_of(exc),
                                  message=_error_text(exc) + " (nothing written)")
        return console.render(request, "done.html", user, action=name, params=params, done=done)

    # -- the JSON API -------------------------------------------------------------------------------

    def api_read(name: str) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if await console.user(request, api=True) is None:
                return _api_error(401, "authentication required: Authorization: Bearer <token>")
            try:
                data = await run_in_threadpool(getters[name], request)
                clock = await run_in_threadpool(console.read, ledger.ledger_clock)
            except EXPECTED as exc:
                return _api_error(_status_of(exc), _error_text(exc))
            # the instant the answer is judged at, and how far a replica's replay is behind
            return JSONResponse(jsonable(data), headers={
                "x-runner-ledger-as-of": clock.as_of.isoformat(),
                "x-runner-replay-lag-seconds": f"{clock.replay_lag:.3f}"})
        return endpoint

    def api_action(name: str | None = None) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            user = await console.user(request, api=True)
            if user is None:
                return _api_error(401, "authentication required: Authorization: Bearer <token>")
            action = name or request.path_params["action"]
            if not request.headers.get("content-type", "").startswith("application/json"):
                return _api_error(415, "send the action as application/json")
            if not console.same_origin(request):
                return _api_error(403, "cross-origin request refused")
            raw = await request.body()
            try:
                body = json.loads(raw) if len(raw) <= MAX_BODY else None
            except ValueError:
                body = None
            if not isinstance(body, dict):
                return _api_error(400, "the body must be a JSON object (at most 64 KiB)")
            if "plan_id" in request.path_params:
                body["plan_id"] = request.path_params["plan_id"]
            params = {k: body.get(k) for k in actions.fields(action)}
            try:
                actions.check(action)
                if not user.can_act:
                    raise PermissionError(f"{user.name} is a viewer: actions need an operator")
                if body.get("dry_run"):
                    impact = await run_in_threadpool(console.act, actions.impact, action, params,
                                                     console.config.app)
                    return JSONResponse(jsonable({"dry_run": True, "action": action, "impact": impact}))
                done = await run_in_threadpool(console.act, actions.perform, action, params, user,
                                               body.get("reason"), console.config.app)
            except EXPECTED as exc:
                return _api_error(_status_of(exc), _error_text(exc))
            return JSONResponse(jsonable({"dry_run": False, "action": action, **done}))
        return endpoint

    async def whoami(request: Request) -> Response:
        user = await console.user(request, api=True)
        if user is None:
            return _api_error(401, "authentication required: Authorization: Bearer <token>")
        return JSONResponse({"name": user.name, "role": user.role, "who": user.who,
                             "actions": console.act_pool is not None and user.can_act})

    async def api_document(request: Request) -> Response:
        """GET /api/openapi.json: behind the reads' authentication (runner/web/openapi.py says why)."""
        if await console.user(request, api=True) is None:
            return _api_error(401, "authentication required: Authorization: Bearer <token>")
        return JSONResponse(openapi.document())

    routes = [
        Route("/", page("jobs", "jobs.html")),
        Route("/job", page("job", "job.html")),
        Route("/runs", page("runs", "runs.html")),
        Route("/runs/{run_id:int}", page("run", "run.html")),
        Route("/gaps", page("gaps", "gaps.html")),
        Route("/backfills", page("backfills", "backfills.html")),
        Route("/backfills/{plan_id:int}", page("backfill", "backfill.html")),
        Route("/alerts", page("alerts", "alerts.html")),
        Route("/requests", page("requests", "requests.html")),
        Route("/runners", page("runners", "runners.html")),
        Route("/favicon.ico", lambda _: Response(status_code=204)),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/actions/{action}", action_page, methods=["GET"]),
        Route("/actions/{action}", action_post, methods=["POST"]),
        *(Route(path, {"whoami": whoami, "openapi": api_document}.get(name) or api_read(name),
                methods=["GET"]) for path, name in API_READS),
        Route("/api/actions/{action}", api_action(), methods=["POST"]),
        *(Route(path, api_action(name), methods=["POST"]) for path, name in ACTION_ROUTES),
        Mount("/static", StaticFiles(packages=[("runner.web", "static")]), name="static"),
    ]
    async def throttled(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, auth.Throttled)
        response: Response
        if request.url.path.startswith("/api/"):
            response = _api_error(429, str(exc))
        else:
            response = console.render(request, "error.html", None, status=429, message=str(exc))
        response.headers["retry-after"] = str(exc.retry_after)
        return response

    async def unchecked(request: Request, exc: Exception) -> Response:
        message = "the session cannot be checked now (the ledger does not answer): try again"
        if request.url.path.startswith("/api/"):
            return _api_error(503, message)
        return console.render(request, "error.html", None, status=503, message=message)

    web = Starlette(routes=routes, lifespan=console.lifespan,
                    exception_handlers={auth.Throttled: throttled, SessionUnchecked: unchecked})
    web.state.console = console
    web.add_middleware(RequestGuard, allowed_hosts=config.allowed_hosts)
    web.add_middleware(SecurityHeaders)  # the outermost: its headers go on the guard's answers too
    return web


def _api_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _safe_next(value: Any) -> str:
    """Only a path of this console (no scheme, no host, no //) is a place to go after login."""
    text = str(value or "/")
    if not text.startswith("/") or text.startswith("//") or "\\" in text or any(c in text for c in "\r\n"):
        return "/"
    return text


async def _form(request: Request) -> Mapping[str, Any] | None:
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return None
    raw = await request.body()
    if len(raw) > MAX_BODY:
        return None
    form = await request.form()
    return {k: v for k, v in form.items() if isinstance(v, str)}


def prepare(database_url: str, read_database_url: str | None, credentials: auth.Credentials,
            app: Runner | None, check: Callable[[str], str | None]) -> WebConfig:
    """The console's configuration, after the checks ``runner web`` makes before it serves:
    some credential is configured (or reads are opened explicitly), and ``check`` (connect,
    check the schema; returns the privilege warning of that login, if any) passes for each
    database URL."""
    if not credentials.any_configured and not credentials.open_reads:
        raise auth.AuthConfigError(
            "no credential configured: set RUNNER_WEB_TOKEN (operators) and/or RUNNER_WEB_VIEWER_TOKEN, "
            "pass --token-file or --trust-proxy-header; or --open-reads to let anyone read (no actions)")
    warning = check(database_url) if credentials.can_anyone_act else None
    if read_database_url:
        check(read_database_url)
    return WebConfig(database_url=database_url, read_database_url=read_database_url,
                     credentials=credentials, app=app, privilege_warning=warning)


WILDCARDS = ("0.0.0.0", "::", "")


def allowed_hosts(host: str | None, extra: tuple[str, ...]) -> tuple[str, ...]:
    """The Host names a console answers to: the loopback names, the address it listens on
    (``host``; None for a Unix socket; not a wildcard address, which names no host) and the
    names given (``--allowed-host``, each a name or an address, with or without a port)."""
    names = list(LOOPBACK_NAMES)
    if host is not None and host not in WILDCARDS:
        names.append(host)
    for name in extra:
        if not host_name(name) or any(c in name for c in "/ \t@"):
            raise auth.AuthConfigError(f"--allowed-host must be a host name or address, got {name!r}")
        names.append(name)
    return tuple(dict.fromkeys(host_name(n) for n in names))


def unix_listener(path: str, mode: int) -> socket.socket:
    """A listening Unix socket at ``path`` with ``mode`` (0600 or 0660; made so under a
    umask, never more open even for a moment). A socket file left at ``path`` by a console
    that is gone is replaced; anything else there (a live console, a file, a link) is refused
    (auth.AuthConfigError)."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        found = None
    if found is not None:
        if not stat.S_ISSOCK(found.st_mode):
            raise auth.AuthConfigError(f"--unix-socket {path} exists and is not a socket: not replaced")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(path)
            except ConnectionRefusedError:
                os.unlink(path)  # stale: its console is gone
            except OSError as exc:
                raise auth.AuthConfigError(f"--unix-socket {path}: {exc.strerror or exc}") from None
            else:
                raise auth.AuthConfigError(f"--unix-socket {path} is in use by a running server")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o777 & ~mode)
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise auth.AuthConfigError(f"--unix-socket {path} cannot be bound: {exc.strerror or exc}") from None
    finally:
        os.umask(old)
    os.chmod(path, mode)
    return sock


def serve(web: Starlette, host: str, port: int, log_level: str, grace: int,
          listener: socket.socket | None = None) -> bool:
    """Serve ``web`` until SIGTERM or SIGINT, then drain: stop listening at once (a new
    connection is refused), let the requests in flight finish for up to ``grace`` seconds
    (then cancel what remains), close the pools (the app's lifespan), and return. The signals
    go through runner.signals.SignalStop as for ``runner start`` (a second SIGINT exits at once
    with 130), not through uvicorn's own handlers, which raise the signal again once the server
    has stopped (the process then ends killed by it: 143 from a shell, not 0). False when the
    server never started (the port is taken, the lifespan failed)."""
    from collections.abc import Iterator

    import uvicorn

    from runner.worker.signals import SignalStop

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # SignalStop has them

    server = Server(uvicorn.Config(web, host=host, port=port, log_level=log_level, access_log=False,
                                   server_header=False, proxy_headers=False,
                                   timeout_graceful_shutdown=grace))
    stopping = SignalStop(logging.getLogger("runner.web"))
    stopping.install()

    def stop() -> None:
        server.should_exit = True  # uvicorn's main loop looks every 0.1 s

    stopping.stop_with(stop)
    bound = _socket_file(listener)
    try:
        server.run(sockets=[listener] if listener is not None else None)
    finally:
        if bound is not None and _socket_file_at(bound[0]) == bound:
            with contextlib.suppress(OSError):
                os.unlink(bound[0])  # still the socket this console bound: nobody else's
    _leave_cut_requests()
    return bool(server.started)


def _socket_file(listener: socket.socket | None) -> tuple[str, int, int] | None:
    """A Unix listener's path and its file's identity (device, inode)."""
    if listener is None or listener.family != socket.AF_UNIX:
        return None
    path = listener.getsockname()
    return _socket_file_at(path) if isinstance(path, str) and path else None


def _socket_file_at(path: str) -> tuple[str, int, int] | None:
    try:
        found = os.lstat(path)
    except OSError:
        return None
    return (path, found.st_dev, found.st_ino) if stat.S_ISSOCK(found.st_mode) else None


def _leave_cut_requests() -> None:
    """A request cut at the end of the grace period may still run on its worker thread (a
    statement waiting in the database): Python would wait for that thread at exit, for ever if
    the statement never ends. Give the threads a moment, then exit without them; closing the
    process closes their database sessions, and PostgreSQL rolls their transactions back."""
    import os
    import sys
    import threading
    import time

    deadline = time.monotonic() + 2.0
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon
             and t.is_alive()]
    if stuck:
        logging.getLogger("runner.web").warning(
            "%d request(s) still running after the grace period: exiting without them (their "
            "transactions roll back)", len(stuck))
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
