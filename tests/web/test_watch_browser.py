"""The console's watch over time in Chromium (issue 30): the no-runner banner on every page,
the Runners page, and a failed attempt's traceback on the run page, all with hostile text
(a host name and a traceback made of markup) shown as text. Fixtures: tests/web/test_browser.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.web.conftest import HOSTILE_ERROR, HOSTILE_JOB, HOSTILE_PART, Ledger
from tests.web.test_browser import CHROMIUM, _login, _no_markup_made, browser, chromium, web  # noqa: F401

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no /usr/bin/chromium: `apt-get install -y chromium` to run the browser tests")

HOSTILE_HOST = '<img src=x onerror=alert("host")>'
TRACEBACK = ('Traceback (most recent call last):\n  File "job.py", line 3, in boom\n'
             f'ValueError: {HOSTILE_ERROR}<script>alert("tb")</script>\n')


def test_banner_runners_page_and_traceback(ledger: Ledger, web: str, browser: Any,  # noqa: F811
                                           tmp_path: Path) -> None:
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        conn.execute("UPDATE runner.attempts SET traceback = %s, last_heartbeat = %s WHERE run_id = %s",
                     (TRACEBACK, psycopg.types.json.Jsonb({"at": "2026-12-03T10:00:00+00:00", "processed": 7,
                                                           "failed": 2, "beats": 4}), ledger.ids["dead"]))
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    problems = _login(page, web)
    # no runner has ever registered: every page says so
    for path in ("/", "/alerts", f"/runs/{ledger.ids['dead']}", "/runners"):
        page.goto(web + path)
        assert "No runner is alive" in page.inner_text("#no-runner"), path
    assert "no runner has registered" in page.inner_text("#runners")
    page.goto(web + "/alerts")
    assert "no live runner since" in page.inner_text("main")

    # the run page: the traceback and the last heartbeat, as text
    page.goto(web + f"/runs/{ledger.ids['dead']}")
    assert page.inner_text("pre.traceback").strip() == TRACEBACK.strip()
    assert "processed 7" in page.inner_text("p.beat") and "4 beat(s)" in page.inner_text("p.beat")
    _no_markup_made(page)
    page.screenshot(path=str(tmp_path / "run-traceback.png"), full_page=True)

    # a live runner with a hostile host name, one run in flight under it: the banner goes
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        instance = conn.execute(
            "INSERT INTO runner.instances (instance_id, host, pid, backend_pid, lock_namespace, runner_version,"
            " jobs, lanes) VALUES (gen_random_uuid(), %s, 4242, pg_backend_pid(), 0, '9.9', %s, %s)"
            " RETURNING instance_id", (HOSTILE_HOST, [HOSTILE_JOB],
                                       psycopg.types.json.Jsonb({"realtime": 10, HOSTILE_PART: 2}))).fetchone()[0]
        conn.execute("UPDATE runner.attempts SET status = 'running', finished_at = NULL, owner_instance = %s"
                     " WHERE run_id = %s", (instance, ledger.ids["succeeded"]))
    page.goto(web + "/runners")
    assert page.locator("#no-runner").count() == 0
    row = page.locator("#runners tbody tr").first
    assert row.locator("td.host").inner_text() == HOSTILE_HOST
    assert row.locator("td.inflight").inner_text() == "1"
    assert HOSTILE_PART in row.locator("td.lanes").inner_text()
    assert "1 live runner(s)" in page.inner_text("#runners-live")
    _no_markup_made(page)
    page.screenshot(path=str(tmp_path / "runners.png"), full_page=True)
    assert not [p for p in problems if "favicon" not in p], problems
