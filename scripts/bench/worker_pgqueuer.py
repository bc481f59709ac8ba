"""pgqueuer side of the peer benchmarks, run as a subprocess under the benchmark virtualenv.

    worker_pgqueuer.py setup-throughput --dsn DSN --jobs N   install schema, enqueue N no-op jobs
    worker_pgqueuer.py drain --dsn DSN --batch-size B        a worker (QueueManager) draining them
    worker_pgqueuer.py setup-lag --dsn DSN                   install schema + the pick probe
    worker_pgqueuer.py schedule --dsn DSN --schedules N --record FILE [--cron EXPR]
                                                             a SchedulerManager with N schedules

Always through pgqueuer's psycopg driver (PsycopgDriver over psycopg.AsyncConnection), never
asyncpg. Workers take part in the start barrier (benchlib.barrier) and stop on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from importlib.metadata import version

import benchlib
import psycopg
from pgqueuer import PsycopgDriver, Queries, QueueManager, SchedulerManager
from pgqueuer.models import Job, Schedule

ENTRYPOINT = "bench_noop"
EVERY_SECOND = "* * * * * *"  # croniter's optional 6th field is seconds

# The schedule's slot (the instant it was due) is the row's next_run *before* pgqueuer's fetch
# moves it on; the dispatched Schedule only carries the new value. This probe keeps the old one.
PICK_PROBE = """
CREATE TABLE bench_schedule_picks (
    schedule_id bigint      NOT NULL,
    slot        timestamptz NOT NULL,
    picked_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION bench_record_schedule_pick() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'queued' AND NEW.status = 'picked' THEN
        INSERT INTO bench_schedule_picks (schedule_id, slot) VALUES (OLD.id, OLD.next_run);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER bench_record_schedule_pick AFTER UPDATE ON pgqueuer_schedules
    FOR EACH ROW EXECUTE FUNCTION bench_record_schedule_pick();
"""


async def connect(dsn: str) -> psycopg.AsyncConnection:
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True)


async def setup(dsn: str, jobs: int, probe: bool) -> dict[str, object]:
    async with await connect(dsn) as conn:
        queries = Queries(PsycopgDriver(conn))
        await queries.install()
        if probe:
            await conn.execute(PICK_PROBE)
        chunk = 5000
        for start in range(0, jobs, chunk):
            n = min(chunk, jobs - start)
            await queries.enqueue([ENTRYPOINT] * n, [None] * n, [0] * n)
    return {"peer": "pgqueuer", "version": version("pgqueuer"), "enqueued": jobs}


def stop_on_signals(event: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, event.set)


async def drain(dsn: str, batch_size: int) -> None:
    conn = await connect(dsn)
    qm = QueueManager(Queries(PsycopgDriver(conn)))

    @qm.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        return None

    stop_on_signals(qm.shutdown)
    await benchlib.barrier()
    try:
        await qm.run(batch_size=batch_size)
    finally:
        await conn.close()


async def schedule(dsn: str, schedules: int, record: str, cron: str) -> None:
    conn = await connect(dsn)
    sm = SchedulerManager(Queries(PsycopgDriver(conn)))
    log = benchlib.StartLog(record)

    def register(name: str) -> None:
        @sm.schedule(name, cron)
        async def tick(schedule: Schedule) -> None:
            log.record(schedule.id, None, time.time())

    for i in range(schedules):
        register(f"bench_tick_{i:04d}")

    stop_on_signals(sm.shutdown)
    await benchlib.barrier()
    try:
        await sm.run()
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("setup-throughput")
    p.add_argument("--dsn", required=True)
    p.add_argument("--jobs", type=int, required=True)
    p = sub.add_parser("drain")
    p.add_argument("--dsn", required=True)
    p.add_argument("--batch-size", type=int, default=10)
    p = sub.add_parser("setup-lag")
    p.add_argument("--dsn", required=True)
    p = sub.add_parser("schedule")
    p.add_argument("--dsn", required=True)
    p.add_argument("--schedules", type=int, required=True)
    p.add_argument("--record", required=True)
    p.add_argument("--cron", default=EVERY_SECOND)
    args = parser.parse_args()

    if args.cmd == "setup-throughput":
        print(json.dumps(asyncio.run(setup(args.dsn, args.jobs, probe=False))))
    elif args.cmd == "setup-lag":
        print(json.dumps(asyncio.run(setup(args.dsn, 0, probe=True))))
    elif args.cmd == "drain":
        asyncio.run(drain(args.dsn, args.batch_size))
    elif args.cmd == "schedule":
        asyncio.run(schedule(args.dsn, args.schedules, args.record, args.cron))
    else:  # pragma: no cover
        sys.exit(f"unknown command {args.cmd}")


if __name__ == "__main__":
    main()
