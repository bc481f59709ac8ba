"""The job registry: ``Runner`` and ``@app.job(...)``, with every definition validated when it
is registered (one clear error naming the job and the field) and synced into ``runner.jobs``
when a runner starts.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from runner import verification
from runner.errors import JobDefinitionError
from runner.model.jobs import (
    LANE_NAME,
    MISFIRE_POLICIES,
    OVERLAP_POLICIES,
    Backoff,
    Handler,
    JobDef,
    PartitionsFn,
    Retention,
    VerifyFn,
    _partition_keys,
    parse_retention,
)
from runner.model.schedule import ScheduleError, parse_interval, parse_schedule
from runner.model.tiers import MisfireTiers, TierError, tiers
from runner.verification import Kind

if TYPE_CHECKING:
    from runner.worker.inprocess import InProcessRunner

# the job model lives below the process (runner/model/jobs.py); its names stay importable here
__all__ = ["LANE_NAME", "Backoff", "JobDef", "Retention", "Runner", "is_async_handler", "parse_retention"]

_MAX_NAME = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise JobDefinitionError(str(name), "name", "a job needs a non-empty name")
    if len(name) > _MAX_NAME:
        raise JobDefinitionError(name[:40] + "...", "name", f"longer than {_MAX_NAME} characters")
    if _CONTROL.search(name):
        raise JobDefinitionError(name, "name", "control characters are not allowed")
    return name


def _check_backoff(job: str, value: object) -> Backoff:
    if value is None:
        return Backoff()
    if isinstance(value, Backoff):
        return value
    try:
        if isinstance(value, dict):
            unknown = set(value) - {"base", "factor", "cap", "jitter"}
            if unknown:
                raise ValueError(f"unknown keys {sorted(unknown)}")
            base = parse_interval(value.get("base", "10s"), field="backoff")
            cap = parse_interval(value.get("cap", "1h"), field="backoff")
            factor = float(value.get("factor", 2.0))
            jitter = float(value.get("jitter", 0.2))
        else:
            base = parse_interval(value, field="backoff")  # type: ignore[arg-type]
            cap, factor, jitter = timedelta(hours=1), 2.0, 0.2
    except (ScheduleError, ValueError, TypeError) as exc:
        raise JobDefinitionError(job, "backoff", str(exc)) from None
    if factor < 1.0:
        raise JobDefinitionError(job, "backoff", "factor must be >= 1")
    if not 0.0 <= jitter < 1.0:
        raise JobDefinitionError(job, "backoff", "jitter must be in [0, 1)")
    return Backoff(base=base, factor=factor, cap=max(cap, base), jitter=jitter)


class Runner:
    """The registry of jobs of one application.

    >>> app = Runner()
    >>> @app.job("refresh-cache", every="30s")
    ... def refresh(ctx): ...
    """

    def __init__(self) -> None:
        self._jobs: dict[str, JobDef] = {}

    def running(self, database_url: str | None = None, *, workers: int = 10, max_inflight: int = 0,
                poll_interval: float = 1.0, grace: float = 30.0, async_workers: int = 0,
                metrics_port: int | None = None) -> InProcessRunner:
        """This app's runner inside the application: ``with app.running(url):`` or ``async
        with app.running(url):`` (an ASGI lifespan). The options are ``runner start``'s;
        see runner/worker/inprocess.py."""
        from runner.worker.inprocess import InProcessRunner

        return InProcessRunner(self, database_url, workers=workers, max_inflight=max_inflight,
                               poll_interval=poll_interval, grace=grace, async_workers=async_workers,
                               metrics_port=metrics_port)

    @property
    def jobs(self) -> dict[str, JobDef]:
        return dict(self._jobs)

    def job(
        self,
        name: str,
        *,
        cron: str | None = None,
        every: str | int | float | timedelta | None = None,
        timezone: str | None = None,
        partitions: Sequence[str | int] | PartitionsFn | None = None,
        max_attempts: int = 3,
        version: str | int = "1",
        backoff: Backoff | dict[str, Any] | str | int | float | timedelta | None = None,
        permanent: Sequence[type[BaseException]] = (),
        owner: str | None = None,
        paused: bool = False,
        track_from: datetime | None = None,
        timeout: str | int | float | timedelta | None = None,
        lease: str | int | float | timedelta = "60s",
        misfire: str | MisfireTiers | Sequence[Any] = "coalesce",
        grace: str | int | float | timedelta = "60s",
        max_catch_up: int = 10,
        max_catch_up_age: str | int | float | timedelta | None = None,
        stale_after: str | int | float | timedelta | None = None,
        overlap: str = "allow",
        lane: str = "realtime",
        verify: VerifyFn | str | Kind | Sequence[Kind] | None = None,
        min_passing: int | None = None,
        window: str | int | float | timedelta | Callable[[datetime], tuple[datetime, datetime]] | None = None,
        retention: str | int | float | timedelta | dict[str, Any] | None = None,
    ) -> Callable[[Handler], Handler]:
        """Register the decorated function as the handler of job ``name`` (a non-empty name of
        at most 200 characters, no control characters, unique in the app). Every option is
        checked here: a bad one raises JobDefinitionError naming the job and the option.

        Options (docs/reference/jobs.md is generated from this list: one entry per parameter):

            cron: a cron expression (5 fields, names, ranges, steps, lists, ``@daily`` ...)
                read in ``timezone``; give ``cron`` or ``every``, not both.
            every: a fixed interval (``"30s"``, ``"5m"``, ``"1h"``, seconds or a timedelta):
                slots at whole multiples of it since the Unix epoch.
            timezone: the IANA zone ``cron`` is read in (default UTC).
            partitions: the partition keys of every slot (a list of str or int, unique, not
                empty), or a callable of the slot returning them (dynamic partitions); one
                run per slot x partition. None: one run per slot.
            max_attempts: attempts a run gets before it is ``dead`` (at least 1).
            version: part of the idempotency key (job + business window + partition +
                version); change it when the handler's output for a window changes.
            backoff: the delay before a retry: ``"10s"`` (the base), or ``{"base", "factor",
                "cap", "jitter"}``, or a Backoff (default: 10 s doubling up to 1 h, +/- 20 %).
            permanent: exception types that send a run straight to ``dead`` with no retry
                (as ``runner.Permanent`` does).
            owner: who answers for the job: named in its alerts.
            paused: register the job paused (no new runs until ``runner resume``); the
                ledger's pause state is an operator's after the first registration.
            track_from: an aware datetime from which the gap scan and the misfire duty
                expect the job's slots (default: its first registration).
            timeout: the longest an attempt's handler may run, counted from its start; past
                it the attempt is given up (``ctx.heartbeat()`` raises AttemptTimedOut, a
                statement on ``ctx.db`` is cancelled). None: no limit.
            lease: the heartbeat age past which a silent owner's lock session is ended and its
                run taken over by another runner (at least 1 s).
            misfire: what happens to slots not started within ``grace`` of their instant: a
                policy (``coalesce``, ``skip``, ``replay``, ``manual``: see the misfire
                policies) or tiers by lateness (``tiers(...)``, or the list of its items).
            grace: how long after its instant a slot may start and still count as on time.
            max_catch_up: with ``misfire="replay"``: the newest late slots that run (the
                others are held awaiting approval).
            max_catch_up_age: with ``misfire="replay"``: late slots older than this are held
                too. None: no age limit.
            stale_after: the ``stale`` alert fires when the job's last success is older than
                this. None: no such alert.
            overlap: a slot due while the previous run of the same partition still runs:
                ``allow`` (both run), ``skip`` (recorded skipped, with the reason) or ``wait``.
            lane: the lane of the job's live slots (1 to 40 of a-z, 0-9 and _, starting with a
                letter); reruns, catch-ups and backfills have lanes of their own.
            verify: a results check for backfills: verification kinds (runner.verification:
                count, checksum, sample_keys, residual), a SQL string with the placeholders
                window_start, window_end and partition, or a callable (conn, window_start,
                window_end, partition).
            min_passing: with a list of verification kinds: how many must pass (default 2,
                at most the number of kinds).
            window: the business window of a slot: a length (``[slot - length, slot)``) or a
                callable of the slot returning (start, end). None: ``[previous slot, slot)``.
            retention: how long the job's runs are kept before retention deletes them:
                ``"30d"``, or ``{"succeeded": "30d", "failed": "180d"}`` (each at least 1 hour).
                None: the runner's ``--retention-default``, else forever.
        """
        job = self._define(
            name,
            cron=cron,
            every=every,
            timezone=timezone,
            partitions=partitions,
            max_attempts=max_attempts,
            version=version,
            backoff=backoff,
            permanent=permanent,
            owner=owner,
            paused=paused,
            track_from=track_from,
            timeout=timeout,
            lease=lease,
            misfire=misfire,
            grace=grace,
            max_catch_up=max_catch_up,
            max_catch_up_age=max_catch_up_age,
            stale_after=stale_after,
            overlap=overlap,
            lane=lane,
            verify=verify,
            min_passing=min_passing,
            window=window,
            retention=retention,
        )

        def register(handler: Handler) -> Handler:
            if not callable(handler):
                raise JobDefinitionError(job.name, "handler", "the handler must be callable")
            _refuse_generator_handler(job.name, handler)
            if job.name in self._jobs:
                raise JobDefinitionError(job.name, "name", "a job with this name is already registered")
            self._jobs[job.name] = JobDef(**{**job.__dict__, "handler": handler,
                                             "is_async": is_async_handler(handler)})
            return handler

        return register

    def _define(self, name: object, **kw: Any) -> JobDef:
        job = _check_name(name)
        if job in self._jobs:
            raise JobDefinitionError(job, "name", "a job with this name is already registered")
        try:
            schedule = parse_schedule(cron=kw["cron"], every=kw["every"], timezone=kw["timezone"])
        except ScheduleError as exc:
            raise JobDefinitionError(job, exc.field, str(exc)) from None
        partitions: tuple[str, ...] | PartitionsFn | None
        raw_parts = kw["partitions"]
        if raw_parts is None:
            partitions = None
        elif callable(raw_parts):
            partitions = raw_parts
        elif isinstance(raw_parts, (str, bytes)):
            raise JobDefinitionError(job, "partitions", "give a list of keys or a callable, not a string")
        else:
            try:
                partitions = _partition_keys(job, list(raw_parts))
            except TypeError:
                raise JobDefinitionError(job, "partitions", "give a list of keys or a callable") from None
            if not partitions:
                raise JobDefinitionError(job, "partitions", "an empty list would expect no runs at all")
        max_attempts = kw["max_attempts"]
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise JobDefinitionError(job, "max_attempts", f"must be an integer >= 1, got {max_attempts!r}")
        version = kw["version"]
        if isinstance(version, bool) or not isinstance(version, (str, int)):
            raise JobDefinitionError(job, "version", "must be a string or an integer")
        permanent = tuple(kw["permanent"])
        for exc_type in permanent:
            if not (isinstance(exc_type, type) and issubclass(exc_type, BaseException)):
                raise JobDefinitionError(job, "permanent", f"{exc_type!r} is not an exception type")
        owner = kw["owner"]
        if owner is not None and not isinstance(owner, str):
            raise JobDefinitionError(job, "owner", "must be a string")
        track_from = kw["track_from"]
        if track_from is not None and (not isinstance(track_from, datetime) or track_from.tzinfo is None):
            raise JobDefinitionError(job, "track_from", "must be an aware datetime")
        timeout = None
        if kw["timeout"] is not None:
            timeout = _interval_of(job, "timeout", kw["timeout"])
        lease = _interval_of(job, "lease", kw["lease"])
        if lease < timedelta(seconds=1):
            raise JobDefinitionError(job, "lease", "must be at least 1s")
        misfire, misfire_tiers = _check_misfire(job, kw["misfire"])
        grace = _interval_of(job, "grace", kw["grace"]) if kw["grace"] not in (0, "0", "0s") else timedelta(0)
        max_catch_up = kw["max_catch_up"]
        if isinstance(max_catch_up, bool) or not isinstance(max_catch_up, int) or max_catch_up < 0:
            raise JobDefinitionError(job, "max_catch_up", f"must be an integer >= 0, got {max_catch_up!r}")
        max_age = None
        if kw["max_catch_up_age"] is not None:
            max_age = _interval_of(job, "max_catch_up_age", kw["max_catch_up_age"])
        if kw["overlap"] not in OVERLAP_POLICIES:
            raise JobDefinitionError(
                job, "overlap", f"must be one of {', '.join(OVERLAP_POLICIES)}, got {kw['overlap']!r}")
        lane = kw.get("lane", "realtime")
        if not isinstance(lane, str) or not LANE_NAME.fullmatch(lane):
            raise JobDefinitionError(job, "lane", "must be a lane name (1 to 40 of a-z, 0-9 and _, "
                                                  f"starting with a letter), got {lane!r}")
        window = kw["window"]
        if window is not None and not callable(window):
            window = _interval_of(job, "window", window)
        verify = kw["verify"]
        min_passing = kw.get("min_passing")
        if isinstance(verify, Kind | list | tuple):
            try:
                verify, min_passing = verification.check(verify, min_passing)
            except verification.VerificationError as exc:
                raise JobDefinitionError(job, "verify", str(exc)) from None
        else:
            if isinstance(verify, str) and not verify.strip():
                raise JobDefinitionError(job, "verify", "an empty SQL check")
            if isinstance(verify, str):
                try:
                    verification.positional(verify, ("window_start", "window_end", "partition"))
                except verification.VerificationError as exc:
                    raise JobDefinitionError(job, "verify", str(exc)) from None
            if verify is not None and not (isinstance(verify, str) or callable(verify)):
                raise JobDefinitionError(job, "verify", "give a callable (conn, window_start, window_end, "
                                                        "partition), a SQL string or a list of kinds "
                                                        "(runner.verification)")
            if min_passing is not None:
                raise JobDefinitionError(job, "min_passing", "applies to a list of verification kinds "
                                                             "(verify=[count(...), residual(...), ...])")
        retention = None
        if kw["retention"] is not None:
            try:
                retention = parse_retention(kw["retention"])
            except ScheduleError as exc:
                raise JobDefinitionError(job, "retention", str(exc)) from None
        return JobDef(
            name=job,
            retention=retention,
            verify=verify,
            min_passing=min_passing,
            window=window,
            overlap=kw["overlap"],
            lane=lane,
            timeout=timeout,
            lease=lease,
            misfire=misfire,
            misfire_tiers=misfire_tiers,
            grace=grace,
            max_catch_up=max_catch_up,
            max_catch_up_age=max_age,
            stale_after=(None if kw["stale_after"] is None
                         else _interval_of(job, "stale_after", kw["stale_after"])),
            handler=_no_handler,
            schedule=schedule,
            partitions=partitions,
            max_attempts=max_attempts,
            version=str(version),
            backoff=_check_backoff(job, kw["backoff"]),
            permanent=permanent,
            owner=owner,
            paused=bool(kw["paused"]),
            track_from=track_from,
        )


def _check_misfire(job: str, value: object) -> tuple[str, MisfireTiers | None]:
    """A single policy (a name of MISFIRE_POLICIES), or tiers: ``tiers(...)`` or the list of
    its items (runner/model/tiers.py)."""
    if isinstance(value, str):
        if value not in MISFIRE_POLICIES:
            raise JobDefinitionError(
                job, "misfire", f"must be one of {', '.join(MISFIRE_POLICIES)} or tiers(...), got {value!r}")
        return value, None
    if isinstance(value, MisfireTiers):
        return "tiers", value
    if isinstance(value, list | tuple) and value:
        try:
            return "tiers", tiers(*value)
        except TierError as exc:
            raise JobDefinitionError(job, "misfire", str(exc)) from None
    raise JobDefinitionError(job, "misfire", f"give a policy ({', '.join(MISFIRE_POLICIES)}) or "
                                             f"tiers(...), got {value!r}")


def _called_function(handler: object) -> object:
    """What runs when ``handler`` is called: through functools.partial, and an object's
    ``__call__`` (inspect already sees through bound methods)."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    if not inspect.isroutine(handler) and not inspect.isclass(handler):
        return inspect.getattr_static(type(handler), "__call__", handler)
    return handler


def is_async_handler(handler: object) -> bool:
    """Whether calling ``handler`` makes a coroutine to await (``async def``, a partial of
    one, an object whose ``__call__`` is one): such a job runs on the runner's event loop
    (runner/aio.py) with an AsyncJobContext."""
    return inspect.iscoroutinefunction(_called_function(handler))


def _refuse_generator_handler(job: str, handler: object) -> None:
    """Refuse a generator function (``def`` or ``async def`` with ``yield``): calling it runs
    none of its body."""
    target = _called_function(handler)
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        raise JobDefinitionError(
            job, "handler", "a generator function (it yields) runs none of its body when called; "
            "register a function that does its work before it returns")


def _interval_of(job: str, field_name: str, value: object) -> timedelta:
    try:
        return parse_interval(value, field=field_name)  # type: ignore[arg-type]
    except ScheduleError as exc:
        raise JobDefinitionError(job, field_name, str(exc)) from None


def _no_handler(ctx: Any) -> None:  # placeholder until the decorator receives it
    raise RuntimeError("handler not registered")
