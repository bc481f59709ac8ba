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

import psycopg
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


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One Chromium for the module's tests (a launch is about a second); each test's pages
    live in browser contexts of their own (``browser``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def browser(chromium: Any) -> Iterator[Any]:
    """The module's Chromium. A test opens its pages with ``new_page`` or ``new_context``
    (each a new browser context: no cookie, storage or cache of another test's); every
    context is closed after the test."""
    assert not chromium.contexts, "a context left open by an earlier test"
    try:
        yield chromium
    finally:
        for context in chromium.contexts:
            context.close()


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


# -- issue 30: the Runs page, the job's definition, times, live refresh, phones, dark mode, bulk rerun


def _seed_bulk(ledger: Ledger) -> list[tuple[Any, int]]:
    from tests.web.test_pages import seed_many

    return seed_many(ledger.admin)


def test_the_runs_page_and_the_jobs_search_in_a_real_browser(ledger: Ledger, web: str, browser: Any,
                                                             tmp_path: Path) -> None:
    from tests.web.test_pages import BULK_JOB

    every = _seed_bulk(ledger)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    problems = _login(page, web)
    page.fill("#search", "bulk")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#search-count")
    assert page.locator("#jobs td.name").all_inner_texts() == [BULK_JOB]
    page.goto(web + "/runs")
    assert page.locator("#runs tbody tr").count() == 100
    _no_markup_made(page)
    # filters from the form: the job and dead runs
    page.fill("#runs-form input[name=job]", BULK_JOB)
    page.select_option("#runs-form select[name=status]", "dead")
    page.click("#runs-form button[type=submit]")
    page.wait_for_url("**/runs?*status=dead*")
    dead = [i for _, i in every if scalar(ledger.admin, "SELECT status FROM runner.job_runs WHERE id = %s",
                                          (i,)) == "dead"]
    shown = [int(t) for t in page.locator("#runs tbody tr td:first-child a").all_inner_texts()]
    assert shown == dead
    page.screenshot(path=str(tmp_path / "runs-dead.png"), full_page=True)
    # a hostile partition as a filter: text, found, nothing made of it
    page.goto(web + f"/runs?partition={quote(HOSTILE_PART)}")
    assert set(page.locator("#runs td.pk").all_inner_texts()) == {HOSTILE_PART}
    _no_markup_made(page)
    # paging: older, then older, every run once
    page.goto(web + f"/runs?job={quote(BULK_JOB)}")
    ids: list[int] = []
    while True:
        ids += [int(t) for t in page.locator("#runs tbody tr td:first-child a").all_inner_texts()]
        if page.locator("#older").count() == 0:
            break
        page.click("#older")
        page.wait_for_load_state()
    assert ids == [i for _, i in every]
    # a bad filter: a clear 400, one line
    response = page.goto(web + "/runs?status=%3Cb%3Ebogus")
    assert response is not None and response.status == 400
    assert page.inner_text("#error-message").startswith("status must be one of")
    _no_markup_made(page)
    assert not [p for p in problems if "favicon" not in p and "400" not in p], problems


def test_times_in_the_viewers_the_jobs_zone_or_utc(ledger: Ledger, web: str, browser: Any) -> None:
    from tests.web.test_pages import BULK_JOB

    _seed_bulk(ledger)
    context = browser.new_context(viewport={"width": 1400, "height": 900}, timezone_id="America/New_York")
    page = context.new_page()
    problems = _login(page, web)
    page.goto(web + f"/job?name={quote(BULK_JOB)}")
    assert page.inner_text("#def-zone") == "Asia/Tokyo"
    utc_cell = page.locator("#next-slots tbody tr td").nth(0)
    tokyo_cell = page.locator("#next-slots tbody tr td").nth(1)
    assert utc_cell.inner_text().endswith("17:30:00 UTC+0")  # the UTC column stays UTC
    assert "02:30:00 UTC+9 Asia/Tokyo" in tokyo_cell.inner_text()  # the job's zone beside
    last_success = page.locator("#runs tbody tr td.t time").first
    iso = last_success.get_attribute("datetime")
    assert last_success.inner_text() == iso and iso.endswith("+00:00")  # UTC by default
    page.select_option("#tz", "job")
    assert "UTC+9 Asia/Tokyo" in last_success.inner_text()
    page.select_option("#tz", "viewer")
    assert "UTC-5" in last_success.inner_text()  # New York in December
    assert utc_cell.inner_text().endswith("17:30:00 UTC+0")
    # the choice is kept across pages; a page of no one job falls back to UTC for "job"
    page.goto(web + "/runs")
    assert "UTC-5" in page.locator("#runs tbody tr td.t time").first.inner_text()
    page.select_option("#tz", "utc")
    assert page.locator("#runs tbody tr td.t time").first.inner_text().endswith("+00:00")
    assert page.locator("#tz option[value=job]").is_disabled()
    assert not [p for p in problems if "favicon" not in p], problems
    context.close()


def test_pages_refresh_themselves_but_not_while_a_form_is_filled(ledger: Ledger, web: str, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    problems = _login(page, web)
    page.clock.install()
    page.goto(web + "/runs")
    first = page.locator("#runs tbody tr").count()
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        conn.execute("INSERT INTO runner.job_runs (job_name, schedule_slot, business_date, window_start, window_end,"
                     " status, trigger, idempotency_key) VALUES ('quiet', now(), now()::date, now(), now(),"
                     " 'pending', 'schedule', 'k')")
    page.clock.run_for(31_000)
    eventually(lambda: page.locator("#runs tbody tr").count() == first + 1, timeout=30, interval=0.2,
               message="the page refreshed itself")
    assert "updated" in page.inner_text("#live-state")
    # a form being filled: no refresh (the typed text stays)
    page.fill("#runs-form input[name=lane]", "typing")
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        conn.execute("INSERT INTO runner.job_runs (job_name, schedule_slot, business_date, window_start, window_end,"
                     " status, trigger, idempotency_key) VALUES ('quiet', now() - interval '1 second',"
                     " now()::date, now(), now(), 'pending', 'schedule', 'k')")
    page.clock.run_for(31_000)
    eventually(lambda: "paused: a form is being filled" in page.inner_text("#live-state"), timeout=30, interval=0.2)
    assert page.locator("#runs tbody tr").count() == first + 1
    assert page.input_value("#runs-form input[name=lane]") == "typing"
    # the toggle turns it off
    page.goto(web + "/runs")
    page.uncheck("#live")
    page.clock.run_for(31_000)
    assert page.locator("#runs tbody tr").count() == first + 2
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        conn.execute("DELETE FROM runner.job_runs WHERE job_name = 'quiet'")
    page.clock.run_for(31_000)
    page.wait_for_timeout(500)
    assert page.locator("#runs tbody tr").count() == first + 2  # not refreshed: off
    assert not [p for p in problems if "favicon" not in p], problems


# the elements that reach past the viewport's right edge, whose parent does not (what to fix)
WIDE_ELEMENTS = """Array.from(document.querySelectorAll('body *')).filter(e =>
  e.getBoundingClientRect().right > window.innerWidth + 1 &&
  (!e.parentElement || e.parentElement.getBoundingClientRect().right <= window.innerWidth + 1 ||
   (e.getBoundingClientRect().right > 392 && e.getBoundingClientRect().right < 1900)))
  .slice(0, 12).map(e => e.tagName + '.' + e.className + '#' + e.id + ' ' + Math.round(e.getBoundingClientRect().right))"""


def test_a_phone_and_dark_mode(ledger: Ledger, web: str, browser: Any, tmp_path: Path) -> None:
    from tests.web.test_pages import BULK_JOB

    _seed_bulk(ledger)
    context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark",
                                  device_scale_factor=1, is_mobile=True, has_touch=True)
    page = context.new_page()
    problems = _login(page, web)
    for path in ("/", f"/job?name={quote(BULK_JOB)}", "/runs", f"/runs/{ledger.ids['dead']}", "/gaps",
                 f"/backfills/{ledger.ids['plan']}", "/alerts", "/requests"):
        page.goto(web + path)
        # nothing wider than the phone but the boxes that scroll on their own
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, (path, width, page.evaluate(WIDE_ELEMENTS), page.evaluate(
            "Array.from(document.querySelectorAll('body, body > *, main > *, main > * > *, main > * > * > *')).map(e => e.tagName + '.' + "
            r"e.className + '#' + e.id + ' ' + e.scrollWidth + '/' + Math.round(e.getBoundingClientRect().right)).filter(t => / \d+\/(39[2-9]|[4-9]\d\d|\d{4})$/.test(t)).join('; ')"))
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(17, 22, 28)", (path, background)
        page.screenshot(path=str(tmp_path / f"phone-dark{path.replace('/', '_')[:40]}.png"), full_page=True)
    light = browser.new_page(viewport={"width": 390, "height": 844}, color_scheme="light")
    _login(light, web)
    assert light.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(246, 247, 249)"
    assert not [p for p in problems if "favicon" not in p], problems
    context.close()


def test_a_bulk_rerun_and_an_auto_paused_backfill_in_a_real_browser(ledger: Ledger, web: str, browser: Any,
                                                                     tmp_path: Path) -> None:
    from tests.web.test_pages import BULK_JOB

    every = _seed_bulk(ledger)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    problems = _login(page, web)
    page.goto(web + f"/job?name={quote(BULK_JOB)}")
    page.fill("#rerun-many-form input[name=from]", every[-1][0].isoformat())
    page.fill("#rerun-many-form input[name=to]", every[0][0].isoformat())  # the newest slot left out
    page.select_option("#rerun-many-form select[name=statuses]", "failed,dead")
    page.click("#rerun-many-form button[type=submit]")
    page.wait_for_selector("#impact")
    expected = scalar(ledger.admin, "SELECT count(*) FROM runner.job_runs WHERE job_name = %s AND status IN"
                      " ('failed', 'dead') AND schedule_slot >= %s AND schedule_slot < %s",
                      (BULK_JOB, every[-1][0], every[0][0]))
    assert page.inner_text("#impact-count") == str(expected) and expected > 20
    assert HOSTILE_ERROR in page.inner_text("#impact-runs")
    _no_markup_made(page)
    page.screenshot(path=str(tmp_path / "rerun-many-impact.png"), full_page=True)
    # a forged CSRF token in the form: refused, nothing written
    page.evaluate("document.querySelector('#confirm input[name=csrf_token]').value = 'forged-forged-forged'")
    page.fill("#reason", "all of them")
    page.click("#confirm-button")
    page.wait_for_selector("#error-message")
    assert "CSRF check failed" in page.inner_text("#error-message")
    assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]
    page.go_back()
    page.reload()
    page.wait_for_selector("#impact")
    page.click("#confirm-button")  # no reason: the browser refuses to submit (required)
    assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]
    page.fill("#reason", HOSTILE_REASON)
    page.click("#confirm-button")
    page.wait_for_selector("#done-message")
    assert "rerun_many by web:operator" in page.inner_text("#done-message")
    _no_markup_made(page)
    row = requests_rows(ledger.admin)[-1]
    assert (row["action"], row["job_name"], row["reason"], len(row["touched"]["runs"])) == (
        "rerun_many", BULK_JOB, HOSTILE_REASON, expected)
    page.goto(web + "/requests")
    assert f"{expected} run(s)" in page.locator("#requests summary.touched").first.inner_text()
    # an auto-paused backfill: its page offers the web actions, not a CLI command
    plan = ledger.ids["plan"]
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        conn.execute("UPDATE runner.backfills SET pause_reason = %s, max_failures = 0 WHERE id = %s",
                     ("1 failed or dead run(s), more than max_failures=0: look at them (runner backfill show), "
                      "then resume (with a higher --max-failures) or cancel", plan))
    page.goto(web + f"/backfills/{plan}")
    assert "runner backfill" not in page.inner_text("main")
    page.click("#resume-plan")
    page.wait_for_selector("#impact")
    page.fill("#confirm input[name=max_failures]", "5")
    page.fill("#reason", "failures looked at")
    page.click("#confirm-button")
    page.wait_for_selector("#done-message")
    assert scalar(ledger.admin, "SELECT status FROM runner.backfills WHERE id = %s", (plan,)) == "running"
    # (the forged form's 403 is the one failed load)
    assert [p for p in problems if "favicon" not in p] == [
        "Failed to load resource: the server responded with a status of 403 (Forbidden)"], problems
