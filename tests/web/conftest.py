"""The console's tests: a real ledger with hostile text in every field a page shows, the
roles of sql/roles.sql applied, and the console's database URL an operator login (so the
role limits are part of every test)."""

from __future__ import annotations

import os
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.support import ROOT, eventually, runner_cmd

HOSTILE_JOB = '<script>alert("job")</script>'
HOSTILE_PART = '"><img src=x onerror=alert("part")>'
HOSTILE_ERROR = "</td><script>alert('error')</script>"
HOSTILE_REASON = "<iframe src=//evil></iframe>&reason"
HOSTILE_OWNER = "<b onmouseover=alert('owner')>team</b>"
HOSTILES = (HOSTILE_JOB, HOSTILE_PART, HOSTILE_ERROR, HOSTILE_REASON, HOSTILE_OWNER)

# what runner/verification.py records for a plan of two kinds, hostile where a check's text goes
VERIFY_DETAIL = {
    "window_start": "2026-01-01T00:00:00+00:00", "window_end": "2026-01-02T00:00:00+00:00",
    "min_passing": 2, "passing": 1, "checks_total": 4,
    "kinds": [
        {"kind": "count", "name": "rows", "passed": True, "outcome": "passed", "partitions": 2,
         "partitions_not_passing": [], "expected": 10, "observed": 10, "detail": None},
        {"kind": "checksum", "name": HOSTILE_REASON, "passed": False, "outcome": "failed", "partitions": 2,
         "partitions_not_passing": [HOSTILE_PART], "expected": HOSTILE_OWNER, "observed": {"sum": HOSTILE_JOB},
         "detail": HOSTILE_ERROR},
    ],
    "checks": [],
}

# the one script of the pages (same origin, static/console.js): no other script, none inline
CONSOLE_SCRIPT = '<script src="/static/console.js" defer></script>'


def without_console_script(html: str) -> str:
    """The page less its one script tag (at most once: a second one would stay, and fail)."""
    return html.replace(CONSOLE_SCRIPT, "", 1)


OPERATOR_TOKEN = "op-token-" + "0123456789abcdef"
VIEWER_TOKEN = "view-token-" + "0123456789abcdef"


@dataclass(frozen=True)
class Ledger:
    admin: str  # the test superuser (seeds, checks)
    operator: str  # a LOGIN in the operator role: the console's database URL
    readonly: str  # a LOGIN in the readonly role
    password: str  # the logins' password: must never show
    ids: dict[str, Any]


