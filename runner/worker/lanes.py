"""Lanes: the workloads a runner process serves, each with its own budget.

A run belongs to one lane, recorded on its row (``runner.job_runs.lane``, revision
0011_lanes): a live slot to its job's lane (``lane=`` on the job, ``realtime`` by default);
a rerun to ``correction``; a run an operator approved to ``manual``; a backfill plan's runs
to the plan's lane (``runner backfill --lane``, ``bulk`` by default); the runs a misfire
replays to ``correction``. The four built-in lanes, by priority (``rank``, lower first):

* ``realtime`` (0): live slots;
* ``correction`` (10): recent misses, small reprocessing, reruns;
* ``manual`` (20): approved high-risk work;
* ``bulk`` (30): large historical backfills, lowest priority.

Users add lanes with ``runner lane set NAME [--rank N] [--concurrency N] [--rate R]``
(``runner.set_lane_v1``, audited): a name is 1 to 40 of a-z, 0-9 and _, starting with a letter.
The old plan tags are aliases: a plan tagged ``backfill`` (the default before 0011, migrated to
``bulk``) or ``catch_up`` (a misfire replay's plan) is served as ``bulk`` / ``correction``.

**What a process serves.** ``runner start --lanes realtime`` or ``--lanes bulk,correction``;
without the option, every lane (as before lanes existed). A process fans out and claims the
live slots only of the jobs whose lane it serves (and registers only those jobs, so the
shares of a slot are split among the processes that claim it), decides their misfires,
starts retries, queued runs and backfill runs only of its lanes, and takes over only their
orphans. A takeover counts as a claim: each lane takes over at most its free in-flight room
on the process (runner/worker/takeover.py, one statement with a limit per lane), so a process with
one free bulk slot takes one orphaned bulk run, never the fifty a dead bulk process left.
An unknown lane is refused at start, with a one-line error.

**Per-process budget.** Each served lane has handler slots of its own: a handler thread pool
and a ``ctx.db`` connection pool of that size, and at most that many of its runs in flight on
the process (``realtime`` keeps the claim-ahead of ``--max-inflight``, 2 x its slots by
default). ``--lane-slots bulk=2,correction=4`` sets them; by default a process serving one
lane gives it ``--workers`` slots, and one serving several gives ``realtime`` ``--workers``,
``correction`` ``max(1, workers // 2)`` and every other lane ``max(1, workers // 4)``. So a
bulk handler never holds a realtime thread or connection: a live slot never waits for one.
``async def`` handlers too: each lane's run on an event loop thread of its own
(runner/aio.py), bounded by ``--async-workers`` for realtime and by the lane's
``--lane-slots`` value, else ``--async-workers``, for the others.

**Fleet budget.** A lane's ``concurrency`` (runs of the lane running at once, across every
process) and ``rate`` (starts per second, a token bucket holding ``max(1, rate)``) bound its
*queued* runs: every claim of one (``claim_due_runs``, ``claim_plan_runs``) takes them from
``runner.lane_budget_v1``, which locks the lane's row first and counts afterwards, in a new
snapshot, so two processes claiming the lane's last unit at once are serialised and the
second gets nothing. Live slots are never held back by a fleet limit (a live slot waiting
for a unit would be late): ``realtime`` takes none, and the live slots of a job in another
lane are bounded per process only.

**Priority where lanes share a process** (realtime > correction > manual > bulk): the loop's
duties claim live slots first, then queued runs lane by lane, then backfill plans; while
live claims wait in this process, no other lane claims anything (bulk fills only spare
capacity), and the per-lane slots above keep a lower lane from taking a higher one's handler.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from runner.actions import operate
from runner.actions.operate import OperatorError
from runner.model.jobs import LANE_NAME
from runner.sqlfiles import queries
from runner.store import ledger

Q = queries("lanes")

REALTIME = "realtime"
BUILTIN = ("realtime", "correction", "manual", "bulk")
PLAN_ALIASES = {"backfill": "bulk", "catch_up": "correction"}  # old plan tags


class LaneError(ValueError):
    """A lane option that cannot be served. The message is one line."""


def plan_lane(tag: str) -> str:
    """The lane a plan's tag names (the old tags are aliases)."""
    return PLAN_ALIASES.get(tag, tag)


