"""A FastAPI service that carries its own runner: the jobs run inside the application's
process, started and stopped by its lifespan (runner/worker/inprocess.py).

    export RUNNER_DATABASE_URL=postgresql://app@db/app
    runner db upgrade
    uvicorn examples.fastapi_app:api

The same jobs can run beside the service instead, as usual: ``runner start --app
examples/fastapi_app.py:jobs``. Running in-process, the runner uses the application's logging
(configured below, or by uvicorn's ``--log-config``) and installs no signal handler: uvicorn
owns SIGTERM and SIGINT, and on either it runs the lifespan's exit, where the runner stops
claiming, lets running handlers finish for ``grace`` seconds and hands the rest over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI

from runner import AsyncJobContext, JobContext, Runner

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

jobs = Runner()


@jobs.job("refresh-rates", every="2s")
async def refresh_rates(ctx: AsyncJobContext) -> None:
    """An async job: awaits its I/O on the runner's event loop; ctx.db is an AsyncConnection
    committed with the run's success."""
    await asyncio.sleep(0.05)  # e.g. an httpx.AsyncClient call
    await ctx.db.execute("SELECT %s::timestamptz", (ctx.slot,))


@jobs.job("nightly-report", cron="0 3 * * *", timezone="Europe/Berlin")
def nightly_report(ctx: JobContext) -> None:
    """A plain job in the same app: runs on a handler thread."""
    ctx.db.execute("SELECT %s::date", (ctx.business_date,))


@contextlib.asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    async with jobs.running(os.environ.get("RUNNER_DATABASE_URL"), workers=4,
                            grace=float(os.environ.get("RUNNER_GRACE", "30"))) as runner:
        api.state.runner = runner
        yield


api = FastAPI(lifespan=lifespan)


@api.get("/health")
async def health() -> dict[str, Any]:
    runner = api.state.runner
    return {"runner": "running" if runner.running else "stopped", "jobs": sorted(jobs.jobs)}