def seed(url: str) -> dict[str, Any]:
    ids: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, track_from, first_registered_at,"
            " partitions, options) VALUES (%s, 'every', '1 hour', now() - interval '1 day',"
            " now() - interval '1 day', %s, %s)",
            (HOSTILE_JOB, [HOSTILE_PART, "b"], Jsonb({"owner": HOSTILE_OWNER})))
        conn.execute("INSERT INTO runner.job_schedules (job_name, valid_from, schedule_kind, every_interval,"
                     " timezone, partitions) SELECT job_name, track_from, schedule_kind, every_interval,"
                     " timezone, partitions FROM runner.jobs")
        conn.execute("INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, track_from)"
                     " VALUES ('quiet', 'every', '1 day', now())")

        def run(status: str, hours_ago: int, partition: str, attempt: int = 1) -> tuple[int, datetime]:
            row = conn.execute(
                "INSERT INTO runner.job_runs (job_name, schedule_slot, partition_key, business_date,"
                " window_start, window_end, status, trigger, attempt, fence, idempotency_key, started_at,"
                " finished_at, last_error, status_reason)"
                " SELECT %(job)s, s, %(p)s, s::date, s, s, %(status)s, 'schedule', %(a)s, %(a)s, 'k',"
                " CASE WHEN %(a)s > 0 THEN s + interval '2 seconds' END,"
                " CASE WHEN %(status)s IN ('succeeded', 'dead') THEN s + interval '9 seconds' END,"
                " CASE WHEN %(status)s = 'dead' THEN %(err)s END,"
                " CASE WHEN %(status)s = 'awaiting_approval' THEN %(reason)s END"
                " FROM (SELECT date_trunc('hour', now(), 'UTC') - make_interval(hours => %(h)s) AS s) t"
                " RETURNING id, schedule_slot",
                {"job": HOSTILE_JOB, "p": partition, "status": status, "a": attempt, "h": hours_ago,
                 "err": HOSTILE_ERROR, "reason": HOSTILE_REASON}).fetchone()
            assert row is not None
            if attempt:
                conn.execute(
                    "INSERT INTO runner.attempts (run_id, attempt, fence, trigger, owner_host, owner_pid,"
                    " owner_instance, lock_key, status, finished_at, error_class, error_message)"
                    " VALUES (%s, %s, %s, 'schedule', %s, 1, gen_random_uuid(), 1, %s, now(), %s, %s)",
                    (row[0], attempt, attempt, HOSTILE_OWNER, status if status != "awaiting_approval" else
                     "failed", "Boom" if status == "dead" else None,
                     HOSTILE_ERROR if status == "dead" else None))
            return int(row[0]), row[1]

        ids["dead"], ids["dead_slot"] = run("dead", 5, HOSTILE_PART, 3)
        ids["succeeded"], ids["succeeded_slot"] = run("succeeded", 5, "b")
        ids["awaiting"], ids["awaiting_slot"] = run("awaiting_approval", 4, HOSTILE_PART, 0)
        row = conn.execute(
            "INSERT INTO runner.backfills (job_name, range_from, range_to, status, requested_by, reason)"
            " VALUES (%s, now() - interval '3 days', now() - interval '2 days', 'paused', %s, %s) RETURNING id",
            (HOSTILE_JOB, HOSTILE_OWNER, HOSTILE_REASON)).fetchone()
        assert row is not None
        ids["plan"] = int(row[0])
        # a completed plan whose verification kinds recorded hostile text (a check's query can
        # echo anything: an error, a key, a value)
        row = conn.execute(
            "INSERT INTO runner.backfills (job_name, range_from, range_to, status, requested_by, reason,"
            " finished_at, verify_status, verify_detail, verified_at)"
            " VALUES (%s, now() - interval '5 days', now() - interval '4 days', 'completed', %s, %s, now(),"
            " 'failed', %s, now()) RETURNING id",
            (HOSTILE_JOB, HOSTILE_OWNER, HOSTILE_REASON, Jsonb(VERIFY_DETAIL))).fetchone()
        assert row is not None
        ids["verified"] = int(row[0])
        conn.execute("INSERT INTO runner.requests (action, job_name, who, reason, touched)"
                     " VALUES ('pause', %s, %s, %s, %s)",
                     (HOSTILE_JOB, HOSTILE_OWNER, HOSTILE_REASON,
                      Jsonb({"runs": [{"run_id": ids["dead"]}]})))
    return ids


@pytest.fixture
def ledger(db_url: str, db_roles: Any) -> Ledger:
    db_roles.apply(db_url)
    return Ledger(admin=db_url, operator=db_roles.url(db_url, "operator"),
                  readonly=db_roles.url(db_url, "readonly"), password=db_roles.password, ids=seed(db_url))


def requests_rows(url: str) -> list[dict[str, Any]]:
    with psycopg.connect(url, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, action, job_name, who, reason, db_user, touched FROM runner.requests ORDER BY id")
        names = [c.name for c in cur.description or ()]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


WEB_PIDS: dict[str, int] = {}  # base URL -> the pid of the `runner web` serving it (runner_webs)


@contextmanager
def runner_webs(url: str, logs: Path, specs: dict[str, tuple[tuple[str, ...], dict[str, str]]]
                ) -> Iterator[dict[str, str]]:
    """Real `runner web` subprocesses on the ledger at ``url``, started together: name ->
    (extra arguments, environment). Their base URLs once each serves /login; each one's
    output in ``logs/<name>.log``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_WEB_")}
    procs: dict[str, tuple[subprocess.Popen[bytes], str, Path, Any]] = {}
    try:
        for name, (args, env) in specs.items():
            port = free_port()
            log = logs / f"{name}.log"
            out = log.open("w")
            proc = subprocess.Popen(runner_cmd("web", "--port", str(port), "--database-url", url, *args),
                                    env={**environ, **env}, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
            procs[name] = (proc, f"http://127.0.0.1:{port}", log, out)
            WEB_PIDS[f"http://127.0.0.1:{port}"] = proc.pid

        def up() -> bool:
            for proc, base, log, _ in procs.values():
                assert proc.poll() is None, log.read_text()
                try:
                    with urllib.request.urlopen(base + "/login", timeout=2) as r:
                        if r.status != 200:
                            return False
                except OSError:
                    return False
            return True

        eventually(up, timeout=60, interval=0.1, message="runner web serves /login")
        yield {name: base for name, (_, base, _, _) in procs.items()}
    finally:
        for proc, _, _, _ in procs.values():
            proc.terminate()
        for proc, _, _, out in procs.values():
            proc.wait(30)
            out.close()


@contextmanager
def runner_web(url: str, logs: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """One real `runner web` subprocess (runner_webs); its base URL."""
    with runner_webs(url, logs, {"web": (args, env or {})}) as bases:
        yield bases["web"]
