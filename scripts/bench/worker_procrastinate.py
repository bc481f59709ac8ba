"""procrastinate side of the peer benchmarks, run as a subprocess under the benchmark virtualenv.

    worker_procrastinate.py setup-throughput --dsn DSN --jobs N   apply schema, defer N no-op jobs
    worker_procrastinate.py drain --dsn DSN [--concurrency C]     a worker draining them
    worker_procrastinate.py setup-lag --dsn DSN                   apply schema
    worker_procrastinate.py schedule --dsn DSN --schedules N --record FILE [--concurrency C] [--cron EXPR]
                                       a worker with N periodic tasks (its periodic deferrer
                                       runs inside the worker, as in procrastinate's design)

Always through procrastinate's PsycopgConnector (psycopg 3 async pool). Workers take part in
the start barrier (benchlib.barrier) and stop on SIGTERM (procrastinate's own handler).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from importlib.metadata import version

import benchlib
from procrastinate import App, PsycopgConnector

EVERY_SECOND = "* * * * * *"  # procrastinate: "optionally add a 6th column for seconds"


def make_app(dsn: str) -> App:
    return App(connector=PsycopgConnector(conninfo=dsn))


async def setup(dsn: str, jobs: int) -> dict[str, object]:
    app = make_app(dsn)

    @app.task(name="bench_noop")
    async def noop() -> None:
        return None

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        chunk = 5000
        for start in range(0, jobs, chunk):
            await noop.batch_defer_async(*({} for _ in range(min(chunk, jobs - start))))
    return {"peer": "procrastinate", "version": version("procrastinate"), "enqueued": jobs}


async def drain(dsn: str, concurrency: int) -> None:
    app = make_app(dsn)

    @app.task(name="bench_noop")
    async def noop() -> None:
        return None

    async with app.open_async():
        await benchlib.barrier()
        await app.run_worker_async(concurrency=concurrency, install_signal_handlers=True)


async def schedule(dsn: str, schedules: int, record: str, concurrency: int, cron: str) -> None:
    app = make_app(dsn)
    log = benchlib.StartLog(record)

    @app.task(name="bench_tick")
    async def tick(timestamp: int, sid: int) -> None:
        log.record(sid, timestamp, time.time())

    for i in range(schedules):
        app.periodic(cron=cron, periodic_id=f"s{i:04d}", task_kwargs={"sid": i})(tick)

    async with app.open_async():
        await benchlib.barrier()
        await app.run_worker_async(concurrency=concurrency, install_signal_handlers=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("setup-throughput")
    p.add_argument("--dsn", required=True)
    p.add_argument("--jobs", type=int, required=True)
    p = sub.add_parser("drain")
    p.add_argument("--dsn", required=True)
    p.add_argument("--concurrency", type=int, default=1)
    p = sub.add_parser("setup-lag")
    p.add_argument("--dsn", required=True)
    p = sub.add_parser("schedule")
    p.add_argument("--dsn", required=True)
    p.add_argument("--schedules", type=int, required=True)
    p.add_argument("--record", required=True)
    p.add_argument("--cron", default=EVERY_SECOND)
    p.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args()

    # procrastinate logs every job at INFO; that I/O is not what we measure.
    logging.basicConfig(level=logging.WARNING)
    if args.cmd == "setup-throughput":
        print(json.dumps(asyncio.run(setup(args.dsn, args.jobs))))
    elif args.cmd == "setup-lag":
        print(json.dumps(asyncio.run(setup(args.dsn, 0))))
    elif args.cmd == "drain":
        asyncio.run(drain(args.dsn, args.concurrency))
    elif args.cmd == "schedule":
        asyncio.run(schedule(args.dsn, args.schedules, args.record, args.concurrency, args.cron))


if __name__ == "__main__":
    main()
