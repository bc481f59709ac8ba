"""A backfill plan's pause condition paced by the plan (``runner backfill --pause-every``,
schema step 0012_pauseevery): the option's refusals, where the pace is shown and stored, the
due check reading the plan's own pace, and "at most once every N seconds across all
runners" held by two real runners (each evaluation of a Prometheus condition is one HTTP
request to the test's stand-in for Prometheus, counted there with its time)."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runner.actions import backfill
from runner.worker import conditions
from tests.apps.conditions import app as cond_app
from tests.support import RunnerProcess, eventually, rows, run_cli
from tests.test_pause_prometheus import Prometheus, prometheus  # noqa: F401 (the fixture)

APP = "tests/apps/conditions.py:app"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def backfill_cli(url: str, *extra: str, hours: int = 3) -> Any:
    return run_cli("backfill", "hourly", "--from", T0.isoformat(), "--to", (T0 + hours * HOUR).isoformat(),
                   "--reason", "replay", "--yes", "--app", APP, *extra, url=url)


@pytest.mark.parametrize(("extra", "error"), [
    (("--pause-every", "0", "--pause-when", "SELECT false"), "--pause-every must be between 1 and 3600, got '0'"),
    (("--pause-every", "3601", "--pause-when", "SELECT false"),
     "--pause-every must be between 1 and 3600, got '3601'"),
    (("--pause-every", "soon", "--pause-when", "SELECT false"), "--pause-every must be a number, got 'soon'"),
    (("--pause-every", "10"), "--pause-every needs a condition (--pause-when or --pause-when-prometheus)"),
])
def test_a_pace_out_of_bounds_or_without_a_condition_is_refused(db_url: str, db_roles: Any,
                                                                  extra: tuple[str, ...], error: str) -> None:
    db_roles.apply(db_url)
    out = backfill_cli(db_url, *extra)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.strip() == f"runner: error: {error}", out.stderr
    assert rows(db_url, "SELECT count(*) FROM runner.backfills") == [(0,)]


def test_the_pace_is_shown_stored_and_audited(db_url: str, db_roles: Any) -> None:
    db_roles.apply(db_url)
    dry = backfill_cli(db_url, "--pause-when", "SELECT false", "--pause-every", "2", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "pauses when: SELECT false  (now: False; evaluated every 2 s)" in dry.stdout, dry.stdout
    made = backfill_cli(db_url, "--pause-when", "SELECT false", "--pause-every", "2", "--json")
    assert made.returncode == 0, made.stderr
    plan = json.loads(made.stdout)
    assert plan["pause_every"] == 2 and plan["backfill"]["pause_every"] == 2
    plan_id = plan["backfill"]["id"]
    assert rows(db_url, "SELECT touched -> 'backfill' -> 'pause_every' FROM runner.requests"
                        " WHERE action = 'backfill'") == [(2,)]
    shown = run_cli("backfill", "show", str(plan_id), url=db_url)
    assert shown.returncode == 0, shown.stderr
    assert "pause when: SELECT false (every 2 s)" in shown.stdout, shown.stdout
    # not given: the default, 5 s, as before the option
    later = run_cli("backfill", "hourly", "--from", (T0 + 10 * HOUR).isoformat(), "--to",
                    (T0 + 11 * HOUR).isoformat(), "--reason", "r", "--yes", "--app", APP, "--json",
                    "--pause-when", "SELECT false", url=db_url)
    assert later.returncode == 0, later.stderr
    assert json.loads(later.stdout)["backfill"]["pause_every"] == conditions.EVERY == 5


def test_the_due_check_reads_the_plans_own_pace(db_url: str, db_roles: Any) -> None:
    """Driven with an explicit clock: a 60 s plan is left alone 30 s after its check and
    evaluated after 61 s; a plan of an older client (runner.create_backfill_v2, which names
    no pace) is paced by the default."""
    db_roles.apply(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        spec = backfill.Spec(job_name="hourly", range_from=T0, range_to=T0 + HOUR, pause_when="SELECT false",
                             pause_every=60)
        slow = backfill.create(conn, backfill.plan(conn, cond_app.jobs["hourly"], spec), "r", "t")["backfill"]
        assert slow["pause_every"] == 60
        conn.execute("UPDATE runner.backfills SET pause_checked_at = %s WHERE id = %s", (T0, slow["id"]))
    with conditions.connect(db_url) as cond:
        assert conditions.run_once(cond, 21077, ["hourly"], now=T0 + timedelta(seconds=30)) == {}
        assert conditions.run_once(cond, 21077, ["hourly"], now=T0 + timedelta(seconds=61)) == {
            slow["id"]: conditions.Evaluation(False)}
    with psycopg.connect(db_url, autocommit=True) as conn:
        old = conn.execute(
            "SELECT backfill_id FROM runner.create_backfill_v2('hourly', %s, %s, NULL, 'bulk', 1, NULL, NULL,"
            " 'SELECT false', false, ARRAY[%s]::timestamptz[], ARRAY['']::text[], ARRAY[%s::date],"
            " ARRAY[%s]::timestamptz[], ARRAY[%s]::timestamptz[], ARRAY['k']::text[], 't', 'r')",
            (T0 + 5 * HOUR, T0 + 6 * HOUR, T0 + 5 * HOUR, T0.date(), T0 + 5 * HOUR, T0 + 6 * HOUR)).fetchone()
        assert old is not None
        assert rows(db_url, "SELECT pause_every FROM runner.backfills WHERE id = %s", (old[0],)) == [(5,)]


@pytest.mark.slow
def test_two_runners_evaluate_a_one_second_plan_at_most_once_a_second(
        db_url: str, prometheus: Prometheus, tmp_path: Path) -> None:  # noqa: F811
    made = backfill_cli(db_url, "--pause-when-prometheus", "firing_empty", "--pause-every", "1",
                        "--prometheus-url", prometheus.url, "--json", hours=2000)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["backfill"]["pause_every"] == 1
    procs = [RunnerProcess(APP, db_url, "--poll-interval", "0.2", "--prometheus-url", prometheus.url,
                           log=tmp_path / f"runner{i}.log") for i in range(2)]
    try:
        def asked() -> list[float]:
            return [at for at, query in prometheus.asked_at if query == "firing_empty"][1:]  # after creation

        times = eventually(lambda: len(asked()) >= 9 and asked(), timeout=60, interval=0.1,
                           message="9 evaluations by the runners")
        assert all(p.proc.poll() is None for p in procs)
    finally:
        for p in procs:
            assert p.terminate() == 0, p.output()[-3000:]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # across both runners, never twice within the plan's second (the evaluation's own
    # duration, a few ms before its HTTP request, may differ from one to the next)
    assert min(gaps) > 0.8, [f"{g:.2f}" for g in gaps]
    # the plan's pace, not the default 5 s: a runner looks every conditions.POLL (1 s)
    assert sum(gaps) / len(gaps) < 3.0, [f"{g:.2f}" for g in gaps]
    assert rows(db_url, "SELECT status FROM runner.backfills") == [("running",)]
