"""What the console shows: one function per page, returning plain data that the page
templates render and the JSON API returns as is (one code path for both).

Every read comes from the views and tables the CLI reads (runner.job_health,
runner.missing_slots_v1, runner.alerts, runner.job_runs, attempts, effects, requests,
backfills) through the CLI's own modules where they have the read (``operate.status``,
``backfill.list_plans``/``show``), and otherwise on the named SQL of ``sql/queries/web.sql``.
Each is bounded (a LIMIT, a window of slots on an indexed column).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import PoolTimeout

from runner.actions import backfill, operate
from runner.model.app import Runner
from runner.sqlfiles import queries
from runner.store import ledger

Q = queries("web")
QO = queries("operate")

GRID_DAYS = 7
GRID_SLOTS = 168  # columns of the job grid (an hourly job's week)
GRID_PARTITIONS = 40  # rows shown one by one; beyond, the grid shows counts per slot
GAP_STATES = ("never_started", "fanout_failed", "pending", "running", "running_stale", "failed",
              "dead", "awaiting_approval")
# the order a slot's cell shows its worst status in (first = worst)
SEVERITY = ("dead", "missing", "failed", "running_stale", "awaiting_approval", "running", "pending",
            "cancelled", "skipped", "coalesced", "succeeded")
RUN_STATUSES = ("pending", "running", "succeeded", "failed", "dead", "skipped", "coalesced",
                "awaiting_approval", "cancelled")
# the statuses of schema step 0010_runs's partial index job_runs_attention_order
ATTENTION = ("pending", "running", "failed", "dead", "awaiting_approval")
TRIGGERS = ("schedule", "catch_up", "retry", "recovery", "manual", "backfill")
MAX_SEARCH = 200  # characters of a search or a text filter
NEXT_SLOTS = 5
RUNS_SCAN = 10_000  # runs a Runs page looks at for the filters no index serves (reads.runs)
JOB_SORTS = ("health", "job_name", "owner", "last_success_at", "lag", "missing", "alerts", "next_slot")


class NotFound(Exception):
    """The page's subject does not exist. The message is one line, shown as is."""


def _health_rank(job: dict[str, Any]) -> int:
    """0 = worst. Dead runs or alerts, then missing slots, then lag over an hour, then the rest."""
    if job.get("alerts") or job.get("dead_24h"):
        return 0
    if job.get("missing"):
        return 1
    lag = job.get("lag")
    if isinstance(lag, timedelta) and lag > timedelta(hours=1):
        return 2
    return 3


def jobs(conn: psycopg.Connection[Any], app: Runner | None, sort: str = "health",
         descending: bool = False,
         side: Callable[[], AbstractContextManager[psycopg.Connection[Any]]] | None = None,
         search: str | None = None) -> dict[str, Any]:
    """The Jobs page: one row per job of runner.job_health (``runner status``), with its
    count of runner.alerts and health rank; the unhealthy first unless sorted otherwise.
    The alerts themselves are the Alerts page's (newest first, bounded): this page counts
    them per job in the database, so its answer is one row per job whatever their number.
    Three statements: the clock, runner.job_health_v1 (health and missing counts from one pass
    of the gap scan) and the alert counts. With ``side`` (a second connection of the pool,
    taken only if one is free at once: pages never wait on each other for it),
    the alert counts run on it while job health runs on ``conn``: the two cost about the
    same at 1,000 jobs (~0.14 s each, scripts/bench/RESULTS.md) and neither needs the other,
    so the page waits for the slower one rather than for both (each statement has its own
    snapshot either way, as in autocommit). ``search``: only the jobs whose name or owner
    contains it (case-insensitive, as text: no pattern)."""
    counted: dict[str, Any] = {}

    def count_alerts(c: psycopg.Connection[Any]) -> None:
        counted["rows"] = ledger.dict_rows(c, Q["alert_counts"], {})

    def on_side() -> None:
        try:
            assert side is not None
            with side() as c:
                count_alerts(c)
        except PoolTimeout:  # no second connection free at once: counted on ``conn`` after
            counted["busy"] = True
        except BaseException as exc:
            counted["error"] = exc  # re-raised on the page's thread below

    helper = None
    if side is not None:
        helper = threading.Thread(target=on_side, name="runner-web-alert-counts", daemon=True)
        helper.start()
    report = operate.status(conn, app, with_alerts=False, with_backfills=False, with_runners=False)
    if helper is None:
        count_alerts(conn)
    else:
        helper.join()
        if "error" in counted:
            raise counted["error"]
        if "busy" in counted:
            count_alerts(conn)
    per_job = {r["job_name"]: r["alerts"] for r in counted["rows"]}
    rows = []
    needle = (search or "").strip().casefold()
    if len(needle) > MAX_SEARCH:
        raise ValueError(f"search is longer than {MAX_SEARCH} characters")
    for job in report.jobs:
        owner = str(job.get("owner") or "").casefold()
        if needle and needle not in job["job_name"].casefold() and needle not in owner:
            continue
        row = {**job, "alerts": per_job.get(job["job_name"], 0)}
        row["health"] = _health_rank(row)
        rows.append(row)
    if sort not in JOB_SORTS:
        sort = "health"

    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        value = row.get(sort)
        # None sorts last whatever the direction
        present = value is not None
        return (not present if not descending else present, value if present else 0, row["job_name"])

    rows.sort(key=key, reverse=descending)
    return {"now": report.now, "jobs": rows, "alerts": sum(per_job.values()), "sort": sort,
            "descending": descending, "search": search or "", "total": len(report.jobs)}


