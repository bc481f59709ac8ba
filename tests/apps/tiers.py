"""Apps of tests/test_tiers.py, run by real ``runner start`` processes: jobs whose tracked
range starts TIERS_BASE (ISO 8601, set by the test, the same in every process) minus an
outage, so that a runner starting finds that outage to decide by the job's misfire tiers."""

import os
from datetime import datetime, timedelta

from runner import JobContext, Runner, tiers

BASE = datetime.fromisoformat(os.environ.get("TIERS_BASE", "2026-01-01T00:00:00+00:00"))


def work(ctx: JobContext) -> None:
    pass


# -- one job per tier but the backfill's: missing for 3 minutes, 30 minutes, 26 hours -------
outages_app = Runner()
for name, every, outage in (("recent", "10s", timedelta(minutes=3)), ("hour", "1m", timedelta(minutes=30)),
                            ("day-plus", "1h", timedelta(hours=26))):
    outages_app.job(name, every=every, grace="1s", owner="settlement-platform", misfire=tiers(),
                    track_from=BASE - outage)(work)

# -- a backfill tier: missing for 2 hours ------------------------------------------------------
backfill_app = Runner()
backfill_app.job("two-hours", every="5m", grace="1s", owner="settlement-platform",
                 track_from=BASE - timedelta(hours=2),
                 misfire=tiers(("5m", "catch_up"), ("1h", "coalesce"),
                               ("24h", "backfill", {"lane": "correction", "concurrency": 4}),
                               (None, "approve")))(work)


# -- side effects, slot by slot: missing for 6 minutes, two partitions ------------------------
def effects_app_for(base: datetime) -> Runner:
    """The test builds the same app (its base) to register the job and seed earlier runs."""
    app = Runner()
    app.job("mailer", every="1m", grace="1s", owner="settlement-platform", partitions=["a", "b"],
            track_from=base - timedelta(minutes=6),
            misfire=tiers(("1h", "catch_up"), (None, "approve"), side_effects=True))(work)
    return app


effects_app = effects_app_for(BASE)

# -- a backfill tier whose pause condition is true when its plan is made ----------------------
paused_app = Runner()
paused_app.job("beat", every="1s", grace="30s")(work)  # live work, to see the runner go on
paused_app.job("guarded", every="5m", grace="1s", owner="settlement-platform",
               track_from=BASE - timedelta(hours=2),
               misfire=tiers(("5m", "catch_up"), ("1h", "coalesce"),
                             ("24h", "backfill", {"concurrency": 4,
                                                  "pause_when": "SELECT count(*) > 0 FROM tiers_incident"}),
                             (None, "approve")))(work)
