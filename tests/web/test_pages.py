"""The console's pages of issue 30 over HTTP (Starlette's TestClient, a real ledger, the
console connected as a LOGIN in the operator role): the Runs page (filters, keyset paging,
bad filters refused with a clear 400), the job's definition and next slots from the ledger,
the grid paged back beyond 7 days, the Jobs page's search, the Requests page counting the
runs a backfill inserted, the auto-paused backfill page's web actions, and the bulk rerun
(impact, one audited request, CSRF, a selection that changed, viewers, the CLI's face)."""

from __future__ import annotations

import html as htmllib
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import psycopg
from psycopg.types.json import Jsonb

from runner.web import auth
from tests.support import run_cli, scalar
from tests.web.conftest import (
    HOSTILE_ERROR,
    HOSTILE_JOB,
    HOSTILE_PART,
    HOSTILES,
    Ledger,
    requests_rows,
    without_console_script,
)
from tests.web.test_api import OP, VIEW, console, login

BULK_JOB = "bulk <i>job</i>"


def escaped(html: str) -> None:
    for hostile in HOSTILES:
        assert hostile not in html, hostile
    assert "<script" not in without_console_script(html).lower() and "<img" not in html and "<iframe" not in html


def seed_many(url: str, runs: int = 230) -> list[tuple[datetime, int]]:
    """A job with ``runs`` hourly runs going back past 7 days (every 7th dead, every 11th
    failed, a hostile partition on every 5th), and its definition as a runner syncs it. Returns
    the (slot, id) of every run, newest first: the Runs page's order."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO runner.jobs (job_name, schedule_kind, cron, timezone, track_from, max_attempts, options)"
            " VALUES (%s, 'cron', '30 2 * * *', 'Asia/Tokyo', now() - interval '30 days', 4, %s)",
            (BULK_JOB, Jsonb({"owner": "team-bulk", "misfire": "tiers", "overlap": "skip", "lane": "etl_lane",
                              "timeout_seconds": 90.0, "stale_after_seconds": 7200.0, "grace_seconds": 60.0,
                              "max_catch_up": 10,
                              "misfire_tiers": {"tiers": [{"within_seconds": 3600, "action": "run"}]}})))
        rows = conn.execute(
            "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date, window_start,"
            " window_end, status, trigger, attempt, fence, idempotency_key, started_at, finished_at, last_error, lane)"
            " SELECT %(job)s, s, CASE WHEN n %% 5 = 0 THEN %(part)s ELSE 'p' END, s::date, s, s,"
            "  CASE WHEN n %% 7 = 0 THEN 'dead' WHEN n %% 11 = 0 THEN 'failed' ELSE 'succeeded' END,"
            "  CASE WHEN n %% 13 = 0 THEN 'backfill' ELSE 'schedule' END, 2, 2, 'k', s, s + interval '1 second',"
            "  CASE WHEN n %% 7 = 0 OR n %% 11 = 0 THEN %(err)s END, CASE WHEN n %% 3 = 0 THEN 'bulk' ELSE 'realtime' END"
            " FROM generate_series(1, %(runs)s) n,"
            "  LATERAL (SELECT date_trunc('hour', now(), 'UTC') - make_interval(hours => n) AS s) t"
            " RETURNING schedule_slot, id",
            {"job": BULK_JOB, "part": HOSTILE_PART, "err": HOSTILE_ERROR, "runs": runs}).fetchall()
    return sorted(((r[0], r[1]) for r in rows), reverse=True)


def run_ids(html: str) -> list[int]:
    body = html[html.index('id="runs"'):]
    return [int(i) for i in re.findall(r'<a href="/runs/(\d+)">', body)]


def test_the_runs_page_filters_and_pages_by_keyset(ledger: Ledger) -> None:
    every = seed_many(ledger.admin)
    with console(ledger.operator) as client:
        login(client)
        # the job's runs, 50 a page: the pages together are every run, once, in order
        seen: list[int] = []
        path = f"/runs?job={quote(BULK_JOB)}&limit=50"
        pages = 0
        while path:
            r = client.get(path)
            assert r.status_code == 200, r.text
            escaped(r.text)
            seen += run_ids(r.text)
            pages += 1
            older = re.search(r'id="older" href="([^"]+)"', r.text)
            path = older.group(1).replace("&amp;", "&") if older else ""
        assert seen == [i for _, i in every] and pages == 5
        # filters: status (repeatable), trigger, lane, partition, slot range
        dead = client.get(f"/runs?job={quote(BULK_JOB)}&status=dead&limit=1000").text
        assert run_ids(dead) and all(scalar(ledger.admin, "SELECT status FROM runner.job_runs WHERE id = %s",
                                            (i,)) == "dead" for i in run_ids(dead))
        both = run_ids(client.get(f"/runs?job={quote(BULK_JOB)}&status=dead&status=failed&limit=1000").text)
        assert len(both) == scalar(ledger.admin, "SELECT count(*) FROM runner.job_runs WHERE job_name = %s"
                                   " AND status IN ('dead', 'failed')", (BULK_JOB,))
        got = run_ids(client.get(f"/runs?trigger=backfill&lane=bulk&partition={quote(HOSTILE_PART)}&limit=1000").text)
        assert got == [i for _, i in every if scalar(
            ledger.admin, "SELECT trigger = 'backfill' AND lane = 'bulk' AND partition_key = %s FROM runner.job_runs"
            " WHERE id = %s", (HOSTILE_PART, i))]
        assert got  # the seed has some: n divisible by 5, 13 and 3
        since, until = every[20][0], every[10][0]
        ranged = run_ids(client.get("/runs?" + "&".join([
            f"job={quote(BULK_JOB)}", f"since={quote(since.isoformat())}", f"until={quote(until.isoformat())}"])).text)
        assert ranged == [i for s, i in every if since <= s < until] and len(ranged) == 10
        # every job's runs: the seeded job's among them, newest slot first
        api = client.get("/api/runs?limit=1000", headers=OP).json()
        slots = [(r["schedule_slot"], r["id"]) for r in api["runs"]]
        assert slots == sorted(slots, reverse=True) and len(slots) == len(every) + 3
        assert api["next"] is None
        assert client.get(f"/api/runs?job={quote(HOSTILE_JOB)}", headers=VIEW).json()["runs"][0]["job_name"] == HOSTILE_JOB


def test_a_filter_no_index_serves_looks_at_a_bounded_stretch_a_page(ledger: Ledger) -> None:
    every = seed_many(ledger.admin)
    from runner.web import reads

    matching = [i for _, i in every if scalar(
        ledger.admin, "SELECT trigger = 'backfill' FROM runner.job_runs WHERE id = %s", (i,))]
    with psycopg.connect(ledger.operator, autocommit=True) as conn:
        filters = reads.RunFilters(trigger="backfill")
        # each page looks at 25 runs at most: some pages are short, none skips a match
        seen: list[int] = []
        after = None
        short = 0
        for _ in range(100):
            page = reads.runs(conn, filters, after, limit=5, scan=25)
            seen += [r["id"] for r in page["runs"]]
            short += page["looked_back_to"] is not None
            if page["next"] is None:
                break
            after = reads.parse_cursor(page["next"])
        assert seen == matching and short > 0
        # without such a filter, no bound: a full page whatever is looked at
        assert len(reads.runs(conn, reads.RunFilters(job=BULK_JOB), None, limit=50, scan=25)["runs"]) == 50


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", ()):
        found += _plan_nodes(child)
    return found


def test_every_runs_page_statement_reads_an_index_and_a_bounded_stretch(ledger: Ledger) -> None:
    """With sequential scans priced out, each statement of the Runs page reads job_runs by an
    index (schema step 0010_runs or the business key): none is planned to read the ledger
    whole. Where a filter no index serves is asked, the index read sits under the scan bound
    (a Limit of RUNS_SCAN) and the filter above it."""
    from runner.web import reads

    seed_many(ledger.admin, runs=50)
    slot, run_id = datetime.now(UTC) - timedelta(days=3), 10**6
    cases = {
        "all": (reads.RunFilters(), "job_runs_slot_order", False),
        "job": (reads.RunFilters(job=BULK_JOB), "job_runs_business_key", False),
        "job and partition": (reads.RunFilters(job=BULK_JOB, partition="p"), "job_runs_business_key", False),
        # (or another partial index of only such runs: as small)
        "dead": (reads.RunFilters(statuses=("dead",)), "job_runs_attention_order job_runs_dead job_runs_unaccounted",
                 False),
        "failed or awaiting": (reads.RunFilters(statuses=("failed", "awaiting_approval")),
                               "job_runs_attention_order job_runs_unaccounted", False),
        "slot range": (reads.RunFilters(since=slot - timedelta(days=1), until=slot), "job_runs_slot_order", False),
        "skipped": (reads.RunFilters(statuses=("skipped",)), "job_runs_slot_order", True),
        "trigger": (reads.RunFilters(trigger="manual"), "job_runs_slot_order", True),
        "lane": (reads.RunFilters(lane="bulk"), "job_runs_slot_order", True),
        "partition of any job": (reads.RunFilters(partition=HOSTILE_PART), "job_runs_slot_order", True),
    }
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")  # priced out, as on a large ledger
        conn.execute("SET enable_bitmapscan = off")  # (an unordered read then a sort: not at 30M)
        for name, (filters, index, bounded) in cases.items():
            for after in (None, (slot, run_id)):
                statement, looked, params = reads.runs_statements(filters, after, 100)
                assert (looked is not None) == bounded, name
                for one in (statement, looked) if looked is not None else (statement,):
                    text = one.as_string(conn)
                    row = conn.execute(b"EXPLAIN (FORMAT JSON) " + text.encode(), params).fetchone()
                    assert row is not None
                    plan = row[0][0]["Plan"]
                    scans = [n for n in _plan_nodes(plan) if n.get("Relation Name") == "job_runs"]
                    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), (name, plan)
                    if after is None or name != "job":  # (a job's cursor may also take the slot index)
                        used = {n.get("Index Name") for n in _plan_nodes(plan)}
                        assert used & set(index.split()), (name, index, plan)
                    if bounded:  # the index read is under the bound: a Limit of the scan's size
                        limits = [n for n in _plan_nodes(plan) if n["Node Type"] == "Limit"]
                        assert any(any(c.get("Relation Name") == "job_runs" for c in _plan_nodes(n)) and
                                   n.get("Plan Rows", 0) <= reads.RUNS_SCAN for n in limits), (name, plan)


def test_bad_run_filters_are_a_clear_400(ledger: Ledger) -> None:
    with console(ledger.operator) as client:
        login(client)
        for query, message in [
            ("status=bogus", "status must be one of"),
            (f"status={quote(HOSTILE_JOB)}", "status must be one of"),
            ("trigger=<b>x</b>", "trigger must be one of"),
            ("since=yesterday", "since must be an ISO 8601 time"),
            ("until=2026-01-01T00:00:00", "until needs a UTC offset"),
            ("since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "since must be before until"),
            ("after=1;DROP TABLE runner.job_runs", "after must be a cursor"),
            ("after=2026-01-01T00:00:00+00:00~x", "after must be a cursor"),
            ("limit=0", "limit must be between 1 and 1000"),
            ("limit=ten", "limit must be an integer"),
            ("job=" + "j" * 201, "job is longer than 200 characters"),
        ]:
            r = client.get("/runs?" + query)
            assert r.status_code == 400, (query, r.status_code)
            assert message in r.text, (query, r.text[-800:])
            escaped(r.text)
            api = client.get("/api/runs?" + query, headers=OP)
            assert api.status_code == 400 and message in api.json()["error"], query
            assert "\n" not in api.json()["error"]
        assert scalar(ledger.admin, "SELECT count(*) FROM runner.job_runs") == 3


def test_the_job_page_shows_its_definition_next_slots_and_older_history(ledger: Ledger) -> None:
    every = seed_many(ledger.admin)
    with console(ledger.operator) as client:
        login(client)
        html = client.get(f"/job?name={quote(BULK_JOB)}").text
        escaped(html)
        definition = html[html.index('id="definition"'):]
        for shown in ("Asia/Tokyo", "tiers", "skip", "etl_lane", "team-bulk", "1m 30s", "2h", ">4<",
                      "within_seconds"):
            assert shown in definition, shown
        assert 'data-zone="Asia/Tokyo"' in html  # the job's zone for the times toggle
        # so are the pages of one of its runs, and of a plan of it
        assert '<main data-live="30" data-zone="Asia/Tokyo">' in client.get(f"/runs/{every[0][1]}").text
        assert '<main data-live="30" data-zone="UTC">' in client.get(f"/backfills/{ledger.ids['plan']}").text
        # the next slots: 02:30 in Tokyo is 17:30 UTC, shown in both
        data = client.get(f"/api/job?name={quote(BULK_JOB)}", headers=OP).json()
        slots = [datetime.fromisoformat(s) for s in data["definition"]["next_slots"]]
        assert len(slots) == 5 and all(s.astimezone(UTC).strftime("%H:%M") == "17:30" for s in slots)
        assert slots == sorted(slots) and slots[0] > datetime.now(UTC) and slots[1] - slots[0] == timedelta(days=1)
        table = html[html.index('id="next-slots"'):]
        assert 'data-zone="UTC"' in table and 'data-zone="Asia/Tokyo"' in table
        # the grid pages back: the last 7 days, then the 7 before (runs 169..230 hours old)
        assert data["window"]["latest"] is True
        older = re.search(r'id="grid-older" href="([^"]+)"', html)
        assert older is not None
        back = client.get(older.group(1).replace("&amp;", "&"))
        assert back.status_code == 200 and 'id="grid-newer"' in back.text
        old_ids = {int(i) for i in re.findall(r'<a href="/runs/(\d+)">&nbsp;</a>',
                                              back.text[back.text.index('id="grid"'):])}
        until = datetime.fromisoformat(re.search(r"until=([^&\"]+)", older.group(1).replace("&amp;", "&"))
                                       .group(1).replace("%3A", ":").replace("%2B", "+"))
        expected = {i for s, i in every if until - timedelta(days=7) <= s <= until}
        assert old_ids == expected and old_ids and max(s for s, _ in every if _ in old_ids) < every[160][0]
        # a job synced by an older runner (no overlap or lane recorded) says so
        html = client.get(f"/job?name={quote(HOSTILE_JOB)}").text
        assert "not recorded (synced by an older runner)" in html
        assert client.get(f"/job?name={quote(BULK_JOB)}&until=nope").status_code == 400


def test_the_jobs_page_searches_names_and_owners(ledger: Ledger) -> None:
    seed_many(ledger.admin, runs=3)
    with console(ledger.operator) as client:
        login(client)
        html = client.get("/?search=BULK").text
        names = re.findall(r'<td class="name"><a href="/job\?name=[^"]+">([^<]*)</a>', html)
        assert names == ["bulk &lt;i&gt;job&lt;/i&gt;"] and "1 of 3 job(s)" in html
        assert re.findall(r'<td class="name"><a href', client.get("/?search=team-bulk").text).__len__() == 1
        hostile = client.get("/?search=" + quote(HOSTILE_JOB))
        escaped(hostile.text)
        assert "1 of 3 job(s)" in hostile.text  # the hostile job, found by its name as text
        assert "0 of 3 job(s)" in client.get("/?search=%25").text  # no pattern: % is a character
        assert client.get("/?search=" + "x" * 201).status_code == 400


def test_the_requests_page_counts_the_runs_a_backfill_inserted(ledger: Ledger) -> None:
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        conn.execute("INSERT INTO runner.requests (action, job_name, who, reason, touched) VALUES"
                     " ('backfill', %s, 'ops', 'fill', %s)",
                     (HOSTILE_JOB, Jsonb({"backfill": {"id": 1}, "runs_inserted": 14,
                                          "runs_requeued": [{"run_id": 1}, {"run_id": 2}]})))
    with console(ledger.operator) as client:
        login(client)
        html = client.get("/requests").text
        counts = re.findall(r'<summary class="touched">(\d+) run\(s\)</summary>', html)
        assert counts == ["16", "1"]  # newest first: the backfill's 14 inserted + 2 requeued; the pause's 1


def test_an_auto_paused_backfill_offers_the_web_actions(ledger: Ledger) -> None:
    plan = ledger.ids["plan"]
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        conn.execute("UPDATE runner.backfills SET pause_reason = %s, max_failures = 0 WHERE id = %s",
                     ("1 failed or dead run(s), more than max_failures=0: look at them (runner backfill show), "
                      "then resume (with a higher --max-failures) or cancel", plan))
        group = conn.execute("SELECT replay_group_id FROM runner.backfills WHERE id = %s", (plan,)).fetchone()
        assert group is not None
        conn.execute("UPDATE runner.job_runs SET replay_group_id = %s, trigger = 'backfill' WHERE id = %s",
                     (group[0], ledger.ids["dead"]))
    with console(ledger.operator) as client:
        login(client)
        html = client.get(f"/backfills/{plan}").text
        escaped(html)
        section = html[html.index('id="auto-paused"'):]
        assert "runner backfill" not in html and "--max-failures" not in html
        assert "more than max_failures=0" in html and "1 run(s) of it failed or are dead" in section
        assert f'href="/actions/backfill_resume?plan_id={plan}"' in section
        assert f'href="/actions/rerun_many?plan_id={plan}&amp;statuses=failed%2Cdead"' in section
        # a pause by an operator is shown as it was recorded, with no such section
        with psycopg.connect(ledger.admin, autocommit=True) as conn:
            conn.execute("UPDATE runner.backfills SET pause_reason = 'paused by ops: db maintenance' WHERE id = %s",
                         (plan,))
        html = client.get(f"/backfills/{plan}").text
        assert 'id="auto-paused"' not in html and "paused by ops: db maintenance" in html


def _impact(client: Any, query: str) -> tuple[str, dict[str, str]]:
    r = client.get("/actions/rerun_many?" + query)
    assert r.status_code == 200, r.text
    fields = {k: htmllib.unescape(v) for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">',
                                                         r.text)}
    return r.text, fields


def test_a_bulk_rerun_is_one_audited_request(ledger: Ledger) -> None:
    every = seed_many(ledger.admin)
    first, last = every[-1][0], every[0][0] + timedelta(hours=1)
    dead = [i for s, i in every if scalar(ledger.admin, "SELECT status FROM runner.job_runs WHERE id = %s",
                                          (i,)) == "dead"]
    query = "&".join([f"job={quote(BULK_JOB)}", f"from={quote(first.isoformat())}", f"to={quote(last.isoformat())}",
                      "statuses=dead"])
    with console(ledger.operator) as client:
        login(client)
        page, fields = _impact(client, query)
        escaped(page)
        assert f'<span id="impact-count">{len(dead)}</span>' in page
        assert sorted(int(i) for i in fields["seen_runs"].split(",")) == sorted(dead)
        # no CSRF token: refused, nothing written
        post = {k: v for k, v in fields.items() if k != auth.CSRF_FIELD}
        r = client.post("/actions/rerun_many", data={**post, "reason": "all of them"})
        assert r.status_code == 403 and "CSRF" in r.text
        # a forged token (another value than the cookie's): refused too
        r = client.post("/actions/rerun_many", data={**post, auth.CSRF_FIELD: "forged" * 8, "reason": "x"})
        assert r.status_code == 403
        # from another site (its Origin): refused
        r = client.post("/actions/rerun_many", data={**post, auth.CSRF_FIELD: fields[auth.CSRF_FIELD],
                                                     "reason": "x"}, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403
        assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]
        # a run of the selection changed since it was shown: the whole request is refused
        with psycopg.connect(ledger.admin, autocommit=True) as conn:
            conn.execute("UPDATE runner.job_runs SET status = 'dead' WHERE id = %s", (every[1][1],))
        r = client.post("/actions/rerun_many", data={**post, auth.CSRF_FIELD: fields[auth.CSRF_FIELD],
                                                     "reason": "x"})
        assert r.status_code == 400 and "the selection changed since it was shown" in r.text, re.findall(r"error-message\">([^<]*)", r.text)
        assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]
        assert scalar(ledger.admin, "SELECT count(*) FROM runner.job_runs WHERE status = 'pending'") == 0
        # shown again, then confirmed with a reason: one request, every run pending
        dead.append(every[1][1])
        page, fields = _impact(client, query)
        r = client.post("/actions/rerun_many", data={**fields,
                                                     "reason": "upstream <b>fixed</b>"})
        assert r.status_code == 200 and "web:operator" in r.text, r.text[-800:]
        rows = requests_rows(ledger.admin)
        assert [r["action"] for r in rows] == ["pause", "rerun_many"]
        req = rows[-1]
        assert (req["job_name"], req["who"], req["reason"]) == (BULK_JOB, "web:operator", "upstream <b>fixed</b>")
        assert sorted(r["run_id"] for r in req["touched"]["runs"]) == sorted(dead)
        assert {r["before"]["status"] for r in req["touched"]["runs"]} == {"dead"}
        assert req["touched"]["selection"]["statuses"] == ["dead"]
        assert scalar(ledger.admin, "SELECT count(*) FROM runner.job_runs WHERE status = 'pending'"
                      " AND trigger = 'manual' AND lane = 'correction' AND uncounted_attempts = attempt"
                      " AND id = ANY(%s)", (dead,)) == len(dead)
        # again: nothing left to rerun, refused at the impact
        page, _ = _impact(client, query)
        assert 'id="refusal"' in page and "no dead run in that selection" in page
        # the requests page counts them
        assert f'<summary class="touched">{len(dead)} run(s)</summary>' in client.get("/requests").text


def test_a_bulk_rerun_of_a_backfill_and_its_refusals(ledger: Ledger) -> None:
    every = seed_many(ledger.admin, runs=30)
    plan = ledger.ids["plan"]
    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        conn.execute("UPDATE runner.backfills SET job_name = %s WHERE id = %s", (BULK_JOB, plan))
        conn.execute("UPDATE runner.job_runs r SET replay_group_id = b.replay_group_id FROM runner.backfills b"
                     " WHERE b.id = %s AND r.id = ANY(%s)", (plan, [i for _, i in every[:15]]))
    in_plan = [i for _, i in every[:15] if scalar(
        ledger.admin, "SELECT status IN ('failed', 'dead') FROM runner.job_runs WHERE id = %s", (i,))]
    with console(ledger.operator) as client:
        # the API: a dry run writes nothing; then the request
        body = {"plan_id": plan, "statuses": ["failed", "dead"], "reason": "plan failures"}
        r = client.post("/api/actions/rerun_many", json={**body, "dry_run": True}, headers=OP)
        assert r.status_code == 200 and sorted(x["id"] for x in r.json()["impact"]["runs"]) == sorted(in_plan)
        assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]
        r = client.post("/api/actions/rerun_many", json={**body, "statuses": ["succeeded"]}, headers=OP)
        assert r.status_code == 400 and r.json()["error"] == "statuses must be failed and/or dead, got 'succeeded'"
        r = client.post("/api/actions/rerun_many", json={"job": BULK_JOB, "reason": "x"}, headers=OP)
        assert r.status_code == 400 and "give a range of slots" in r.json()["error"]
        r = client.post("/api/actions/rerun_many", json={**body, "job": HOSTILE_JOB}, headers=OP)
        assert r.status_code == 400 and "is of job" in r.json()["error"]
        r = client.post("/api/actions/rerun_many", json=body, headers=VIEW)
        assert r.status_code == 403
        assert [r["action"] for r in requests_rows(ledger.admin)] == ["pause"]
        r = client.post("/api/actions/rerun_many", json=body, headers=OP)
        assert r.status_code == 200, r.text
        assert sorted(x["id"] for x in r.json()["runs"]) == sorted(in_plan)
        req = requests_rows(ledger.admin)[-1]
        assert req["action"] == "rerun_many" and req["touched"]["selection"]["plan_id"] == plan
    # the database function itself refuses a run shown otherwise than it is, and a run of another job
    with psycopg.connect(ledger.operator, autocommit=True) as conn:
        other = ledger.ids["dead"]
        fence = scalar(ledger.admin, "SELECT fence FROM runner.job_runs WHERE id = %s", (other,))
        for args, message in [
            ((BULK_JOB, [other], ["dead"], [fence]), "is not a run of job"),
            ((HOSTILE_JOB, [other], ["dead"], [fence + 1]), "changed since it was shown"),
            ((HOSTILE_JOB, [ledger.ids["succeeded"]], ["succeeded"], [1]), "only failed or dead runs"),
        ]:
            try:
                conn.execute("SELECT * FROM runner.rerun_runs_v1(%s, %s, %s, %s, '{}', 'me', 'why')", args)
            except psycopg.errors.RaiseException as exc:
                assert message in str(exc), (message, str(exc))
            else:
                raise AssertionError(f"not refused: {message}")
        # the operator role cannot write the runs itself
        try:
            conn.execute("UPDATE runner.job_runs SET status = 'pending' WHERE id = %s", (other,))
        except psycopg.errors.InsufficientPrivilege:
            pass
        else:
            raise AssertionError("the operator role updated a run directly")
    assert scalar(ledger.admin, "SELECT status FROM runner.job_runs WHERE id = %s", (ledger.ids["dead"],)) == "dead"


def test_the_cli_reruns_many_through_the_registry(ledger: Ledger) -> None:
    every = seed_many(ledger.admin, runs=40)
    first, last = every[-1][0], every[0][0] + timedelta(hours=1)
    args = ["rerun-many", BULK_JOB, "--from", first.isoformat(), "--to", last.isoformat(), "--status", "dead",
            "--status", "failed", "--reason", "cli bulk", "--by", "alice", "--yes"]
    bad = run_cli(*args[:-5], "--status", "running", "--reason", "x", "--yes", url=ledger.admin)
    assert bad.returncode != 0 and "statuses must be failed and/or dead" in bad.stderr + bad.stdout
    done = run_cli(*args, url=ledger.admin)
    assert done.returncode == 0, done.stderr
    expected = scalar(ledger.admin, "SELECT count(*) FROM runner.job_runs WHERE job_name = %s AND status = 'pending'",
                      (BULK_JOB,))
    assert expected > 0 and f"{expected} runs pending" in done.stdout
    req = requests_rows(ledger.admin)[-1]
    assert (req["action"], req["who"], req["reason"], len(req["touched"]["runs"])) == (
        "rerun_many", "alice", "cli bulk", expected)


def test_the_definition_shown_is_what_a_runner_synced(ledger: Ledger) -> None:
    """A real sync (runner/store/ledger.py sync_jobs, as `runner start` does) records every field the
    job page shows, overlap and lane included; the page reads them from the ledger (no --app)."""
    from runner.model.app import Runner
    from runner.store import ledger as ledger_module

    app = Runner()

    @app.job("synced", cron="15 9 * * 1-5", timezone="Europe/Paris", partitions=["eu", "us"], max_attempts=5,
             owner="team-sync", timeout=120, stale_after="3h", overlap="skip", lane="bulk", misfire="skip")
    def synced(ctx: Any) -> None: ...

    with psycopg.connect(ledger.admin, autocommit=True) as conn:
        ledger_module.sync_jobs(conn, list(app.jobs.values()))
    with console(ledger.operator) as client:
        data = client.get("/api/job?name=synced", headers=OP).json()["definition"]
    assert {k: data[k] for k in ("timezone", "partitions", "max_attempts", "owner", "timeout", "stale_after",
                                 "overlap", "lane", "misfire", "schedule_kind", "cron")} == {
        "timezone": "Europe/Paris", "partitions": ["eu", "us"], "max_attempts": 5, "owner": "team-sync",
        "timeout": 120.0, "stale_after": 10800.0, "overlap": "skip", "lane": "bulk", "misfire": "skip",
        "schedule_kind": "cron", "cron": "15 9 * * 1-5"}
    slots = [datetime.fromisoformat(s) for s in data["next_slots"]]
    assert len(slots) == 5 and all(s.astimezone(ZoneInfo("Europe/Paris")).strftime("%H:%M %a") in {
        f"09:15 {d}" for d in ("Mon", "Tue", "Wed", "Thu", "Fri")} for s in slots)
