"""Misfire tiers as the worker role: a runner's backfill tier makes its plan through
runner.tier_backfill_v1 with the worker's privileges only, audited with the worker's login as
db_user; the worker still cannot create a plan of its own choosing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg

from runner import Runner, tiers
from runner.store import ledger
from runner.worker import misfire
from tests.security.conftest import Logins, refused
from tests.support import rows

T0 = datetime(2026, 5, 4, 3, 0, tzinfo=UTC)


def test_a_backfill_tier_plan_is_audited_with_the_worker_login(bare_logins: Logins) -> None:
    app = Runner()
    app.job("late", every="5m", track_from=T0, grace="1s", misfire=tiers())(lambda ctx: None)
    job = app.jobs["late"]
    now = T0 + timedelta(hours=2)
    with psycopg.connect(bare_logins.worker, autocommit=True) as conn:
        ledger.sync_jobs(conn, [job], now=T0 - timedelta(minutes=1))
        got = misfire.run_once(conn, job, now, misfire.LateRange(
            None, job.schedule.latest_at_or_before(misfire.cutoff_for(job, now))))
    assert got.counts == {"backfill": 24}
    assert rows(bare_logins.admin, "SELECT action, who, db_user FROM runner.requests") == [
        ("backfill", "runner (misfire tier backfill)", bare_logins.users["worker"])]
    assert rows(bare_logins.admin, "SELECT lane, requested_by FROM runner.backfills") == [
        ("correction", "runner (misfire tier backfill)")]
    # the other tiers record their decisions with the worker's INSERT on misfire_decisions
    held = Runner()
    held.job("held", every="1h", track_from=T0, grace="1s", misfire=tiers())(lambda ctx: None)
    hjob, later = held.jobs["held"], T0 + timedelta(hours=26)
    with psycopg.connect(bare_logins.worker, autocommit=True) as conn:
        ledger.sync_jobs(conn, [hjob], now=T0 - timedelta(minutes=1))
        got = misfire.run_once(conn, hjob, later, misfire.LateRange(
            None, hjob.schedule.latest_at_or_before(misfire.cutoff_for(hjob, later))))
    assert got.counts == {"awaiting_approval": 26}
    assert rows(bare_logins.admin, "SELECT tier, count(*) FROM runner.misfire_decisions WHERE job_name = 'held'"
                                   " GROUP BY 1") == [("approve", 26)]
    # the operator's function stays the operator's: no plan of the worker's own choosing
    assert "permission denied" in refused(
        bare_logins.worker,
        "SELECT * FROM runner.create_backfill_v1('late', now(), now() + interval '1 hour', NULL, 'bulk', 1,"
        " NULL, NULL, NULL, false, ARRAY[now()], ARRAY[''], ARRAY[current_date], ARRAY[now()], ARRAY[now()],"
        " ARRAY['k'], 'w', 'r')")
