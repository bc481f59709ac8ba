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
# its one slot, daily: EDGES_CRASH_SLOT (set by the test, the same in each process it starts),
# else 30 minutes before import; late at start, and the next one is 24 h later (an hourly job
# would see another slot fall due when the test crosses the top of an hour)
CRASH_SLOT = datetime.fromisoformat(os.environ.get("EDGES_CRASH_SLOT")
                                    or (datetime.now(UTC) - timedelta(minutes=30)).isoformat())


@crash_app.job("crasher", cron=f"{CRASH_SLOT.minute} {CRASH_SLOT.hour} * * *", max_attempts=3,
               track_from=CRASH_SLOT - timedelta(minutes=1))
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


# -- a runner stopped after claiming 1 of 30 partitions of a dynamic job ---------------------
FAN_KEYS = [f"tenant-{i:02d}" for i in range(30)]
fan_app = Runner()


@fan_app.job("fan", every="1s", partitions=lambda slot: FAN_KEYS, misfire="skip", overlap="allow")
def fan(ctx: JobContext) -> None:
    time.sleep(float(os.environ.get("EDGES_HOLD", "30")))  # the work: longer than the grace


# -- a window callable that raises for every slot, beside a healthy job ----------------------
window_app = Runner()


def _no_window(slot: datetime) -> tuple[datetime, datetime]:
    raise RuntimeError("no window\nattempt_succeeded forged")


@window_app.job("bad-window", every="1s", window=_no_window, misfire="skip")
def bad_window(ctx: JobContext) -> None:
    pass


@window_app.job("healthy", every="1s")
def healthy(ctx: JobContext) -> None:
    pass


# -- a handler slower than its schedule, one worker ------------------------------------------
overload_app = Runner()


@overload_app.job("overloaded", every="1s", grace="1s", misfire="skip", overlap="allow")
def overloaded(ctx: JobContext) -> None:
    time.sleep(2.5)  # the work: slower than the schedule


# -- replay of a quick handler after a downtime ----------------------------------------------
replay_app = Runner()


@replay_app.job("replay-fast", every="1s", misfire="replay", max_catch_up=12, grace="1s",
                track_from=datetime.now(UTC) - timedelta(seconds=30))
def replay_fast(ctx: JobContext) -> None:
    pass


# -- a schedule that changes across a downtime -----------------------------------------------
# every 2 s before the change, every 3 s after it (EDGES_EVERY); misfire=skip decides the late
# slots, so every slot of the downtime either gets a decision or stays in the gap scan
change_app = Runner()


@change_app.job("changing", every=os.environ.get("EDGES_EVERY", "2s"), misfire="skip", grace="1s")
def changing(ctx: JobContext) -> None:
    pass


# -- a redeploy that changes the partitions (EDGES_PARTITIONS, comma-separated) ---------------
repartition_app = Runner()


@repartition_app.job("repartitioned", every="1s", grace="5s", misfire="skip",
                     partitions=os.environ.get("EDGES_PARTITIONS", "a,b").split(","))
def repartitioned(ctx: JobContext) -> None:
    pass

