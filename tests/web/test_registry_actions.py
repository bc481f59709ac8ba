"""The console serves every action of the registry (runner/actions/registry.py), with the same
impact-first confirmation: retire, unretire, lane_set and prune over the JSON API and the
pages, each as the CLI does it (the same database function, the same runner.requests row,
with the web user), viewers refused, hostile text escaped, overlong text refused with one
line and nothing written."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import psycopg

from runner.actions import registry as actions
from runner.web import auth
from tests.support import scalar
from tests.web.conftest import (
    HOSTILE_JOB,
    HOSTILE_REASON,
    HOSTILES,
    VIEWER_TOKEN,
    Ledger,
    requests_rows,
    without_console_script,
)
from tests.web.test_api import OP, VIEW, console, csrf_of, login

LONG = "x" * 10_001


def actions_of(ledger: Ledger) -> list[tuple[str, Any, str]]:
    return [(r["action"], r["job_name"], r["who"]) for r in requests_rows(ledger.admin)]


def assert_escaped(html: str) -> None:
    for hostile in HOSTILES:
        assert hostile not in html, hostile
    assert "<script" not in without_console_script(html).lower() and "<img" not in html and "<iframe" not in html


def test_the_api_serves_every_action_of_the_registry(ledger: Ledger) -> None:
    with console(ledger.operator) as client:
        for name in actions.names():
            r = client.post(f"/api/actions/{name}", headers=OP, json={"dry_run": True})
            error = r.json().get("error", "")
            assert not error.startswith("no action"), (name, error)
        unknown = client.post("/api/actions/drop_everything", headers=OP, json={"dry_run": True, "reason": "x"})
        assert unknown.status_code == 400 and unknown.json()["error"].startswith("no action 'drop_everything'")
    assert actions_of(ledger) == [("pause", HOSTILE_JOB, "<b onmouseover=alert('owner')>team</b>")]


def test_retire_and_unretire_through_the_api(ledger: Ledger) -> None:
    body = {"job": HOSTILE_JOB, "reason": HOSTILE_REASON}
    with console(ledger.operator) as client:
        dry = client.post("/api/actions/retire", headers=OP, json={**body, "dry_run": True})
        assert dry.status_code == 200, dry.text
        impact = dry.json()["impact"]
        assert impact["job"]["job_name"] == HOSTILE_JOB and impact["job"]["retired_at"] is None
        assert impact["refusal"] is None and impact["changes"] is True
        assert client.post("/api/actions/unretire", headers=OP, json={**body, "dry_run": True}).json()[
            "impact"]["refusal"] == f"job {HOSTILE_JOB!r} is already not retired; nothing to do"
        assert len(actions_of(ledger)) == 1  # a dry run writes nothing
        viewer = client.post("/api/actions/retire", headers=VIEW, json=body)
        assert viewer.status_code == 403 and "viewer" in viewer.json()["error"]
        for bad, line in [({**body, "reason": " "}, "reason must not be empty"),
                          ({**body, "reason": LONG}, "reason is longer than 10000 characters"),
                          ({**body, "job": LONG}, "job is longer than 10000 characters"),
                          ({"reason": "x"}, "job is required")]:
            r = client.post("/api/actions/retire", headers=OP, json=bad)
            assert r.status_code == 400 and r.json() == {"error": line}
        assert scalar(ledger.admin, "SELECT retired_at FROM runner.jobs WHERE job_name = %s", (HOSTILE_JOB,)) is None
        done = client.post("/api/actions/retire", headers=OP, json=body)
        assert done.status_code == 200, done.text
        assert done.json()["request"]["action"] == "retire" and done.json()["job"]["retired_at"] is not None
        again = client.post("/api/actions/retire", headers=OP, json={**body, "reason": "again"})
        assert again.status_code == 200 and again.json()["request"] is None  # already retired
        back = client.post("/api/actions/unretire", headers=OP, json={**body, "reason": "back in the code"})
        assert back.status_code == 200 and back.json()["request"]["action"] == "unretire"
    rows = requests_rows(ledger.admin)
    assert [(r["action"], r["job_name"], r["who"], r["reason"]) for r in rows[1:]] == [
        ("retire", HOSTILE_JOB, "web:operator", HOSTILE_REASON),
        ("unretire", HOSTILE_JOB, "web:operator", "back in the code")]
    assert scalar(ledger.admin, "SELECT retired_at FROM runner.jobs WHERE job_name = %s", (HOSTILE_JOB,)) is None


def test_retire_through_the_pages_shows_the_impact_then_writes_the_request(ledger: Ledger) -> None:
    with console(ledger.operator) as client:
        login(client)
        job_page = client.get(f"/job?name={quote(HOSTILE_JOB)}").text
        assert f'href="/actions/retire?job={quote(HOSTILE_JOB, safe="")}"' in job_page.replace("&amp;", "&")
        page = client.get(f"/actions/retire?job={quote(HOSTILE_JOB)}")
        assert page.status_code == 200
        assert_escaped(page.text)
        assert "will retire it" in page.text and "live runner(s)" in page.text
        form = {"job": HOSTILE_JOB, auth.CSRF_FIELD: csrf_of(page.text)}
        assert client.post("/actions/retire", data=form).status_code == 400  # no reason
        assert client.post("/actions/retire", data={**form, "reason": LONG}).status_code == 400
        done = client.post("/actions/retire", data={**form, "reason": HOSTILE_REASON})
        assert done.status_code == 200 and "Request" in done.text, done.text
        assert_escaped(done.text)
        retired = client.get(f"/job?name={quote(HOSTILE_JOB)}").text
        assert 'id="retired"' in retired and 'id="unretire"' in retired and 'id="retire"' not in retired
        unretire = client.get(f"/actions/unretire?job={quote(HOSTILE_JOB)}").text
        assert "will unretire it" in unretire
        refused = client.get(f"/actions/retire?job={quote(HOSTILE_JOB)}").text
        assert 'id="refusal"' in refused and 'id="confirm"' not in refused  # already retired: no form
        login(client, VIEWER_TOKEN)
        assert client.get(f"/actions/unretire?job={quote(HOSTILE_JOB)}").status_code == 403
        assert 'id="unretire"' not in client.get(f"/job?name={quote(HOSTILE_JOB)}").text
    assert [a for a, _, _ in actions_of(ledger)] == ["pause", "retire"]


def test_lane_set_through_the_api(ledger: Ledger) -> None:
    with console(ledger.operator) as client:
        dry = client.post("/api/actions/lane_set", headers=OP, json={
            "lane": "etl", "rank": 5, "concurrency": 2, "description": HOSTILE_REASON, "dry_run": True})
        assert dry.status_code == 200, dry.text
        impact = dry.json()["impact"]
        assert impact["new"] is True and impact["refusal"] is None
        assert impact["changes"] == {"rank": 5, "concurrency": 2, "description": HOSTILE_REASON}
        assert scalar(ledger.admin, "SELECT count(*) FROM runner.lanes WHERE lane = 'etl'") == 0
        hostile = client.post("/api/actions/lane_set", headers=OP, json={"lane": HOSTILE_JOB, "dry_run": True})
        assert hostile.json()["impact"]["refusal"].startswith("lane name ")
        for bad, line in [({"lane": HOSTILE_JOB, "reason": "x"}, f"lane name {HOSTILE_JOB!r} is not valid: 1 to 40 "
                           "of a-z, 0-9 and _, starting with a letter"),
                          ({"lane": "etl", "rank": 1001, "reason": "x"}, "rank must be between 0 and 1000, got 1001"),
                          ({"lane": "etl", "concurrency": "lots", "reason": "x"},
                           "concurrency must be a number or none, got 'lots'"),
                          ({"lane": "etl", "description": LONG, "reason": "x"},
                           "description is longer than 10000 characters")]:
            r = client.post("/api/actions/lane_set", headers=OP, json=bad)
            assert r.status_code == 400 and r.json() == {"error": line}, bad
        viewer = client.post("/api/actions/lane_set", headers=VIEW, json={"lane": "etl", "reason": "x"})
        assert viewer.status_code == 403
        made = client.post("/api/actions/lane_set", headers=OP, json={
            "lane": "etl", "rank": 5, "concurrency": 2, "description": HOSTILE_REASON, "reason": "a lane for etl"})
        assert made.status_code == 200, made.text
        assert made.json()["lane"]["created"] is True and made.json()["request"]["action"] == "lane_set"
        changed = client.post("/api/actions/lane_set", headers=OP, json={
            "lane": "etl", "concurrency": "none", "rate": 1.5, "reason": "no limit, a rate"})
        assert changed.status_code == 200, changed.text
        again = client.post("/api/actions/lane_set", headers=OP, json={"lane": "etl", "dry_run": True})
        current = again.json()["impact"]["current"]
        assert (current["rank"], current["concurrency"], current["rate"]) == (5, None, 1.5)
    rows = requests_rows(ledger.admin)
    assert [(r["action"], r["who"], r["reason"]) for r in rows[1:]] == [
        ("lane_set", "web:operator", "a lane for etl"), ("lane_set", "web:operator", "no limit, a rate")]


def test_lane_set_through_the_pages(ledger: Ledger) -> None:
    with console(ledger.operator) as client:
        login(client)
        assert 'id="lane-form"' in client.get("/").text
        page = client.get("/actions/lane_set", params={"lane": "etl", "rank": "7", "description": HOSTILE_REASON})
        assert page.status_code == 200 and "a new lane" in page.text
        assert_escaped(page.text)
        bad = client.get("/actions/lane_set", params={"lane": HOSTILE_JOB})
        assert bad.status_code == 200 and 'id="refusal"' in bad.text and 'id="confirm"' not in bad.text
        assert_escaped(bad.text)
        form = {"lane": "etl", "rank": "7", "description": HOSTILE_REASON, auth.CSRF_FIELD: csrf_of(page.text)}
        done = client.post("/actions/lane_set", data={**form, "reason": "from the page"})
        assert done.status_code == 200 and "Request" in done.text, done.text
        assert_escaped(done.text)
    assert scalar(ledger.admin, "SELECT rank FROM runner.lanes WHERE lane = 'etl'") == 7
    assert scalar(ledger.admin, "SELECT description FROM runner.lanes WHERE lane = 'etl'") == HOSTILE_REASON


def _prunable(ledger: Ledger) -> int:
    """A job whose stored policy lets its old successes go (tests/test_prune.py's seed);
    how many runs it lets go now."""
    from runner.settings import lock_namespace
    from tests.test_prune import seed

    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        seed(conn, job="old-reports")
        [(count,)] = conn.execute(
            "SELECT count(*) FROM runner.prune_v1(10000, NULL, true, %s)", (lock_namespace(),)).fetchall()
    return int(count)


def test_prune_through_the_api_is_its_dry_run_then_one_prune(ledger: Ledger) -> None:
    due = _prunable(ledger)
    assert due > 20
    runs = "SELECT count(*) FROM runner.job_runs WHERE job_name = 'old-reports'"
    before, requests_before = scalar(ledger.admin, runs), len(requests_rows(ledger.admin))
    with console(ledger.operator) as client:
        dry = client.post("/api/actions/prune", headers=OP, json={"dry_run": True, "limit": 5})
        assert dry.status_code == 200, dry.text
        impact = dry.json()["impact"]
        assert (impact["dry_run"], impact["runs"], impact["more"], impact["refusal"]) == (True, 5, True, None)
        whole = client.post("/api/actions/prune", headers=OP, json={"dry_run": True}).json()["impact"]
        assert whole["runs"] == due and whole["by_job"] == {"old-reports": {"succeeded": due}}
        assert scalar(ledger.admin, runs) == before  # a dry run deletes nothing
        assert client.post("/api/actions/prune", headers=VIEW, json={"reason": "x"}).status_code == 403
        for bad, line in [({"reason": ""}, "reason must not be empty"),
                          ({"reason": LONG}, "reason is longer than 10000 characters"),
                          ({"reason": "x", "batch": 0}, "batch must be between 1 and 10000, got 0"),
                          ({"reason": "x", "limit": "all"}, "limit must be a number, got 'all'")]:
            r = client.post("/api/actions/prune", headers=OP, json=bad)
            assert r.status_code == 400 and r.json() == {"error": line}, bad
        # the archive options are the CLI's: not read from the console
        done = client.post("/api/actions/prune", headers=OP, json={
            "reason": HOSTILE_REASON, "archive_table": "public.stolen", "archive_file": "/tmp/stolen"})
        assert done.status_code == 200, done.text
        assert (done.json()["runs"], done.json()["request"]) == (due, None)
        nothing = client.post("/api/actions/prune", headers=OP, json={"dry_run": True}).json()["impact"]
        assert nothing["runs"] == 0 and nothing["refusal"].startswith("nothing to prune")
    assert scalar(ledger.admin, runs) == before - due
    assert scalar(ledger.admin, "SELECT to_regclass('public.stolen')") is None
    assert len(requests_rows(ledger.admin)) == requests_before  # prune is not audited (as `runner prune`)


def test_prune_through_the_pages(ledger: Ledger) -> None:
    due = _prunable(ledger)
    with console(ledger.operator) as client:
        login(client)
        assert 'href="/actions/prune' in client.get("/").text.replace('action="/actions/prune"', 'href="/actions/prune')
        page = client.get("/actions/prune")
        assert page.status_code == 200 and f"would prune {due} run(s)" in page.text
        assert "old-reports" in page.text
        form = {auth.CSRF_FIELD: csrf_of(page.text), "reason": "disk is filling"}
        done = client.post("/actions/prune", data=form)
        assert done.status_code == 200 and f"Pruned {due} run(s)" in done.text, done.text
        refused = client.get("/actions/prune")
        assert 'id="refusal"' in refused.text and 'id="confirm"' not in refused.text
        login(client, VIEWER_TOKEN)
        assert client.get("/actions/prune").status_code == 403
        assert 'id="prune-form"' not in client.get("/").text
