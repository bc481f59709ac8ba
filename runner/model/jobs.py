"""What a job is: ``JobDef`` (one validated definition), its ``Backoff`` and ``Retention``, and
``JobSource``, what the runner's process and the operator reads need of an application (its
jobs by name). ``Runner`` (runner/model/app.py) builds these from ``@app.job(...)``; everything that
runs or reads jobs (the worker, the ledger, the duties) depends on this module, not on
``Runner``, so the model sits below the process that ``Runner.running()`` starts.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeAlias

from runner.errors import JobDefinitionError, Permanent
from runner.model import policies
from runner.model.schedule import Schedule, ScheduleError, parse_interval
from runner.model.tiers import MisfireTiers
from runner.verification import Kind

# called with a runner.JobContext (runner/context.py, which builds on this module: so the
# alias names no type from it)
Handler: TypeAlias = Callable[[Any], object]
PartitionsFn: TypeAlias = Callable[[datetime], Iterable[object]]
# a results check (runner/actions/backfill.py): (conn, window_start, window_end, partition) -> outcome
VerifyFn: TypeAlias = Callable[[Any, datetime, datetime, str], object]

MISFIRE_POLICIES = policies.SINGLE  # the registry (runner/model/policies.py)
OVERLAP_POLICIES = ("allow", "skip", "wait")
LANE_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")  # runner.lanes (revision 0011_lanes)


@dataclass(frozen=True)
class Backoff:
    """Delay before attempt n+1 after attempt n failed: ``base * factor**(n-1)``, capped at
    ``cap``, then spread by +/- ``jitter`` (a fraction) so that a failing fleet does not retry
    in lockstep."""

    base: timedelta = timedelta(seconds=10)
    factor: float = 2.0
    cap: timedelta = timedelta(hours=1)
    jitter: float = 0.2

    def delay(self, failed_attempt: int, rng: random.Random | None = None) -> timedelta:
        raw = self.base.total_seconds() * self.factor ** max(failed_attempt - 1, 0)
        capped = min(raw, self.cap.total_seconds())
        spread = (rng or random).uniform(-self.jitter, self.jitter) if self.jitter else 0.0
        return timedelta(seconds=max(capped * (1.0 + spread), 0.0))


MIN_RETENTION = timedelta(hours=1)  # runner.prune_v1 keeps every run at least this long


@dataclass(frozen=True)
class Retention:
    """How long a job's runs are kept before retention (runner.prune_v1) deletes them:
    ``succeeded`` for runs that succeeded, were skipped or coalesced; ``failed`` (longer) for
    cancelled runs, runs that were retried or failed on the way, and runs an operator touched;
    and, only when ``failed`` was given (``failed_set``), dead runs and failed runs with no
    retry pending. Without it those are never pruned: the gap scan lists them, and pruning one
    ends its listing. Pending, running and awaiting-approval runs are never pruned."""

    succeeded: timedelta
    failed: timedelta
    failed_set: bool = field(default=False, compare=False)

    def as_options(self) -> dict[str, float]:
        """The policy stored in ``runner.jobs.options``: ``failed_seconds`` only when set
        (runner.prune_v1 then prunes dead runs too; without it, 6 x ``succeeded_seconds``)."""
        options = {"succeeded_seconds": self.succeeded.total_seconds()}
        if self.failed_set:
            options["failed_seconds"] = self.failed.total_seconds()
        return options


def parse_retention(value: object, *, field_name: str = "retention") -> Retention:
    """``"30d"`` (succeeded runs 30 days, the others 6 x that), or ``{"succeeded": "30d",
    "failed": "180d"}`` (``failed`` optional: 6 x ``succeeded``; only a ``failed`` given lets
    dead runs and failed runs with no retry pending go, ``failed_set``). Each at least 1 hour, and
    ``failed`` at least ``succeeded``. Raises ScheduleError (with ``field``) when invalid."""
    if isinstance(value, dict):
        unknown = set(value) - {"succeeded", "failed"}
        if unknown or "succeeded" not in value:
            raise ScheduleError(field_name, 'give "30d" or {"succeeded": "30d", "failed": "180d"}'
                                f"; got keys {sorted(map(str, value))}")
        succeeded = parse_interval(value["succeeded"], field=field_name)
        failed = (parse_interval(value["failed"], field=field_name) if value.get("failed") is not None
                  else succeeded * 6)
    elif isinstance(value, str | int | float | timedelta) and not isinstance(value, bool):
        succeeded = parse_interval(value, field=field_name)
        failed = succeeded * 6
    else:
        raise ScheduleError(field_name, 'give "30d" or {"succeeded": "30d", "failed": "180d"}, '
                            f"got {value!r}")
    if succeeded < MIN_RETENTION or failed < MIN_RETENTION:
        raise ScheduleError(field_name, "runs are kept at least 1 hour")
    if failed < succeeded:
        raise ScheduleError(field_name, "failed runs must be kept at least as long as succeeded ones")
    return Retention(succeeded=succeeded, failed=failed,
                     failed_set=isinstance(value, dict) and value.get("failed") is not None)


@dataclass(frozen=True)
class JobDef:
    name: str
    handler: Handler
    schedule: Schedule
    partitions: tuple[str, ...] | PartitionsFn | None
    max_attempts: int
    version: str
    backoff: Backoff
    permanent: tuple[type[BaseException], ...]
    owner: str | None
    paused: bool
    track_from: datetime | None
    timeout: timedelta | None = None
    lease: timedelta = timedelta(seconds=60)
    misfire: str = "coalesce"  # a policy of MISFIRE_POLICIES, or "tiers" (misfire_tiers)
    grace: timedelta = timedelta(seconds=60)
    max_catch_up: int = 10
    max_catch_up_age: timedelta | None = None
    stale_after: timedelta | None = None  # runner.alerts: no success for longer than this
    overlap: str = "allow"
    lane: str = "realtime"  # the lane of its live slots (runner/worker/lanes.py)
    # a results check: callable or SQL (runner/actions/backfill.py), or verification kinds
    # (runner/verification.py), of which min_passing must pass
    verify: VerifyFn | str | tuple[Kind, ...] | None = None
    min_passing: int | None = None
    window: timedelta | Callable[[datetime], tuple[datetime, datetime]] | None = None
    retention: Retention | None = None  # None: the runner's --retention-default, else never pruned
    options: dict[str, Any] = field(default_factory=dict)
    is_async: bool = False  # an async def handler: awaited on the runner's event loop
    misfire_tiers: MisfireTiers | None = None  # misfire=tiers(...) (runner/model/tiers.py)

    @property
    def dynamic_partitions(self) -> bool:
        return callable(self.partitions)

    def partitions_for(self, slot: datetime) -> list[str]:
        """The partition keys of one slot: ``['']`` when the job is not partitioned."""
        if self.partitions is None:
            return [""]
        if isinstance(self.partitions, tuple):
            return list(self.partitions)
        keys = _partition_keys(self.name, self.partitions(slot))
        return list(keys)

    def window_for(self, slot: datetime) -> tuple[datetime, datetime]:
        """The business window of a slot: ``[previous slot, slot)`` by default; ``window=`` a
        length gives ``[slot - length, slot)``; a callable of the slot gives its own."""
        if self.window is None:
            return self.schedule.window(slot)
        if isinstance(self.window, timedelta):
            return slot - self.window, slot
        got = self.window(slot)
        try:
            start, end = got
        except (TypeError, ValueError):
            raise JobDefinitionError(
                self.name, "window", f"the callable must return (start, end), got {got!r}") from None
        if not (isinstance(start, datetime) and isinstance(end, datetime) and start.tzinfo and end.tzinfo):
            raise JobDefinitionError(self.name, "window", "the callable must return aware datetimes")
        if start > end:
            raise JobDefinitionError(self.name, "window", f"window start {start} is after its end {end}")
        return start.astimezone(UTC), end.astimezone(UTC)

    def is_permanent(self, exc: BaseException) -> bool:
        return isinstance(exc, (Permanent, *self.permanent))


def _partition_keys(job: str, values: Iterable[object]) -> tuple[str, ...]:
    keys: list[str] = []
    seen: set[str] = set()
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise JobDefinitionError(
                job, "partitions", f"partition keys must be str or int, got {type(value).__name__}"
            )
        key = str(value)
        if key == "":
            raise JobDefinitionError(job, "partitions", "'' is reserved for 'not partitioned'")
        if "\x00" in key:
            raise JobDefinitionError(job, "partitions", "a partition key cannot contain NUL")
        if key in seen:
            raise JobDefinitionError(job, "partitions", f"duplicate partition key {key!r}")
        seen.add(key)
        keys.append(key)
    return tuple(keys)



class JobSource(Protocol):
    """What the process and the operator reads need of an application: its jobs by name
    (``Runner`` is one)."""

    @property
    def jobs(self) -> dict[str, JobDef]: ...