@dataclass(frozen=True)
class Grid:
    slots: list[datetime]  # newest first
    partitions: list[str] | None  # None: aggregated (counts per slot)
    cells: dict[tuple[datetime, str], dict[str, Any]]  # (slot, partition) -> {status, run_id}
    counts: dict[datetime, dict[str, int]]  # slot -> status -> runs (missing included)
    worst: dict[datetime, str]  # slot -> its worst status

    def as_dict(self) -> dict[str, Any]:
        return {
            "slots": self.slots,
            "partitions": self.partitions,
            "aggregated": self.partitions is None,
            "cells": [{"slot": s, "partition": p, **c} for (s, p), c in sorted(self.cells.items())],
            "counts": [{"slot": s, "statuses": c} for s, c in sorted(self.counts.items())],
        }


def job_grid(conn: psycopg.Connection[Any], job_name: str,
             now: datetime) -> tuple[Grid, list[dict[str, Any]]]:
    """Slots x partitions of the GRID_DAYS days up to ``now`` (the newest GRID_SLOTS slots),
    coloured by the run's status, ``missing`` where the gap scan expects a run and there is
    none; and the timings of those slots (oldest first) for the chart. The job page passes an
    earlier ``now`` to page back through the history (``until``), a window at a time."""
    since = now - timedelta(days=GRID_DAYS)
    window = {"job_name": job_name, "since": since, "until": now}
    stats = ledger.dict_rows(conn, Q["job_slot_stats"], window)
    missing = ledger.dict_rows(conn, Q["job_missing"], {**window, "limit": GRID_SLOTS * GRID_PARTITIONS})
    slots = sorted({*(s["schedule_slot"] for s in stats), *(m["schedule_slot"] for m in missing)},
                   reverse=True)[:GRID_SLOTS]
    shown = set(slots)
    counts: dict[datetime, dict[str, int]] = {s: {} for s in slots}
    timing: dict[datetime, dict[str, Any]] = {}
    for s in stats:
        slot = s["schedule_slot"]
        if slot not in shown:
            continue
        counts[slot][s["status"]] = s["runs"]
        t = timing.setdefault(slot, {"schedule_slot": slot, "duration_s": None, "start_lag_s": None})
        for key in ("duration_s", "start_lag_s"):
            if s[key] is not None:
                t[key] = s[key] if t[key] is None else max(t[key], s[key])
    partitions: list[str] | None = [r["partition_key"] for r in ledger.dict_rows(
        conn, Q["job_slot_partitions"], {"job_name": job_name, "slots": slots[:3],
                                         "limit": GRID_PARTITIONS + 1})]
    assert partitions is not None
    missing_keys = {m["partition_key"] for m in missing if m["schedule_slot"] in shown}
    if len(set(partitions) | {k or "" for k in missing_keys}) > GRID_PARTITIONS:
        partitions = None
    cells: dict[tuple[datetime, str], dict[str, Any]] = {}
    if partitions is not None:
        keys = set(partitions)
        for r in ledger.dict_rows(conn, Q["job_cells"], {"job_name": job_name, "slots": slots}):
            cells[(r["schedule_slot"], r["partition_key"])] = {"status": r["status"], "run_id": r["id"]}
            keys.add(r["partition_key"])
        if len(keys | {k or "" for k in missing_keys}) > GRID_PARTITIONS:
            partitions, cells = None, {}
        else:
            partitions = sorted(keys | {k or "" for k in missing_keys})
    for m in missing:
        if m["schedule_slot"] not in shown:
            continue
        if partitions is not None:
            cells[(m["schedule_slot"], m["partition_key"] or "")] = {"status": "missing", "run_id": None}
        bucket = counts[m["schedule_slot"]]
        bucket["missing"] = bucket.get("missing", 0) + 1
    worst = {s: next((st for st in SEVERITY if c.get(st)), "none") for s, c in counts.items()}
    timings = [timing[s] for s in sorted(timing) if timing[s]["duration_s"] is not None
               or timing[s]["start_lag_s"] is not None]
    return Grid(slots=slots, partitions=partitions, cells=cells, counts=counts, worst=worst), timings