def parse_lanes(text: str | None) -> tuple[str, ...] | None:
    """``--lanes a,b``: the lanes named (checked as names; None: every lane)."""
    if text is None:
        return None
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise LaneError("--lanes names no lane (give e.g. --lanes realtime or --lanes bulk,correction)")
    for name in names:
        if not LANE_NAME.fullmatch(name):
            raise LaneError(f"--lanes: {name!r} is not a lane name (1 to 40 of a-z, 0-9 and _)")
    return tuple(dict.fromkeys(names))


def parse_lane_slots(text: str | None) -> dict[str, int]:
    """``--lane-slots bulk=2,correction=4``: handler slots per lane on this process."""
    slots: dict[str, int] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not LANE_NAME.fullmatch(name):
            raise LaneError(f"--lane-slots: {part.strip()!r} is not LANE=N (e.g. bulk=2)")
        try:
            n = int(value)
        except ValueError:
            raise LaneError(f"--lane-slots: {part.strip()!r}: N must be an integer >= 1") from None
        if n < 1:
            raise LaneError(f"--lane-slots: {part.strip()!r}: N must be an integer >= 1")
        slots[name] = n
    return slots


def default_slots(lane: str, served: Sequence[str], workers: int) -> int:
    """A lane's handler slots when ``--lane-slots`` does not say (module docstring)."""
    if len(served) == 1 or lane == REALTIME:
        return workers
    if lane == "correction":
        return max(1, workers // 2)
    return max(1, workers // 4)


@dataclass(frozen=True)
class Served:
    """What one process serves: its lanes (by priority) and each one's handler slots."""

    lanes: tuple[str, ...]
    slots: dict[str, int]
    every: bool  # no --lanes: every lane, including lanes added after the start

    def serves(self, lane: str) -> bool:
        return self.every or lane in self.slots


def resolve(conn: psycopg.Connection[Any], wanted: Sequence[str] | None, lane_slots: Mapping[str, int],
            workers: int, job_lanes: Iterable[tuple[str, str]] = ()) -> Served:
    """Check the lane options against runner.lanes (LaneError: unknown lane) and size each."""
    known = [row[0] for row in conn.execute(Q["lane_names"]).fetchall()]
    for name in wanted or ():
        if name not in known:
            raise LaneError(f"unknown lane {name!r} (lanes: {', '.join(known)}; "
                            "add one with runner lane set)")
    for job, lane in job_lanes:
        if lane not in known:
            raise LaneError(f"job {job!r} is in unknown lane {lane!r} (lanes: {', '.join(known)}; "
                            "add it with runner lane set)")
    served = [name for name in known if wanted is None or name in wanted]
    for name in lane_slots:
        if name not in served:
            raise LaneError(f"--lane-slots: lane {name!r} is not served by this process "
                            f"(it serves {', '.join(served)})")
    slots = {name: lane_slots.get(name, default_slots(name, served, workers)) for name in served}
    return Served(tuple(served), slots, wanted is None)


# -- runner lane -----------------------------------------------------------------------------


def list_lanes(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return ledger.dict_rows(conn, Q["lanes"], {})


def set_lane(conn: psycopg.Connection[Any], lane: str, reason: str, *, rank: int | None = None,
             concurrency: int | None = None, set_concurrency: bool = False, rate: float | None = None,
             set_rate: bool = False, description: str | None = None, who: str | None = None,
             now: datetime | None = None) -> dict[str, Any]:
    """Create a lane or change its rank and fleet limits (audited); OperatorError if refused."""
    who_ = operate.checked_text(who or operate.default_who(), "--by")
    reason_ = operate.checked_text(reason, "--reason")
    if not LANE_NAME.fullmatch(lane):
        raise OperatorError(f"lane name {lane!r} is not valid: 1 to 40 of a-z, 0-9 and _, "
                            "starting with a letter")
    with conn.transaction():
        [row] = operate.call_action(conn, Q["set_lane"], {
            "lane": lane, "rank": rank, "concurrency": concurrency, "set_concurrency": set_concurrency,
            "rate": rate, "set_rate": set_rate, "description": description, "who": who_,
            "reason": reason_, "now": now})
    return row
