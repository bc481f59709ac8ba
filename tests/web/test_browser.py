"""The console in a real browser: Debian's Chromium driven by Playwright against a real
``runner web`` subprocess on a real ledger (the console logged in to the database as an
operator login). Logs in, opens every page (no Content-Security-Policy violation, no
hostile string run as markup), clicks through a rerun (its impact, then a reason) and
checks the audit row. Screenshots go to the test's tmp dir.

Skipped, with the reason, where /usr/bin/chromium is missing (``apt-get install -y chromium``;
.ci/run installs it)."""

from __future__ import annotations

import os
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.support import ROOT, eventually, runner_cmd, scalar
from tests.web.conftest import (
    HOSTILE_ERROR,
    HOSTILE_JOB,
    HOSTILE_PART,
    HOSTILE_REASON,
    OPERATOR_TOKEN,
    VIEWER_TOKEN,
    Ledger,
    requests_rows,
)

CHROMIUM = Path("/usr/bin/chromium")
CONSOLE_JS = "/static/console.js"  # the pages' one script
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no /usr/bin/chromium: `apt-get install -y chromium` to run the browser tests")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def web(ledger: Ledger, tmp_path: Path) -> Iterator[str]:
    """A real `runner web` subprocess on the ledger; its base URL."""
    port = free_port()
    log = (tmp_path / "web.log").open("w")
    proc = subprocess.Popen(
        runner_cmd("web", "--port", str(port), "--database-url", ledger.operator),
        env={**os.environ, "RUNNER_WEB_TOKEN": OPERATOR_TOKEN, "RUNNER_WEB_VIEWER_TOKEN": VIEWER_TOKEN},
        stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, (tmp_path / "web.log").read_text()
        try:
            with urllib.request.urlopen(base + "/login", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    try:
        eventually(up, timeout=60, interval=0.2, message="runner web serves /login")
        yield base
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def test_pages_and_a_rerun_in_a_real_browser(ledger: Ledger, web: str, browser: Any, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("dialog", lambda d: (problems.append(f"a dialog opened: {d.message}"), d.dismiss()))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))

    page.goto(web + "/")
    assert page.url.startswith(web + "/login")
    page.fill("#token", OPERATOR_TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(web + "/")
    assert page.locator("#jobs td.name").first.inner_text() == HOSTILE_JOB  # shown as text, first: unhealthy

    ids = ledger.ids
    for name, path in [("jobs", "/"), ("job", f"/job?name={quote(HOSTILE_JOB)}"), ("run", f"/runs/{ids['dead']}"),
                       ("gaps", "/gaps"), ("backfills", "/backfills"), ("backfill", f"/backfills/{ids['plan']}"),
                       ("verified", f"/backfills/{ids['verified']}"),
                       ("alerts", "/alerts"), ("requests", "/requests")]:
        response = page.goto(web + path)
        assert response is not None and response.status == 200, path
        page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
        # hostile strings stayed text: no element was made of them
        assert page.locator("img").count() == 0 and page.locator("iframe").count() == 0, path
        assert page.locator("script").count() == 1, path  # the console's own file, none other
        assert page.locator(f"script[src='{CONSOLE_JS}']").count() == 1, path
    # the verification kinds: a table, a row each, the hostile detail shown as text
    page.goto(web + f"/backfills/{ids['verified']}")
    assert page.locator("#verification tbody tr").count() == 2
    failed = page.locator("#verification tr.fail")
    assert failed.locator("td.kind").inner_text() == "checksum"
    assert failed.locator("td.err").inner_text() == HOSTILE_ERROR
    assert failed.locator("td.pk").first.inner_text() == HOSTILE_REASON
    job_page = page.goto(web + f"/job?name={quote(HOSTILE_JOB)}")
    assert job_page is not None
    assert page.inner_text("#job-name") == HOSTILE_JOB
    assert page.locator("#grid td.cell.s-dead").count() >= 1 and page.locator("#grid td.cell.s-missing").count() >= 1

    # a rerun: the run page, its impact, a reason, the audit row
    page.goto(web + f"/runs/{ids['dead']}")
    assert page.inner_text("#partition") == HOSTILE_PART
    page.click("#rerun")
    page.wait_for_selector("#impact")
    assert "1 attempt(s) so far" in page.inner_text("#impact")
    assert "no effect recorded" in page.inner_text("#impact-effects")
    page.screenshot(path=str(tmp_path / "rerun-impact.png"), full_page=True)
    page.click("#confirm-button")  # no reason: the browser refuses to submit (required)
    assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]
    page.fill("#reason", "upstream fixed <b>now</b>")
    page.click("#confirm-button")
    page.wait_for_selector("#done-message")
    page.screenshot(path=str(tmp_path / "rerun-done.png"), full_page=True)
    assert "web:operator" in page.inner_text("#done-message")

    row = requests_rows(ledger.admin)[-1]
    assert (row["action"], row["job_name"], row["who"], row["reason"]) == (
        "rerun", HOSTILE_JOB, "web:operator", "upstream fixed <b>now</b>")
    assert row["touched"]["runs"][0]["run_id"] == ids["dead"]
    assert scalar(ledger.admin, "SELECT status FROM runner.job_runs WHERE id = %s", (ids["dead"],)) == "pending"
    page.goto(web + "/requests")
    assert "upstream fixed <b>now</b>" in page.inner_text("#requests")
    assert not [p for p in problems if "favicon" not in p], problems


def test_a_viewer_sees_no_action_in_the_browser(ledger: Ledger, web: str, browser: Any, tmp_path: Path) -> None:
    page = browser.new_page()
    page.goto(web + "/login")
    page.fill("#token", VIEWER_TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(web + "/")
    page.goto(web + f"/runs/{ledger.ids['dead']}")
    assert page.locator("#rerun").count() == 0
    response = page.goto(web + f"/actions/rerun?job={quote(HOSTILE_JOB)}&slot={quote(ledger.ids['dead_slot'].isoformat())}")
    assert response is not None and response.status == 403
    page.screenshot(path=str(tmp_path / "viewer-refused.png"))
    assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]


def _login(page: Any, web: str, token: str = OPERATOR_TOKEN) -> list[str]:
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("dialog", lambda d: (problems.append(f"a dialog opened: {d.message}"), d.dismiss()))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(web + "/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(web + "/")
    return problems


def _no_markup_made(page: Any) -> None:
    assert page.locator("img").count() == 0 and page.locator("iframe").count() == 0
    assert page.locator("script").count() == 1 and page.locator(f"script[src='{CONSOLE_JS}']").count() == 1


def test_retire_and_unretire_from_the_job_page(ledger: Ledger, web: str, browser: Any, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    problems = _login(page, web)
    page.goto(web + f"/job?name={quote(HOSTILE_JOB)}")
    page.click("#retire")
    page.wait_for_selector("#impact")
    assert "will retire it" in page.inner_text("#impact-retire")
    assert HOSTILE_JOB in page.inner_text("#impact")
    _no_markup_made(page)
    page.screenshot(path=str(tmp_path / "retire-impact.png"), full_page=True)
    page.click("#confirm-button")  # no reason: the browser refuses to submit (required)
    assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]
    page.fill("#reason", HOSTILE_REASON)
    page.click("#confirm-button")
    page.wait_for_selector("#done-message")
    assert "web:operator" in page.inner_text("#done-message")
    _no_markup_made(page)
    page.goto(web + f"/job?name={quote(HOSTILE_JOB)}")
    assert page.inner_text("#retired") == "retired" and page.locator("#retire").count() == 0
    page.click("#unretire")
    page.wait_for_selector("#impact")
    assert "will unretire it" in page.inner_text("#impact-retire")
    page.fill("#reason", "back in the code")
    page.click("#confirm-button")
    page.wait_for_selector("#done-message")
    rows = requests_rows(ledger.admin)
    assert [(r["action"], r["job_name"], r["who"], r["reason"]) for r in rows[1:]] == [
        ("retire", HOSTILE_JOB, "web:operator", HOSTILE_REASON),
        ("unretire", HOSTILE_JOB, "web:operator", "back in the code")]
    assert not [p for p in problems if "favicon" not in p], problems


def test_a_lane_and_a_prune_from_the_jobs_page(ledger: Ledger, web: str, browser: Any, tmp_path: Path) -> None:
    from tests.web.test_registry_actions import _prunable

    due = _prunable(ledger)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    problems = _login(page, web)
    # a lane: the form on the jobs page, its impact, a reason
    page.fill("#lane-form input[name=lane]", "etl")
    page.fill("#lane-form input[name=rank]", "7")
    page.fill("#lane-form input[name=concurrency]", "3")
    page.fill("#lane-form input[name=description]", HOSTILE_ERROR)
    page.click("#lane-form button[type=submit]")
    page.wait_for_selector("#impact")
    assert page.inner_text("#impact-lane") == "etl" and "a new lane" in page.inner_text("#impact")
    assert HOSTILE_ERROR in page.inner_text("#impact-changes")
    _no_markup_made(page)
    page.screenshot(path=str(tmp_path / "lane-impact.png"), full_page=True)
    page.fill("#reason", "a lane for the etl jobs")
    page.click("#confirm-button")
    page.wait_for_selector("#done-message")
    assert scalar(ledger.admin, "SELECT concurrency FROM runner.lanes WHERE lane = 'etl'") == 3
    # prune: the dry run first, then one prune
    page.goto(web + "/")
    page.click("#prune-form button[type=submit]")
    page.wait_for_selector("#impact")
    assert f"would prune {due} run(s)" in page.inner_text("#impact-prune")
    page.screenshot(path=str(tmp_path / "prune-impact.png"), full_page=True)
    assert scalar(ledger.admin, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'old-reports'") > due
    page.fill("#reason", "the disk is filling")
    page.click("#confirm-button")
    page.wait_for_selector("#done-message")
    assert f"Pruned {due} run(s)" in page.inner_text("#done-message")
    page.goto(web + "/actions/prune")
    assert page.locator("#refusal").count() == 1 and page.locator("#confirm").count() == 0
    # the seeded pause and the prunable job's rerun, then the lane; prune is not audited
    assert [(r["action"], r["who"]) for r in requests_rows(ledger.admin)][2:] == [("lane_set", "web:operator")]
    assert not [p for p in problems if "favicon" not in p], problems


def test_a_viewer_sees_no_new_action_in_the_browser(ledger: Ledger, web: str, browser: Any) -> None:
    page = browser.new_page()
    _login(page, web, VIEWER_TOKEN)
    assert page.locator("#lane-form").count() == 0 and page.locator("#prune-form").count() == 0
    page.goto(web + f"/job?name={quote(HOSTILE_JOB)}")
    assert page.locator("#retire").count() == 0
    for path in (f"/actions/retire?job={quote(HOSTILE_JOB)}", "/actions/lane_set?lane=etl", "/actions/prune"):
        response = page.goto(web + path)
        assert response is not None and response.status == 403, path
    assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]