def job(conn: psycopg.Connection[Any], app: Runner | None, job_name: str,
        until: datetime | None = None) -> dict[str, Any]:
    """The Job page: its health row, its definition as the ledger holds it with its next slots,
    the grid (of the GRID_DAYS days up to ``until``, default now: older history a window at a
    time), the timings chart's points, its newest runs."""
    report = operate.status(conn, app, job_name, with_runners=False)
    if not report.jobs:
        raise NotFound(f"no job {job_name!r} in the ledger")
    end = min(until, report.now) if until is not None else report.now
    grid, timings = job_grid(conn, job_name, end)
    runs = ledger.dict_rows(conn, Q["job_runs"], {"job_name": job_name, "status": None, "limit": 50})
    [awaiting] = ledger.dict_rows(conn, Q["job_awaiting"], {"job_name": job_name})
    older = end - timedelta(days=GRID_DAYS)
    return {"now": report.now, "job": report.jobs[0], "alerts": report.alerts, "grid": grid,
            "timings": timings, "runs": runs, "awaiting_approval": awaiting["runs"],
            "defined": app is not None and job_name in app.jobs,
            "definition": definition(conn, job_name),
            "window": {"since": older, "until": end, "latest": end >= report.now,
                       "older": older, "newer": end + timedelta(days=GRID_DAYS)}}


def _seconds(value: Any) -> timedelta | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    return None


def definition(conn: psycopg.Connection[Any], job_name: str) -> dict[str, Any] | None:
    """The job's definition as the ledger holds it (runner.jobs: what the runners that define
    it synced), so the page shows it without the app's code: schedule, time zone, partitions,
    misfire policy and tiers, overlap, max attempts, timeout, lane, owner, stale_after; and
    its next NEXT_SLOTS slots (UTC; the page shows them in the job's zone beside). An option a
    runner of an older version did not record is None (the page says so)."""
    found = ledger.dict_rows(conn, Q["job_definition"], {"job_name": job_name})
    if not found:
        return None
    row = found[0]
    stored = row.get("options")
    options: dict[str, Any] = stored if isinstance(stored, dict) else {}
    slots: list[datetime] = []
    for horizon in ("2 days", "400 days"):
        slots = [r["slot"] for r in ledger.dict_rows(conn, Q["next_slots"], {
            "job_name": job_name, "horizon": horizon, "limit": NEXT_SLOTS})]
        if len(slots) >= NEXT_SLOTS or row["schedule_kind"] == "every":
            break
    tiers = options.get("misfire_tiers")
    return {
        "job_name": row["job_name"], "schedule": row["schedule_label"], "schedule_kind": row["schedule_kind"],
        "cron": row["cron"], "every": row["every_interval"], "timezone": row["timezone"],
        "partitions": list(row["partitions"]) if row["partitions"] is not None else None,
        "dynamic_partitions": row["dynamic_partitions"], "max_attempts": row["max_attempts"],
        "version": row["version"], "misfire": options.get("misfire"),
        "misfire_tiers": tiers if isinstance(tiers, dict | list) else None,
        "grace": _seconds(options.get("grace_seconds")), "max_catch_up": options.get("max_catch_up"),
        "overlap": options.get("overlap"), "timeout": _seconds(options.get("timeout_seconds")),
        "lane": options.get("lane"), "owner": options.get("owner"),
        "stale_after": _seconds(options.get("stale_after_seconds")),
        "lease": _seconds(options.get("lease_seconds")), "paused_in_code": options.get("paused_in_code"),
        "track_from": row["track_from"], "synced_at": row["synced_at"], "in_code_at": row["in_code_at"],
        "next_slots": slots,
    }


