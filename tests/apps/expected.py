"""Apps of tests/test_expected.py, run by real ``runner start`` processes: one job every
second, its misfire policy chosen by the test (the same in every process it starts)."""

import os
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from runner import JobContext, Runner, tiers


def work(ctx: JobContext) -> None:
    pass


# -- a job retired, then unretired while no runner was up: EXPECTED_POLICY ---------------------
POLICIES: dict[str, Any] = {
    "coalesce": "coalesce",
    "replay": "replay",
    "skip": "skip",
    "tiers": tiers(("5s", "catch_up"), (None, "approve")),
}
policy = os.environ.get("EXPECTED_POLICY", "coalesce")
retire_app = Runner()
retire_app.job("span", every="1s", grace="1s", owner="settlement-platform", misfire=POLICIES[policy],
               **({"max_catch_up": 3} if policy == "replay" else {}))(work)

# -- a job paused, then resumed while no runner was up: its long tier EXPECTED_LONG -----------
pause_app = Runner()
pause_app.job("paused", every="1s", grace="1s", owner="settlement-platform",
              misfire=tiers(("10s", "catch_up"), (None, os.environ.get("EXPECTED_LONG", "approve"))))(work)

# -- a long late range, its runner killed midway through deciding it --------------------------
# The 25 slots before EXPECTED_BASE have 100 partitions each (a misfire pass decides 10 slots:
# misfire.BATCH rows), the slots after it one (a light on-time load). With EXPECTED_HOLD_MARK
# set, the window of a slot in [base - 15 s, base) holds the misfire pass that computes it (the
# file is written first, so the test knows): the test kills the process there, after the
# range's first pass committed.
MIDWAY_BASE = datetime.fromisoformat(os.environ.get("EXPECTED_BASE", "2026-01-01T00:00:00+00:00"))
_MARK = os.environ.get("EXPECTED_HOLD_MARK")
MIDWAY_KEYS = [f"p{i:03d}" for i in range(100)]


def midway_partitions(slot: datetime) -> list[str]:
    return MIDWAY_KEYS if slot < MIDWAY_BASE else MIDWAY_KEYS[:1]


def midway_window(slot: datetime) -> tuple[datetime, datetime]:
    if _MARK and MIDWAY_BASE - timedelta(seconds=15) <= slot < MIDWAY_BASE:
        Path(_MARK).write_text(slot.isoformat())
        threading.Event().wait()  # until the test kills this process
    return slot - timedelta(seconds=1), slot


midway_app = Runner()
midway_app.job("midway", every="1s", grace="1s", owner="settlement-platform",
               partitions=midway_partitions, window=midway_window,
               track_from=MIDWAY_BASE - timedelta(seconds=25),
               misfire=tiers(("40s", "catch_up"), (None, "approve")))(work)
