"""The console over HTTP (Starlette's TestClient, a real ledger, the console connected as a
LOGIN in the operator role): authentication on everything, viewers cannot act, no action
without an operator credential, CSRF, hostile strings escaped on every page, no password
in any answer, and each action writes the CLI's runner.requests row with the web user."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from runner.web import auth
from runner.web.app import WebConfig, create_app, prepare
from tests.support import scalar
from tests.web.conftest import (
    CONSOLE_SCRIPT,
    HOSTILE_ERROR,
    HOSTILE_JOB,
    HOSTILE_OWNER,
    HOSTILE_PART,
    HOSTILE_REASON,
    HOSTILES,
    OPERATOR_TOKEN,
    VIEWER_TOKEN,
    Ledger,
    requests_rows,
    without_console_script,
)

OP = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
VIEW = {"Authorization": f"Bearer {VIEWER_TOKEN}"}


@contextmanager
def console(url: str, creds: auth.Credentials | None = None, **kw: Any) -> Iterator[TestClient]:
    creds = creds or auth.credentials(environ={"RUNNER_WEB_TOKEN": OPERATOR_TOKEN,
                                               "RUNNER_WEB_VIEWER_TOKEN": VIEWER_TOKEN})
    with TestClient(create_app(WebConfig(database_url=url, read_database_url=None, credentials=creds, **kw)),
                    follow_redirects=False, base_url="http://localhost") as client:
        yield client


def pages(ids: dict[str, Any]) -> list[str]:
    from urllib.parse import quote

    return ["/", f"/job?name={quote(HOSTILE_JOB)}", f"/runs/{ids['dead']}", f"/runs/{ids['awaiting']}",
            "/gaps", f"/gaps?job={quote(HOSTILE_JOB)}&state=dead", "/backfills", f"/backfills/{ids['plan']}",
            f"/backfills/{ids['verified']}", "/alerts", "/requests", f"/requests?job={quote(HOSTILE_JOB)}",
            "/runs", f"/runs?job={quote(HOSTILE_JOB)}&status=dead", f"/runs?partition={quote(HOSTILE_PART)}"]


def api_reads(ids: dict[str, Any]) -> list[str]:
    from urllib.parse import quote

    return ["/api/jobs", f"/api/job?name={quote(HOSTILE_JOB)}", f"/api/runs/{ids['dead']}", "/api/gaps",
            "/api/backfills", f"/api/backfills/{ids['plan']}", "/api/alerts", "/api/requests", "/api/whoami"]


def login(client: TestClient, token: str = OPERATOR_TOKEN) -> None:
    form = client.get("/login")
    csrf = client.cookies.get(auth.CSRF_COOKIE)
    assert form.status_code == 200 and csrf
    done = client.post("/login", data={"token": token, auth.CSRF_FIELD: csrf, "next": "/"})
    assert done.status_code == 303, done.text
    assert client.cookies.get(auth.SESSION_COOKIE)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "no CSRF field in the form"
    return found.group(1)


# -- authentication ----------------------------------------------------------------------------


def test_every_page_and_api_read_needs_authentication(ledger: Ledger) -> None:
    with console(ledger.operator) as client:
        for path in pages(ledger.ids):
            r = client.get(path)
            assert r.status_code == 303 and r.headers["location"].startswith("/login?"), path
        for path in api_reads(ledger.ids):
            assert client.get(path).status_code == 401, path
            assert client.get(path, headers={"Authorization": "Bearer not-the-token-at-all"}).status_code == 401
        for path in ("/api/runs/rerun", "/api/jobs/pause", "/api/actions/skip", "/api/backfills"):
            assert client.post(path, json={"job": HOSTILE_JOB, "reason": "x"}).status_code == 401, path
        r = client.get(f"/actions/rerun?job=x&slot={ledger.ids['dead_slot'].isoformat()}")
        assert r.status_code == 303
        # a session cookie is not an API credential (it would ride on cross-site requests)
        login(client)
        assert client.get("/api/jobs").status_code == 401
    assert requests_rows(ledger.admin)[-1]["action"] == "pause"  # only the seeded row


def test_token_reads_every_page_and_api(ledger: Ledger) -> None:
    with console(ledger.operator) as client:
        for path in api_reads(ledger.ids):
            r = client.get(path, headers=VIEW)
            assert r.status_code == 200, (path, r.text)
        jobs = client.get("/api/jobs", headers=VIEW).json()["jobs"]
        assert jobs[0]["job_name"] == HOSTILE_JOB  # the unhealthy first
        login(client, VIEWER_TOKEN)
        for path in pages(ledger.ids):
            r = client.get(path)
            assert r.status_code == 200, (path, r.text[:500])


def test_login_refuses_a_wrong_token_and_sets_strict_cookies(ledger: Ledger) -> None:
    with console(ledger.operator) as client:
        client.get("/login")
        csrf = client.cookies.get(auth.CSRF_COOKIE)
        bad = client.post("/login", data={"token": "wrong-token-0123456789", auth.CSRF_FIELD: csrf})
        assert bad.status_code == 401 and client.cookies.get(auth.SESSION_COOKIE) is None
        ok = client.post("/login", data={"token": OPERATOR_TOKEN, auth.CSRF_FIELD: csrf, "next": "//evil.test/"})
        assert ok.status_code == 303 and ok.headers["location"] == "/"  # never off-site
        cookies = ok.headers.get_list("set-cookie")
        session = next(c for c in cookies if c.startswith(auth.SESSION_COOKIE + "="))
        assert "HttpOnly" in session and "SameSite=strict" in session.replace("Strict", "strict")
        assert OPERATOR_TOKEN not in session


def test_a_forged_or_tampered_session_is_refused(ledger: Ledger) -> None:
    creds = auth.credentials(environ={"RUNNER_WEB_TOKEN": OPERATOR_TOKEN, "RUNNER_WEB_VIEWER_TOKEN": VIEWER_TOKEN})
    other = auth.credentials(environ={"RUNNER_WEB_TOKEN": OPERATOR_TOKEN})  # another secret
    viewer = creds.by_token(VIEWER_TOKEN)
    assert viewer is not None
    genuine = creds.session_cookie(viewer, VIEWER_TOKEN)
    _, _, sig = genuine.rpartition(".")
    import base64
    import json
    forged_body = base64.urlsafe_b64encode(json.dumps(
        {"u": "viewer", "r": "operator", "e": 2**40, "s": "x" * 43,
         "k": creds.token_mark(VIEWER_TOKEN)}).encode()).decode().rstrip("=")
    assert creds.by_session(genuine) is not None
    assert creds.by_session(f"{forged_body}.{sig}") is None
    assert creds.by_session(other.session_cookie(viewer, VIEWER_TOKEN)) is None
    assert creds.by_session(creds.session_cookie(viewer, VIEWER_TOKEN, now=0)) is None  # expired
    # made with a token that is not (any more) the user's: refused whatever its signature
    assert creds.by_session(creds.session_cookie(viewer, OPERATOR_TOKEN)) is None
    assert creds.by_session(creds.session_cookie(viewer, "an-old-token-0123456789")) is None


def test_a_session_the_ledger_cannot_check_is_refused_not_served(ledger: Ledger, db_roles: Any) -> None:
    """Issue 28: whether a session was logged out is the ledger's to say; when it cannot say
    (here the console's login lost SELECT on runner.web_sessions_ended), a page asked with a
    session is refused with 503, never served unchecked. Tokens on the API need no session."""
    import psycopg
    from psycopg import sql

    with console(ledger.operator) as client:
        login(client)
        assert client.get("/").status_code == 200
        with psycopg.connect(ledger.admin, autocommit=True) as conn:
            conn.execute(sql.SQL("REVOKE SELECT ON runner.web_sessions_ended FROM {}").format(
                sql.Identifier(db_roles.groups["operator"])))
        refused = client.get("/")
        assert refused.status_code == 503 and "cannot be checked" in refused.text
        assert client.get("/api/jobs", headers=OP).status_code == 200


# -- permissions -----------------------------------------------------------------------------------


def test_a_viewer_cannot_act(ledger: Ledger) -> None:
    slot = ledger.ids["dead_slot"].isoformat()
    before = requests_rows(ledger.admin)
    with console(ledger.operator) as client:
        r = client.post("/api/runs/rerun", headers=VIEW,
                        json={"job": HOSTILE_JOB, "slot": slot, "partition": HOSTILE_PART, "reason": "try"})
        assert r.status_code == 403 and "viewer" in r.json()["error"]
        assert client.post("/api/jobs/pause", headers=VIEW, json={"job": HOSTILE_JOB, "reason": "x"}).status_code == 403
        login(client, VIEWER_TOKEN)
        page = client.get(f"/runs/{ledger.ids['dead']}")
        assert 'id="rerun"' not in page.text  # no button
        assert client.get(f"/actions/rerun?job=x&slot={slot}").status_code == 403
        posted = client.post("/actions/rerun", data={
            "job": HOSTILE_JOB, "slot": slot, "partition": HOSTILE_PART, "reason": "try",
            auth.CSRF_FIELD: client.cookies.get(auth.CSRF_COOKIE)})
        assert posted.status_code == 403
    assert requests_rows(ledger.admin) == before
    assert scalar(ledger.admin, "SELECT status FROM runner.job_runs WHERE id = %s", (ledger.ids["dead"],)) == "dead"


def test_no_action_without_an_operator_credential(ledger: Ledger) -> None:
    slot = ledger.ids["dead_slot"].isoformat()
    with pytest.raises(auth.AuthConfigError, match="no credential configured"):
        prepare(ledger.operator, None, auth.credentials(environ={}), None, lambda _: None)
    # reads opened explicitly: anyone reads, and nobody can act
    creds = auth.credentials(open_reads=True, environ={})
    with console(ledger.operator, creds) as client:
        assert client.get("/").status_code == 200
        assert client.get("/api/jobs").status_code == 200
        r = client.post("/api/runs/rerun", json={"job": HOSTILE_JOB, "slot": slot, "partition": HOSTILE_PART,
                                                 "reason": "anonymous"})
        assert r.status_code == 403
        assert client.app.state.console.act_pool is None  # type: ignore[attr-defined]
    # a viewer token only: no operator exists, actions are off
    with console(ledger.operator, auth.credentials(environ={"RUNNER_WEB_VIEWER_TOKEN": VIEWER_TOKEN})) as client:
        assert client.post("/api/jobs/pause", headers=VIEW, json={"job": HOSTILE_JOB, "reason": "x"}).status_code == 403
    assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]


def test_the_proxy_header_is_trusted_only_when_enabled(ledger: Ledger) -> None:
    header = {"X-Forwarded-User": "alice"}
    with console(ledger.operator) as client:  # not enabled: the header means nothing
        assert client.get("/api/jobs", headers=header).status_code == 401
    creds = auth.credentials(proxy_header="X-Forwarded-User", proxy_operators=("alice",), environ={})
    with console(ledger.operator, creds) as client:
        assert client.get("/api/whoami", headers=header).json()["role"] == "operator"
        assert client.get("/api/whoami", headers={"X-Forwarded-User": "bob"}).json()["role"] == "viewer"
        assert client.get("/api/whoami").status_code == 401
        r = client.post("/api/jobs/pause", headers=header, json={"job": HOSTILE_JOB, "reason": "proxy pause"})
        assert r.status_code == 200, r.text
        assert r.json()["request"]["who"] == "web:alice"
        # ambient credentials: a cross-site form post is refused (JSON only), and so is another Origin
        assert client.post("/api/jobs/resume", headers=header, data={"job": HOSTILE_JOB,
                                                                   "reason": "x"}).status_code == 415
        assert client.post("/api/jobs/resume", headers={**header, "Origin": "https://evil.test"},
                           json={"job": HOSTILE_JOB, "reason": "x"}).status_code == 403
    assert requests_rows(ledger.admin)[-1]["who"] == "web:alice"
    assert len(requests_rows(ledger.admin)) == 2


# -- CSRF ------------------------------------------------------------------------------------------


def test_a_form_post_without_the_csrf_token_is_refused(ledger: Ledger) -> None:
    slot = ledger.ids["dead_slot"].isoformat()
    form = {"job": HOSTILE_JOB, "slot": slot, "partition": HOSTILE_PART, "reason": "csrf"}
    with console(ledger.operator) as client:
        login(client)
        assert client.post("/actions/rerun", data=form).status_code == 403
        assert client.post("/actions/rerun", data={**form, auth.CSRF_FIELD: "guess"}).status_code == 403
        good = client.cookies.get(auth.CSRF_COOKIE)
        assert client.post("/actions/rerun", data={**form, auth.CSRF_FIELD: good},
                           headers={"Origin": "https://evil.test"}).status_code == 403
        # a forged login (login CSRF) is refused too
        assert client.post("/login", data={"token": OPERATOR_TOKEN}).status_code == 403
    assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]
    assert scalar(ledger.admin, "SELECT status FROM runner.job_runs WHERE id = %s", (ledger.ids["dead"],)) == "dead"


# -- hostile text, headers, secrets ----------------------------------------------------------------


def test_hostile_strings_are_escaped_on_every_page(ledger: Ledger) -> None:
    with console(ledger.operator) as client:
        login(client)
        slot = ledger.ids["dead_slot"].isoformat()
        from urllib.parse import quote

        extra = [f"/actions/rerun?job={quote(HOSTILE_JOB)}&slot={quote(slot)}&partition={quote(HOSTILE_PART)}",
                 f"/actions/approve?job={quote(HOSTILE_JOB)}", f"/actions/pause?job={quote(HOSTILE_JOB)}",
                 f"/actions/backfill_cancel?plan_id={ledger.ids['plan']}",
                 f"/job?name={quote('<svg onload=alert(1)>')}"]  # an error page echoing the name
        for path in [*pages(ledger.ids), *extra]:
            html = client.get(path).text
            for hostile in HOSTILES:
                assert hostile not in html, (path, hostile)
            assert "<script" not in without_console_script(html).lower(), path
            assert "<img" not in html and "<iframe" not in html and "<svg onload" not in html, path
        job_page = client.get(f"/job?name={quote(HOSTILE_JOB)}").text
        assert "&lt;script&gt;alert(&#34;job&#34;)&lt;/script&gt;" in job_page
        run_page = client.get(f"/runs/{ledger.ids['dead']}").text
        assert "&lt;/td&gt;&lt;script&gt;alert(&#39;error&#39;)&lt;/script&gt;" in run_page
        assert "&#34;&gt;&lt;img src=x onerror=alert(&#34;part&#34;)&gt;" in run_page


def test_verification_shows_one_escaped_row_per_kind(ledger: Ledger) -> None:
    """The backfill view renders verify_detail as a table (kind, name, passed, outcome, the
    partitions not passing, expected, observed, detail), every value escaped text, not JSON;
    the Backfills page shows each kind and whether it passed."""
    import html as htmllib

    with console(ledger.operator) as client:
        login(client)
        page = client.get(f"/backfills/{ledger.ids['verified']}").text
        listing = client.get("/backfills").text
        api = client.get(f"/api/backfills/{ledger.ids['verified']}", headers=VIEW).json()
    table = page[page.index('<table class="list verification" id="verification">'):]
    table = table[:table.index("</table>")]
    rows = re.findall(r"<tr class=\"(pass|fail)\">(.*?)</tr>", table, re.S)
    assert [r[0] for r in rows] == ["pass", "fail"]
    cells = [[htmllib.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r[1], re.S)] for r in rows]
    assert cells[0][:3] == ["count", "rows", "yes"] and cells[0][5:7] == ["10", "10"]
    kind, name, passed, _outcome, not_passing, expected, observed, detail = cells[1]
    assert (kind, name, passed) == ("checksum", HOSTILE_REASON, "no")
    assert not_passing.startswith(HOSTILE_PART) and expected == HOSTILE_OWNER and detail == HOSTILE_ERROR
    assert json.loads(observed) == {"sum": HOSTILE_JOB}
    assert "1 of 2 kind(s) passing, 2 needed" in page
    for hostile in HOSTILES:
        assert hostile not in page and hostile not in listing
    assert "<script" not in without_console_script(page).lower() and "<img" not in page and "<iframe" not in page
    assert '"kinds"' not in page and "&#34;kinds&#34;" not in page  # no raw JSON dump
    plan_row = listing[listing.index(f'<a href="/backfills/{ledger.ids["verified"]}">'):]
    plan_row = plan_row[:plan_row.index(f'<a href="/backfills/{ledger.ids["plan"]}">')]  # the next plan's row
    assert re.search(r'<tr class="pass"><td class="kind">count</td>', plan_row)
    assert re.search(r'<tr class="fail"><td class="kind">checksum</td>', plan_row)
    # the API answers the same table beside the raw detail
    assert [(r["kind"], r["passed"]) for r in api["verification"]["rows"]] == [("count", True), ("checksum", False)]
    assert api["verify_detail"]["kinds"][1]["detail"] == HOSTILE_ERROR


def test_every_response_carries_the_security_headers(ledger: Ledger) -> None:
    with console(ledger.operator) as client:
        for path in ("/login", "/", "/api/jobs", "/static/console.css", "/nowhere"):
            r = client.get(path)
            csp = r.headers["content-security-policy"]
            assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, path
            assert "unsafe-inline" not in csp and "script-src 'self'" in csp
            assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
        login(client)
        home = client.get("/").text
        assert home.count("<script") == 1 and CONSOLE_SCRIPT in home  # the console's own file
        assert "<script" not in without_console_script(home)  # no inline script at all (none needed)
        js = client.get("/static/console.js")
        assert js.status_code == 200 and "javascript" in js.headers["content-type"]


def test_no_password_in_any_page_or_answer(ledger: Ledger) -> None:
    assert ledger.password in ledger.operator
    with console(ledger.operator) as client:
        for path in api_reads(ledger.ids):
            assert ledger.password not in client.get(path, headers=OP).text, path
        login(client)
        home = client.get("/").text
        assert "***" in home  # the URL is shown, redacted
        for path in pages(ledger.ids):
            assert ledger.password not in client.get(path).text, path


# -- actions: the CLI's code path, the same runner.requests row, as the web user ---------------------


def test_rerun_through_the_api_writes_the_request_as_the_web_user(ledger: Ledger) -> None:
    slot = ledger.ids["dead_slot"].isoformat()
    body = {"job": HOSTILE_JOB, "slot": slot, "partition": HOSTILE_PART, "reason": "fixed the feed"}
    with console(ledger.operator) as client:
        dry = client.post("/api/runs/rerun", headers=OP, json={**body, "dry_run": True})
        assert dry.status_code == 200, dry.text
        impact = dry.json()["impact"]
        assert impact["run"]["id"] == ledger.ids["dead"] and impact["refusal"] is None
        assert len(impact["attempts"]) == 1
        assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]  # a dry run writes nothing
        assert client.post("/api/runs/rerun", headers=OP, json={**body, "reason": "  "}).status_code == 400
        done = client.post("/api/runs/rerun", headers=OP, json=body)
        assert done.status_code == 200, done.text
        assert done.json()["run"]["status"] == "pending"
        again = client.post("/api/runs/rerun", headers=OP, json=body)  # pending now: refused
        assert again.status_code == 400 and "already pending" in again.json()["error"]
    row = requests_rows(ledger.admin)[-1]
    assert (row["action"], row["job_name"], row["who"], row["reason"]) == (
        "rerun", HOSTILE_JOB, "web:operator", "fixed the feed")
    login_name = ledger.operator.split("//")[1].split(":")[0]
    assert row["db_user"] == login_name  # the operator login, not the schema owner
    assert row["touched"]["runs"][0]["run_id"] == ledger.ids["dead"]
    assert scalar(ledger.admin, "SELECT (status, trigger) FROM runner.job_runs WHERE id = %s",
                  (ledger.ids["dead"],)) == ("pending", "manual")


def test_rerun_through_the_pages_shows_the_impact_then_writes_the_request(ledger: Ledger) -> None:
    from urllib.parse import quote

    slot = ledger.ids["dead_slot"].isoformat()
    with console(ledger.operator) as client:
        login(client)
        page = client.get(f"/actions/rerun?job={quote(HOSTILE_JOB)}&slot={quote(slot)}&partition={quote(HOSTILE_PART)}")
        assert page.status_code == 200
        assert "Impact" in page.text and "1 attempt(s) so far" in page.text and "no effect recorded" in page.text
        form = {"job": HOSTILE_JOB, "slot": slot, "partition": HOSTILE_PART, "seen_status": "dead",
                "seen_fence": "3", auth.CSRF_FIELD: csrf_of(page.text)}
        assert client.post("/actions/rerun", data=form).status_code == 400  # no reason
        stale = client.post("/actions/rerun", data={**form, "seen_fence": "2", "reason": "stale view"})
        assert stale.status_code == 400  # the run changed since it was shown: the function refuses
        assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]
        done = client.post("/actions/rerun", data={**form, "reason": "from the page"})
        assert done.status_code == 200 and "Request" in done.text, done.text
    row = requests_rows(ledger.admin)[-1]
    assert (row["action"], row["who"], row["reason"]) == ("rerun", "web:operator", "from the page")


def test_pause_resume_approve_skip_and_backfill_actions_write_their_requests(ledger: Ledger) -> None:
    with console(ledger.operator) as client:
        def act(path: str, **body: Any) -> dict[str, Any]:
            r = client.post(path, headers=OP, json=body)
            assert r.status_code == 200, (path, r.text)
            return r.json()

        assert act("/api/jobs/pause", job=HOSTILE_JOB, reason="pause it")["request"]["action"] == "pause"
        assert act("/api/jobs/pause", job=HOSTILE_JOB, reason="again")["request"] is None  # already paused
        act("/api/jobs/resume", job=HOSTILE_JOB, reason="resume it")
        dry = act("/api/runs/skip", job=HOSTILE_JOB, reason="dry", dry_run=True)
        assert [r["id"] for r in dry["impact"]["runs"]] == [ledger.ids["awaiting"]]
        act("/api/runs/skip", job=HOSTILE_JOB, slot=ledger.ids["awaiting_slot"].isoformat(), reason="not needed")
        act(f"/api/backfills/{ledger.ids['plan']}/cancel", reason="wrong range")
        r = client.post("/api/backfills", headers=OP, json={
            "job": HOSTILE_JOB, "from": "2026-01-01T00:00:00+00:00", "to": "2026-01-02T00:00:00+00:00",
            "reason": "no app", "dry_run": True})
        assert r.status_code == 400 and "--app" in r.json()["error"]
    rows = requests_rows(ledger.admin)
    assert [(r["action"], r["who"]) for r in rows[1:]] == [
        ("pause", "web:operator"), ("resume", "web:operator"), ("skip", "web:operator"),
        ("backfill_cancel", "web:operator")]
    assert scalar(ledger.admin, "SELECT status FROM runner.job_runs WHERE id = %s",
                  (ledger.ids["awaiting"],)) == "skipped"


def test_a_backfill_with_the_app_shows_its_dry_run_then_creates_the_plan(ledger: Ledger, tmp_path: Path) -> None:
    from runner.model.app import Runner

    app = Runner()

    @app.job(HOSTILE_JOB, every="1h", partitions=[HOSTILE_PART, "b"])
    def handler(ctx: Any) -> None:
        pass

    body = {"job": HOSTILE_JOB, "from": ledger.ids["dead_slot"].isoformat(),
            "to": ledger.ids["awaiting_slot"].isoformat(), "reason": "replay the morning", "concurrency": 2}
    with console(ledger.operator, app=app) as client:
        dry = client.post("/api/backfills", headers=OP, json={**body, "dry_run": True})
        assert dry.status_code == 200, dry.text
        impact = dry.json()["impact"]
        assert (impact["expected_runs"], impact["already_succeeded"], impact["will_requeue"]) == (2, 1, 1)
        assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]
        made = client.post("/api/backfills", headers=OP, json=body)
        assert made.status_code == 200, made.text
        plan_id = made.json()["backfill"]["id"]
        assert client.get(f"/api/backfills/{plan_id}", headers=VIEW).json()["status"] == "running"
    row = requests_rows(ledger.admin)[-1]
    assert (row["action"], row["who"], row["reason"]) == ("backfill", "web:operator", "replay the morning")


def test_a_forced_backfill_resumes_from_a_checkpoint_only_when_asked_and_its_preview_says_so(
        ledger: Ledger) -> None:
    """Issue 33 through the console: the preview (API and page) lists the forced run with its
    checkpoint and where its next attempt starts; with resume the plan keeps the checkpoint
    (the request row saying kept), as the CLI's --resume does."""
    from urllib.parse import urlencode

    from runner.model.app import Runner

    app = Runner()

    @app.job(HOSTILE_JOB, every="1h", partitions=[HOSTILE_PART, "b"])
    def handler(ctx: Any) -> None:
        pass

    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        conn.execute("UPDATE runner.job_runs SET checkpoint = '{\"next\": 7}', checkpoint_at = now(),"
                     " checkpoint_fence = fence, checkpoint_bytes = 11, checkpoint_summary = '7 of 9',"
                     " checkpoints = 1 WHERE id = %s", (ledger.ids["succeeded"],))
    query = {"job": HOSTILE_JOB, "from": ledger.ids["dead_slot"].isoformat(),
             "to": ledger.ids["awaiting_slot"].isoformat(), "force": "1"}
    body = {**query, "force": True, "reason": "recompute"}
    with console(ledger.operator, app=app) as client:
        impact = client.post("/api/backfills", headers=OP, json={**body, "dry_run": True}).json()["impact"]
        assert (impact["will_force"], impact["will_requeue"], impact["with_checkpoint"]) == (1, 1, 1)
        assert impact["resume"] is False
        assert [(r["id"], r["starts"].split(":")[0]) for r in impact["starts"]] == [
            (ledger.ids["succeeded"], "from scratch"), (ledger.ids["dead"], "from scratch (the run has no checkpoint)")]
        assert "7 of 9) is cleared (--resume keeps it)" in impact["starts"][0]["starts"]
        impact = client.post("/api/backfills", headers=OP,
                             json={**body, "resume": True, "dry_run": True}).json()["impact"]
        assert impact["resume"] is True
        assert impact["starts"][0]["starts"].startswith("from its last checkpoint (")
        login(client)
        page = client.get("/actions/backfill?" + urlencode({**query, "resume": "1"}))
        assert page.status_code == 200 and 'id="impact-starts"' in page.text
        assert "resume, each continues from its checkpoint" in page.text
        made = client.post("/api/backfills", headers=OP, json={**body, "resume": True})
        assert made.status_code == 200, made.text
        assert made.json()["backfill"]["resume"] is True
    assert scalar(ledger.admin, "SELECT (status, checkpoint ->> 'next') FROM runner.job_runs WHERE id = %s",
                  (ledger.ids["succeeded"],)) == ("pending", "7")
    touched = requests_rows(ledger.admin)[-1]["touched"]
    assert [(r["run_id"], r["checkpoint"]) for r in touched["runs_requeued"]] == [
        (ledger.ids["dead"], None),
        (ledger.ids["succeeded"], {**touched["runs_requeued"][1]["checkpoint"], "summary": "7 of 9", "kept": True})]


def test_a_backfill_reaching_past_now_is_clamped_in_the_web_too(ledger: Ledger) -> None:
    """Issue 26, defect 1, through the web action: the dry run and the plan end at now, and
    the preview says so in one line."""
    from datetime import timedelta

    from runner.model.app import Runner

    app = Runner()

    @app.job("webtick", every="1m")
    def handler(ctx: Any) -> None:
        pass

    now = scalar(ledger.admin, "SELECT now()")
    body = {"job": "webtick", "from": (now - timedelta(minutes=5)).isoformat(),
            "to": (now + timedelta(hours=1)).isoformat(), "reason": "the last minutes"}
    with console(ledger.operator, app=app) as client:
        dry = client.post("/api/backfills", headers=OP, json={**body, "dry_run": True})
        assert dry.status_code == 200, dry.text
        impact = dry.json()["impact"]
        assert impact["expected_runs"] in (5, 6)
        assert "is after now: the range is clamped" in impact["clamped"]
        made = client.post("/api/backfills", headers=OP, json=body)
        assert made.status_code == 200, made.text
    after = scalar(ledger.admin, "SELECT now()")
    assert datetime.fromisoformat(str(made.json()["backfill"]["range_to"])) <= after
    assert scalar(ledger.admin, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'webtick'"
                                " AND schedule_slot > %s", (after,)) == 0


# -- the job grid and the gaps filter --------------------------------------------------------------


def test_the_job_grid_shows_cells_then_counts_when_partitions_are_many(ledger: Ledger) -> None:
    import psycopg

    with console(ledger.operator) as client:
        grid = client.get(f"/api/job?name={HOSTILE_JOB}", headers=VIEW).json()["grid"]
        assert grid["aggregated"] is False and grid["partitions"] == ['"><img src=x onerror=alert("part")>', "b"]
        statuses = {(c["partition"], c["status"]) for c in grid["cells"]}
        assert {(HOSTILE_PART, "dead"), ("b", "succeeded"), (HOSTILE_PART, "awaiting_approval")} <= statuses
        assert ("b", "missing") in statuses  # an expected slot x partition with no run
        with psycopg.connect(ledger.admin, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date, window_start,"
                " window_end, status, trigger, attempt, fence, idempotency_key)"
                " SELECT %s, %s, format('p%%s', i), '2026-01-01', now(), now(), 'pending', 'schedule', 0, 0, 'k'"
                " FROM generate_series(1, 50) i", (HOSTILE_JOB, ledger.ids["succeeded_slot"]))
        data = client.get(f"/api/job?name={HOSTILE_JOB}", headers=VIEW).json()
        grid = data["grid"]
        assert grid["aggregated"] is True and grid["partitions"] is None and grid["cells"] == []
        at_slot = next(c["statuses"] for c in grid["counts"]
                       if datetime.fromisoformat(c["slot"]) == ledger.ids["succeeded_slot"])
        assert at_slot == {"pending": 50, "dead": 1, "succeeded": 1}
        login(client)
        page = client.get(f"/job?name={HOSTILE_JOB}").text
        assert "runs by status" in page and "pending</span> 50" in page


def test_gaps_filter_by_job_state_and_time(ledger: Ledger) -> None:
    with console(ledger.operator) as client:
        everything = client.get("/api/gaps", headers=VIEW).json()["gaps"]
        assert {g["state"] for g in everything} >= {"dead", "awaiting_approval", "never_started"}
        dead = client.get("/api/gaps", headers=VIEW, params={"job": HOSTILE_JOB, "state": "dead"}).json()["gaps"]
        assert [g["run_id"] for g in dead] == [ledger.ids["dead"]]
        slot = ledger.ids["dead_slot"].isoformat()
        before = client.get("/api/gaps", headers=VIEW, params={"until": slot}).json()["gaps"]
        assert before and all(datetime.fromisoformat(g["schedule_slot"]) < ledger.ids["dead_slot"] for g in before)
        assert client.get("/api/gaps", headers=VIEW, params={"job": "quiet"}).json()["gaps"] == []
        assert client.get("/api/gaps", headers=VIEW, params={"state": "<bogus>"}).status_code == 400
        assert client.get("/api/gaps", headers=VIEW, params={"since": "yesterday"}).status_code == 400


def test_runner_web_refuses_to_start_without_a_credential(ledger: Ledger) -> None:
    import os

    from tests.support import run_cli

    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_WEB_")}
    done = run_cli("web", "--database-url", ledger.operator, "--port", "1", env=env)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("runner: error: no credential configured")
    assert ledger.password not in done.stderr
    short = run_cli("web", "--database-url", ledger.operator, "--port", "1", env={**env, "RUNNER_WEB_TOKEN": "short"})
    assert short.returncode == 1 and "at least 16 characters" in short.stderr


def test_a_token_file_names_each_person_and_their_role(ledger: Ledger, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("# name role token\nalice operator alice-token-0123456789\nbob viewer bob-token-0123456789ab\n")
    creds = auth.credentials(token_file=tokens, environ={})
    with console(ledger.operator, creds) as client:
        alice = {"Authorization": "Bearer alice-token-0123456789"}
        bob = {"Authorization": "Bearer bob-token-0123456789ab"}
        assert client.get("/api/whoami", headers=bob).json() == {
            "name": "bob", "role": "viewer", "who": "web:bob", "actions": False}
        assert client.post("/api/jobs/pause", headers=bob, json={"job": HOSTILE_JOB, "reason": "x"}).status_code == 403
        done = client.post("/api/jobs/pause", headers=alice, json={"job": HOSTILE_JOB, "reason": "alice's call"})
        assert done.status_code == 200 and done.json()["request"]["who"] == "web:alice"
    assert requests_rows(ledger.admin)[-1]["who"] == "web:alice"
    tokens.write_text("alice admin alice-token-0123456789\n")
    with pytest.raises(auth.AuthConfigError, match="NAME ROLE TOKEN"):
        auth.credentials(token_file=tokens, environ={})
    tokens.write_text("just-one-operator-token-0123\n")
    [(_, user)] = auth.credentials(token_file=tokens, environ={}).tokens
    assert (user.name, user.role) == ("operator", "operator")


def test_the_console_page_documents_its_screenshot_and_the_reference_every_api_route() -> None:
    from starlette.routing import Route

    from tests.support import ROOT

    page = ROOT / "docs" / "how-to" / "console.md"
    section = page.read_text(encoding="utf-8")
    shot = re.search(r"!\[[^]]*\]\(([^)]+\.png)\)", section)
    assert shot and (page.parent / shot.group(1)).stat().st_size > 10_000, "no screenshot of the console"
    creds = auth.credentials(environ={"RUNNER_WEB_TOKEN": OPERATOR_TOKEN})
    web = create_app(WebConfig(database_url="postgresql://unused", read_database_url=None, credentials=creds))
    routes = {r.path.replace("{run_id:int}", "N").replace("{plan_id:int}", "N").replace("{action}", "NAME")
              for r in web.routes if isinstance(r, Route) and r.path.startswith("/api/")}
    documented = {re.sub(r"/\d+|/ID", "/N", p.split("?")[0])
                  for p in re.findall(r"(/api/[a-z/A-Z0-9_]+(?:\?[^' ]*)?)", section)}
    # every route is in the generated reference (docs/reference/api.md, from the OpenAPI
    # document: tests/test_reference.py); what the console page names must be served
    reference = {re.sub(r"\{\w+\}", "N", p) for p in re.findall(
        r"^### (?:GET|POST) (/api/\S+)$", (ROOT / "docs" / "reference" / "api.md").read_text(), re.MULTILINE)}
    assert routes <= reference | {"/api/actions/NAME"}, f"not in the reference: {sorted(routes - reference)}"
    assert documented <= routes, f"documented but not served: {sorted(documented - routes)}"
    for needed in ("RUNNER_WEB_SESSION_SECRET", "--session-secret-file", "--trust-proxy-header",
                   "--read-database-url", "429", "--login-failures-per-client", "viewer", "operator"):
        assert needed in section, needed


def test_the_pages_read_through_the_read_only_url_and_actions_write_through_the_other(ledger: Ledger) -> None:
    import psycopg

    creds = auth.credentials(environ={"RUNNER_WEB_TOKEN": OPERATOR_TOKEN})
    config = WebConfig(database_url=ledger.operator, read_database_url=ledger.readonly, credentials=creds)
    with TestClient(create_app(config), follow_redirects=False, base_url="http://localhost") as client:
        for path in ("/api/jobs", f"/api/runs/{ledger.ids['dead']}", "/api/alerts"):
            assert client.get(path, headers=OP).status_code == 200, path
        with psycopg.connect(ledger.admin, autocommit=True) as conn:
            sessions = dict(conn.execute(
                "SELECT application_name, usename FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name LIKE 'runner-web-%'").fetchall())
        readonly_user = psycopg.conninfo.conninfo_to_dict(ledger.readonly)["user"]
        operator_user = psycopg.conninfo.conninfo_to_dict(ledger.operator)["user"]
        # sessions are checked and ended on --database-url (never the replica: a logout holds at once)
        assert sessions == {"runner-web-read": readonly_user, "runner-web-act": operator_user,
                            "runner-web-session": operator_user}
        done = client.post("/api/jobs/pause", headers=OP, json={"job": HOSTILE_JOB, "reason": "replica test"})
        assert done.status_code == 200, done.text
    assert requests_rows(ledger.admin)[-1]["db_user"] == operator_user


def test_the_jobs_page_sorts_by_a_column_either_way_the_unhealthy_first_by_default(ledger: Ledger) -> None:
    with console(ledger.operator) as client:
        def names(query: str) -> list[str]:
            return [j["job_name"] for j in client.get("/api/jobs" + query, headers=VIEW).json()["jobs"]]

        assert names("")[0] == HOSTILE_JOB  # its dead run: unhealthy first
        assert names("?sort=job_name") == sorted(names(""))
        assert names("?sort=job_name&dir=desc") == sorted(names(""), reverse=True)
        page = client.get("/?sort=job_name&dir=desc", headers=VIEW)
        assert page.status_code == 200 and page.text.index("quiet") < page.text.index("&lt;script&gt;")


def test_a_copied_ledger_is_adopted_through_the_console_as_the_operator_login(ledger: Ledger) -> None:
    """The registry's adopt action (runner db adopt, issue 29 point 6) on the console: the page
    shows the copy and what adopting lets the runners do, a viewer cannot, an operator's API
    call records the identity with its request row (as the operator login), and a ledger that
    is not a copy refuses it, nothing written. The copy is made by recording another database
    oid, as a restore leaves the source's (tests/test_copies.py restores for real)."""
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        conn.execute("UPDATE runner.ledger_identity SET database_oid = 1, database_name = 'production'")
    with console(ledger.operator) as client:
        login(client)
        page = client.get("/actions/adopt")
        assert page.status_code == 200 and "this ledger is a copy: it was recorded in database production" \
            in page.text and 'id="confirm"' in page.text, page.text
        viewer = client.post("/api/actions/adopt", headers=VIEW, json={"reason": "mine"})
        assert viewer.status_code == 403
        done = client.post("/api/actions/adopt", headers=OP, json={"reason": "staging from production"})
        assert done.status_code == 200, done.text
        again = client.post("/api/actions/adopt", headers=OP, json={"reason": "twice"})
        assert again.status_code == 400 and "not a copy" in again.json()["error"]
    row = requests_rows(ledger.admin)[-1]
    assert (row["action"], row["who"], row["reason"]) == ("adopt_ledger", "web:operator", "staging from production")
    assert row["db_user"] == ledger.operator.split("//")[1].split(":")[0]
    assert row["touched"]["before"]["database_name"] == "production"
    assert scalar(ledger.admin, "SELECT copied FROM runner.ledger_copy_v1()") is False