@dataclass(frozen=True)
class RunFilters:
    """The Runs page's filters, checked: a bad value is a ValueError (one line: the page
    answers 400), never a query."""

    job: str | None = None
    partition: str | None = None
    statuses: tuple[str, ...] = ()
    trigger: str | None = None
    lane: str | None = None
    since: datetime | None = None  # slots at or after
    until: datetime | None = None  # slots before

    def __post_init__(self) -> None:
        for name in ("job", "partition", "lane"):
            value = getattr(self, name)
            if value is not None and len(value) > MAX_SEARCH:
                raise ValueError(f"{name} is longer than {MAX_SEARCH} characters")
        bad = [s for s in self.statuses if s not in RUN_STATUSES]
        if bad:
            raise ValueError(f"status must be one of {', '.join(RUN_STATUSES)}; got {bad[0]!r}")
        if self.trigger is not None and self.trigger not in TRIGGERS:
            raise ValueError(f"trigger must be one of {', '.join(TRIGGERS)}; got {self.trigger!r}")
        if self.since is not None and self.until is not None and not self.since < self.until:
            raise ValueError("since must be before until")

    def as_dict(self) -> dict[str, Any]:
        return {"job": self.job, "partition": self.partition, "status": list(self.statuses),
                "trigger": self.trigger, "lane": self.lane, "since": self.since, "until": self.until}


CURSOR = re.compile(r"(\d{4}-\d\d-\d\dT[0-9:.]+(?:Z|[+-]\d\d:\d\d))~(\d{1,19})")


def cursor_text(slot: datetime, run_id: int) -> str:
    return f"{slot.astimezone(UTC).isoformat()}~{run_id}"


def parse_cursor(value: str | None) -> tuple[datetime, int] | None:
    """The Runs page's keyset cursor: ``SLOT~ID`` of the last run shown (None: the first page)."""
    if value is None or not value.strip():
        return None
    found = CURSOR.fullmatch(value.strip())
    if found is None:
        raise ValueError(f"after must be a cursor like 2026-01-31T02:00:00+00:00~123, got {value[:80]!r}")
    try:
        slot = datetime.fromisoformat(found.group(1))
    except ValueError:
        raise ValueError(f"after has a bad time: {found.group(1)!r}") from None
    return slot, int(found.group(2))


