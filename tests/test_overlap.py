"""Overlap: may a slot start while an earlier slot of the same job and partition still runs?"""

from __future__ import annotations

import threading
from itertools import pairwise
from typing import Any

from runner import JobContext, JobDefinitionError, Runner
from tests.support import eventually, rows, scalar
from tests.test_worker import running


def blocking_app(overlap: str, release: threading.Event) -> Runner:
    app = Runner()

    @app.job("slow", every="1s", overlap=overlap)
    def slow(ctx: JobContext) -> None:
        if ctx.attempt == 1 and scalar_first(ctx):
            release.wait(10)  # the first run outlasts several slots

    return app


_first: dict[str, Any] = {}


def scalar_first(ctx: JobContext) -> bool:
    return _first.setdefault("slot", ctx.slot) == ctx.slot


def test_skip_records_overlapping_slots_with_reason(db_url: str) -> None:
    _first.clear()
    release = threading.Event()
    with running(blocking_app("skip", release), db_url):
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'skipped'") >= 2)
        release.set()
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 2)
    first = rows(db_url, "SELECT id, schedule_slot FROM runner.job_runs ORDER BY schedule_slot LIMIT 1")[0]
    skipped = rows(db_url, "SELECT schedule_slot, status_reason FROM runner.job_runs WHERE status = 'skipped'")
    assert all(slot > first[1] for slot, _ in skipped)
    assert all(reason == f"overlap=skip: run {first[0]} of an earlier slot was still running"
               for _, reason in skipped)


def test_wait_runs_each_slot_after_the_previous_one(db_url: str) -> None:
    _first.clear()
    release = threading.Event()
    with running(blocking_app("wait", release), db_url):
        eventually(lambda: scalar(db_url, "SELECT coalesce(extract(epoch FROM now() - min(schedule_slot)), 0)"
                                          " FROM runner.job_runs") > 3)
        assert scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'running'") == 1
        release.set()
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'") >= 5)
    got = rows(db_url, "SELECT schedule_slot, status, started_at, finished_at FROM runner.job_runs"
                       " WHERE status <> 'running' ORDER BY schedule_slot")
    assert {g[1] for g in got} == {"succeeded"}  # nothing skipped, nothing lost
    slots = [g[0] for g in got]
    assert slots == sorted(slots) and all((b - a).total_seconds() == 1 for a, b in pairwise(slots))
    for earlier, later in pairwise(got):
        assert later[2] >= earlier[3], "a slot started before the earlier one finished"


def test_allow_is_the_default_and_bad_values_are_refused() -> None:
    app = Runner()
    app.job("j", every="1s")(lambda ctx: None)
    assert app.jobs["j"].overlap == "allow"
    try:
        Runner().job("j", every="1s", overlap="sometimes")(lambda ctx: None)
    except JobDefinitionError as exc:
        assert exc.field == "overlap"
    else:
        raise AssertionError("overlap='sometimes' was accepted")


