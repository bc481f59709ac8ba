"""Apps of tests/test_expected.py, run by real ``runner start`` processes: one job every
second, its misfire policy chosen by the test (the same in every process it starts)."""

import os
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