def runs_statements(filters: RunFilters, after: tuple[datetime, int] | None, limit: int,
                    scan: int = RUNS_SCAN) -> tuple[sql.Composed, sql.Composed | None, dict[str, Any]]:
    """The Runs page's statement for these filters, and when some filter is one no index
    serves, the statement that tells how far a short page looked (reads.runs); their
    parameters. Separate so that tests/web/test_pages.py can EXPLAIN each."""
    indexed: list[sql.Composable] = [sql.SQL("true")]
    residual: list[sql.Composable] = []
    params: dict[str, Any] = {"limit": limit + 1, "scan": scan}
    if filters.job is not None:
        indexed.append(sql.SQL("r.job_name = %(job)s"))
        params["job"] = filters.job
    if filters.partition is not None:
        (indexed if filters.job is not None else residual).append(sql.SQL("r.partition_key = %(partition)s"))
        params["partition"] = filters.partition
    if filters.statuses:
        words = sql.SQL("r.status IN ({})").format(
            sql.SQL(", ").join(sql.Literal(s) for s in filters.statuses))
        (indexed if all(s in ATTENTION for s in filters.statuses) else residual).append(words)
    if filters.trigger is not None:
        residual.append(sql.SQL("r.trigger = {}").format(sql.Literal(filters.trigger)))
    if filters.lane is not None:
        residual.append(sql.SQL("r.lane = %(lane)s"))
        params["lane"] = filters.lane
    if filters.since is not None:
        indexed.append(sql.SQL("r.schedule_slot >= %(since)s"))
        params["since"] = filters.since
    if filters.until is not None:
        indexed.append(sql.SQL("r.schedule_slot < %(until)s"))
        params["until"] = filters.until
    if after is not None:
        indexed.append(sql.SQL("(r.schedule_slot, r.id) < (%(after_slot)s, %(after_id)s)"))
        params["after_slot"], params["after_id"] = after
    where = sql.SQL(" AND ").join(indexed)
    if residual:
        return (sql.SQL(Q["runs_bounded"]).format(where=where, residual=sql.SQL(" AND ").join(residual)),
                sql.SQL(Q["runs_looked"]).format(where=where), params)
    return sql.SQL(Q["runs"]).format(where=where), None, params


def runs(conn: psycopg.Connection[Any], filters: RunFilters, after: tuple[datetime, int] | None = None,
         limit: int = 100, scan: int = RUNS_SCAN) -> dict[str, Any]:
    """The Runs page: runs of every job (or of the filters), newest slot first, ``limit`` a
    page, keyset paged: ``after`` is the (slot, id) of the last run of the previous page, so
    a page costs the same at the ledger's end as at its start (no OFFSET).

    Some filters narrow an index (schema step 0010_runs): the job (with its partition: the
    runs' business key), the statuses when all need attention (pending, running, failed, dead,
    awaiting approval: a partial index), the slot range and the cursor. The others (trigger,
    lane, a partition of any job, a status such as skipped) are checked on the runs those
    indexes give, and a page looks at no more than ``scan`` of them: where matches are rare,
    a page holds fewer than ``limit`` runs, says how far back it looked (``looked_back_to``),
    and its "older" cursor goes on from there. So no page reads the whole ledger, at 30M runs
    as at 3M (scripts/bench/web_latency.py, scripts/bench/RESULTS.md).

    Each filter is a parameter (a status or trigger a fixed word, checked, as a literal: the
    planner must see it to match the partial index); the statement is planned for the values
    at hand, never prepared as a generic plan."""
    statement, looked_statement, params = runs_statements(filters, after, limit, scan)
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(statement, params, prepare=False)
        rows = cur.fetchall()
        edge = None
        if looked_statement is not None and len(rows) <= limit:
            cur.execute(looked_statement, params, prepare=False)
            looked = cur.fetchone()
            if looked is not None and looked["looked"] >= scan:
                edge = looked
    more = len(rows) > limit
    rows = rows[:limit]
    following = None
    if more and rows:
        following = cursor_text(rows[-1]["schedule_slot"], rows[-1]["id"])
    elif edge is not None:
        following = cursor_text(edge["schedule_slot"], edge["id"])
    return {"runs": rows, "limit": limit, "filters": filters.as_dict(), "next": following,
            "first_page": after is None, "scanned": looked_statement is not None,
            "looked_back_to": edge["schedule_slot"] if edge is not None else None,
            "looked": scan if edge is not None else None}


def run(conn: psycopg.Connection[Any], run_id: int) -> dict[str, Any]:
    """The Run page: the run, its attempts, its effects, the requests that touched it."""
    found = ledger.dict_rows(conn, Q["get_run"], {"run_id": run_id})
    if not found:
        raise NotFound(f"no run {run_id}")
    row = found[0]
    attempts = ledger.dict_rows(conn, QO["run_attempts"], {"run_id": run_id})
    effects = [r["effect"] for r in ledger.dict_rows(conn, QO["run_effects"], {"run_id": run_id})]
    requests = ledger.dict_rows(conn, Q["run_requests"], {
        "job_name": row["job_name"], "run_id": run_id, "limit": 100})
    return {"run": row, "attempts": attempts, "effects": effects, "requests": requests,
            "zone": job_zone(conn, row["job_name"])}


