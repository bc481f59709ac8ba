"""Job definitions are validated when registered: one clear error naming job and field."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runner import JobDefinitionError, Runner
from runner.model.app import Backoff


def noop(ctx: Any) -> None: ...


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * *"}, "cron"),
        ({"cron": "0 2 * * *", "timezone": "Mars/Olympus_Mons"}, "timezone"),
        ({"cron": "0 2 * * *", "timezone": "../../etc/passwd"}, "timezone"),
        ({"cron": "0 2 * * *", "every": "1m"}, "schedule"),
        ({}, "schedule"),
        ({"every": "0s"}, "every"),
        ({"every": "-5s"}, "every"),
        ({"every": "soon"}, "every"),
        ({"every": "1m", "max_attempts": 0}, "max_attempts"),
        ({"every": "1m", "partitions": []}, "partitions"),
        ({"every": "1m", "partitions": ["a", "a"]}, "partitions"),
        ({"every": "1m", "partitions": ["a", ""]}, "partitions"),
        ({"every": "1m", "partitions": "abc"}, "partitions"),
        ({"every": "1m", "backoff": "never"}, "backoff"),
        ({"every": "1m", "backoff": {"base": "1s", "factor": 0.5}}, "backoff"),
        ({"every": "1m", "permanent": [42]}, "permanent"),
        ({"every": "1m", "track_from": datetime(2026, 1, 1)}, "track_from"),
    ],
)
def test_invalid_definitions_name_job_and_field(kwargs: dict[str, Any], field: str) -> None:
    app = Runner()
    with pytest.raises(JobDefinitionError) as info:
        app.job("settle", **kwargs)(noop)
    assert info.value.job == "settle" and info.value.field == field
    assert str(info.value).startswith(f"job 'settle': {field}: ")
    assert "\n" not in str(info.value)
    assert app.jobs == {}


@pytest.mark.parametrize("name", ["", "   ", None, "a\nb", "x" * 201])
def test_bad_names(name: Any) -> None:
    with pytest.raises(JobDefinitionError) as info:
        Runner().job(name, every="1m")(noop)
    assert info.value.field == "name"


def test_duplicate_name_is_refused() -> None:
    app = Runner()
    app.job("dup", every="1m")(noop)
    with pytest.raises(JobDefinitionError, match="already registered"):
        app.job("dup", cron="* * * * *")(noop)
    assert list(app.jobs) == ["dup"]


def test_valid_definition_keeps_its_options() -> None:
    app = Runner()
    start = datetime(2026, 1, 1, tzinfo=UTC)

    @app.job("settle", cron="0 2 * * *", timezone="Asia/Seoul", partitions=[1, "b"], max_attempts=5,
             version=3, backoff={"base": "2s", "cap": "1m", "jitter": 0}, owner="payments",
             track_from=start)
    def settle(ctx: Any) -> None: ...

    job = app.jobs["settle"]
    assert job.handler is settle
    assert job.partitions == ("1", "b") and job.partitions_for(start) == ["1", "b"]
    assert (job.max_attempts, job.version, job.owner, job.track_from) == (5, "3", "payments", start)
    assert job.backoff == Backoff(timedelta(seconds=2), 2.0, timedelta(minutes=1), 0.0)
    assert [job.backoff.delay(n).total_seconds() for n in (1, 2, 3, 6, 7)] == [2, 4, 8, 60, 60]


def test_dynamic_partitions_are_checked_per_slot() -> None:
    app = Runner()
    app.job("dyn", every="1m", partitions=lambda slot: [slot.minute, "x"])(noop)
    job = app.jobs["dyn"]
    assert job.partitions_for(datetime(2026, 1, 1, 0, 7, tzinfo=UTC)) == ["7", "x"]
    bad = Runner()
    bad.job("dyn", every="1m", partitions=lambda slot: ["x", "x"])(noop)
    with pytest.raises(JobDefinitionError, match="duplicate partition key"):
        bad.jobs["dyn"].partitions_for(datetime(2026, 1, 1, tzinfo=UTC))


def test_backoff_jitter_stays_within_bounds() -> None:
    import random

    b = Backoff(timedelta(seconds=10), 2.0, timedelta(hours=1), 0.2)
    rng = random.Random(7)
    delays = [b.delay(3, rng).total_seconds() for _ in range(200)]
    assert min(delays) >= 32 and max(delays) <= 48 and len(set(delays)) > 100


def test_window_rules() -> None:
    app = Runner()
    slot = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)
    app.job("default", cron="0 2 * * *")(noop)
    app.job("fixed", cron="0 2 * * *", window="6h")(noop)
    app.job("custom", cron="0 2 * * *",
            window=lambda s: (s - timedelta(days=7), s - timedelta(days=1)))(noop)
    app.job("broken", cron="0 2 * * *", window=lambda s: (s, s - timedelta(hours=1)))(noop)
    jobs = app.jobs
    assert jobs["default"].window_for(slot) == (slot - timedelta(days=1), slot)
    assert jobs["fixed"].window_for(slot) == (slot - timedelta(hours=6), slot)
    assert jobs["custom"].window_for(slot) == (slot - timedelta(days=7), slot - timedelta(days=1))
    with pytest.raises(JobDefinitionError, match="after its end"):
        jobs["broken"].window_for(slot)
    with pytest.raises(JobDefinitionError) as info:
        Runner().job("bad", cron="0 2 * * *", window="soon")(noop)
    assert info.value.field == "window"


# ------------------------------------------------------------------------------------------
# handlers that would not do their work when called


async def async_handler(ctx: Any) -> None: ...


async def async_with_option(option: int, ctx: Any) -> None: ...


class AsyncCall:
    async def __call__(self, ctx: Any) -> None: ...

    async def method(self, ctx: Any) -> None: ...


def generator_handler(ctx: Any) -> Any:
    yield ctx


async def async_generator_handler(ctx: Any) -> Any:
    yield ctx


@pytest.mark.parametrize("handler", [
    async_handler, functools.partial(async_with_option, 1), functools.partial(functools.partial(async_with_option, 1)),
    AsyncCall(), AsyncCall().method, functools.partial(AsyncCall()),
], ids=["async def", "partial", "partial of partial", "async __call__", "async method", "partial of object"])
def test_async_def_handlers_are_registered_as_async(handler: Any) -> None:
    app = Runner()
    app.job("settle", every="1m")(handler)
    assert app.jobs["settle"].is_async


@pytest.mark.parametrize("handler", [generator_handler, async_generator_handler,
                                     functools.partial(generator_handler)])
def test_generator_function_handlers_are_refused(handler: Any) -> None:
    app = Runner()
    with pytest.raises(JobDefinitionError) as info:
        app.job("settle", every="1m")(handler)
    assert info.value.field == "handler" and "generator" in str(info.value)
    assert app.jobs == {}


class SyncCall:
    def __call__(self, ctx: Any) -> None: ...


@pytest.mark.parametrize("handler", [noop, functools.partial(noop), SyncCall(), lambda ctx: None],
                         ids=["def", "partial", "object", "lambda"])
def test_plain_callables_are_accepted(handler: Any) -> None:
    app = Runner()
    app.job("settle", every="1m")(handler)
    assert app.jobs["settle"].handler is handler
    assert not app.jobs["settle"].is_async
