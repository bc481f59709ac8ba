"""Apps of tests/test_edges.py, run by real ``runner start`` processes. Which one is chosen by
the attribute name; their behaviour is steered by environment variables so the tests can
set up each scenario."""

import os
import time
from datetime import UTC, datetime, timedelta

from runner import JobContext, Runner

# -- coalesce over a long downtime: 20 minutes x 2 partitions = 2,400 late rows ----------------
coalesce_app = Runner()


@coalesce_app.job("wide-coalesce", every="1s", misfire="coalesce", grace="1s", partitions=["a", "b"],
                  track_from=datetime.now(UTC) - timedelta(minutes=20))
def wide(ctx: JobContext) -> None:
    pass


# -- a handler that kills its process ---------------------------------------------------------
crash_app = Runner()


@crash_app.job("crasher", every="1h", max_attempts=3,
               track_from=datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(minutes=1))
def crasher(ctx: JobContext) -> None:
    os._exit(3)


# -- a slow handler and a short lease (heartbeats during the shutdown grace) ------------------
lease_app = Runner()


@lease_app.job("slow-lease", every="1s", lease="1s", misfire="skip", grace="1h",
               max_attempts=5, overlap="skip")
def slow(ctx: JobContext) -> None:
    if os.environ.get("EDGES_SLOW") == "1":
        time.sleep(4)  # the work itself (the test waits on the ledger, not on this)


# -- pause then restart -----------------------------------------------------------------------
skip_app = Runner()


@skip_app.job("pausable-skip", every="1s", misfire="skip", grace="1s")
def pausable(ctx: JobContext) -> None:
    pass


# -- a redeploy that changes the partitions (EDGES_PARTITIONS, comma-separated) ---------------
repartition_app = Runner()


@repartition_app.job("repartitioned", every="1s", grace="5s", misfire="skip",
                     partitions=os.environ.get("EDGES_PARTITIONS", "a,b").split(","))
def repartitioned(ctx: JobContext) -> None:
    pass