def job_zone(conn: psycopg.Connection[Any], job_name: str) -> str | None:
    """The job's time zone as the ledger holds it (None: no such job any more)."""
    found = ledger.dict_rows(conn, Q["job_zone"], {"job_name": job_name})
    return str(found[0]["timezone"]) if found else None


def gaps(conn: psycopg.Connection[Any], job_name: str | None = None, states: list[str] | None = None,
         since: datetime | None = None, until: datetime | None = None, limit: int = 500) -> dict[str, Any]:
    """The Gaps page: runner.missing_slots narrowed by job, states and a time range."""
    bad = [s for s in states or [] if s not in GAP_STATES]
    if bad:
        raise ValueError(f"state must be one of {', '.join(GAP_STATES)}; got {bad[0]!r}")
    rows = ledger.dict_rows(conn, Q["gaps"], {
        "job_name": job_name, "states": states or None, "since": since, "until": until,
        "limit": limit + 1})
    return {"gaps": rows[:limit], "truncated": len(rows) > limit, "limit": limit,
            "filters": {"job": job_name, "states": states or [], "since": since, "until": until}}


def _rate(plan: dict[str, Any], done: int, now: datetime) -> float | None:
    """Runs finished per second since the plan was created (to its end when finished)."""
    end = plan.get("finished_at") or now
    seconds = (end - plan["created_at"]).total_seconds()
    return done / seconds if seconds > 0 else None


VERIFY_CELL = 300  # characters of a value or detail a verification table cell shows


def _cell(value: Any) -> str | None:
    """A verification value as one line of text (JSON for what is not a string), cut to
    VERIFY_CELL characters. The page escapes it like any other text."""
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= VERIFY_CELL else text[:VERIFY_CELL - 1] + "…"


def verification(detail: Any) -> dict[str, Any] | None:
    """A plan's ``verify_detail`` as the pages show it: a table, one row per verification kind
    (count, checksum, sample_keys, residual: runner/verification.py) with its name, whether it
    passed, its outcome, the partitions not passing, expected, observed and detail; for a job
    whose ``verify`` is a callable, one row per partition checked. None when nothing is
    recorded. Each field is read defensively (the detail is JSON of whichever runner recorded
    it) and every value becomes text, so the template renders it escaped, never as markup."""
    if not isinstance(detail, dict):
        return None
    kinds, checks = detail.get("kinds"), detail.get("checks")
    rows: list[dict[str, Any]] = []
    if isinstance(kinds, list):
        by = "kind"
        for k in kinds:
            if isinstance(k, dict):
                rows.append({
                    "kind": _cell(k.get("kind")), "name": _cell(k.get("name")),
                    "passed": k.get("passed") is True, "outcome": _cell(k.get("outcome")),
                    "partitions": k.get("partitions") if isinstance(k.get("partitions"), int) else None,
                    "not_passing": [_cell(p) for p in k.get("partitions_not_passing") or []
                                    if p is not None][:10],
                    "expected": _cell(k.get("expected")), "observed": _cell(k.get("observed")),
                    "detail": _cell(k.get("detail"))})
    elif isinstance(checks, list):
        by = "partition"
        for c in checks:
            if isinstance(c, dict):
                outcome = _cell(c.get("outcome"))
                rows.append({"kind": "check", "name": _cell(c.get("partition")),
                             "passed": outcome == "passed", "outcome": outcome, "partitions": None,
                             "not_passing": [], "expected": None, "observed": None,
                             "detail": _cell(c.get("detail"))})
    else:
        return None
    summary = {key: detail.get(key) if isinstance(detail.get(key), int) else None
               for key in ("min_passing", "passing", "checks_total")}
    return {"by": by, "rows": rows, **summary,
            "window_start": _cell(detail.get("window_start")), "window_end": _cell(detail.get("window_end"))}


def backfills(conn: psycopg.Connection[Any], job_name: str | None = None, limit: int = 100) -> dict[str, Any]:
    """The Backfills page: the plans (``runner backfill list``) with progress, rate and each
    verification kind's outcome."""
    now = ledger.ledger_clock(conn).as_of
    plans = backfill.list_plans(conn, job_name, None, limit)
    for p in plans:
        finished = p["succeeded"] + p["other"]
        p["done"] = finished
        p["percent"] = round(100.0 * finished / p["expected_runs"]) if p["expected_runs"] else 100
        p["done_per_second"] = _rate(p, finished, now)
        p["verification"] = verification({"kinds": p["verify_kinds"]}) if p.get("verify_kinds") else None
    return {"now": now, "backfills": plans}


def one_backfill(conn: psycopg.Connection[Any], plan_id: int) -> dict[str, Any]:
    """A plan (``runner backfill show``): limits, progress, rate, failures, verification."""
    now = ledger.ledger_clock(conn).as_of
    try:
        progress = backfill.show(conn, plan_id)
    except operate.OperatorError as exc:
        raise NotFound(str(exc)) from None
    data = progress.as_dict()
    data["percent"] = round(100.0 * progress.done / progress.total) if progress.total else 100
    data["done_per_second"] = _rate(progress.plan, progress.done, now)
    data["verification"] = verification(data.get("verify_detail"))
    data["paused_because"] = pause_cause(progress.plan)
    data["zone"] = job_zone(conn, progress.plan["job_name"])
    by_status = data.get("runs_by_status") or {}
    data["failures"] = sum(n for st, n in by_status.items() if st in ("failed", "dead"))
    return data


def touched_runs(touched: Any) -> int:
    """How many runs a request touched, whatever its action: the runs it lists (a rerun, an
    approval, a bulk rerun), plus for a backfill the runs it inserted and those it queued
    again (its ``touched`` counts the inserted ones, lists the requeued ones)."""
    if not isinstance(touched, dict):
        return 0
    count = 0
    for key in ("runs", "runs_requeued"):
        listed = touched.get(key)
        if isinstance(listed, list):
            count += len(listed)
    inserted = touched.get("runs_inserted")
    if isinstance(inserted, int) and not isinstance(inserted, bool):
        count += inserted
    return count


_CLI_ADVICE = re.compile(r":\s*look at them \(runner backfill show\).*$", re.DOTALL)


def pause_cause(plan: dict[str, Any]) -> dict[str, Any] | None:
    """Why a paused plan is paused, as the console shows it: ``auto`` when the runner paused it
    (its failure threshold, a pause condition), with the recorded reason less the CLI's advice
    (the page offers the web actions instead), else the operator's pause."""
    if plan.get("status") != "paused":
        return None
    reason = str(plan.get("pause_reason") or "")
    auto = bool(reason) and not reason.startswith("paused by ")
    return {"auto": auto, "text": _CLI_ADVICE.sub("", reason).strip() if auto else reason,
            "threshold": plan.get("max_failures")}


def alerts(conn: psycopg.Connection[Any], job_name: str | None = None, limit: int = 500) -> dict[str, Any]:
    """The Alerts page: runner.alerts, newest first, at most ``limit``."""
    rows = ledger.dict_rows(conn, Q["alerts"], {"job_name": job_name, "limit": limit + 1})
    return {"alerts": rows[:limit], "truncated": len(rows) > limit, "limit": limit}


def requests(conn: psycopg.Connection[Any], job_name: str | None = None, before_id: int | None = None,
             limit: int = 100) -> dict[str, Any]:
    """The Requests page: the audit log (runner.requests), newest first."""
    rows = ledger.dict_rows(conn, Q["requests"], {
        "job_name": job_name, "before_id": before_id, "limit": limit})
    return {"requests": rows, "next_before_id": rows[-1]["id"] if len(rows) == limit else None}


def runners(conn: psycopg.Connection[Any], limit: int = 200) -> dict[str, Any]:
    """The Runners page: the runner processes of runner.instances, the live ones first (host,
    pid, version, lanes, started, last beat, runs in flight, lock session)."""
    rows = ledger.dict_rows(conn, Q["runners"], {"limit": limit})
    return {"now": ledger.db_now(conn), "runners": rows, "live": sum(1 for r in rows if r["live"])}


def liveness(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """The banner of every page: live runner processes and the newest heartbeat of any."""
    return operate.liveness(conn)
