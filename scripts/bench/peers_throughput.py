#!/usr/bin/env python3
"""Throughput of the peer job runners: no-op jobs completed per second by two worker processes.

For each target: a fresh database (dropped first if present, dropped again at the end), the
peer's own schema, N no-op jobs enqueued through the peer's own API, then TWO worker
subprocesses draining them. The figure is

    jobs / (last completion - first start)

with both instants read from the peer's own tables once the peer's tables say that all N are
done (polled, never a fixed sleep):

    pgqueuer       pgqueuer_log: min(created) of 'picked' rows .. max(created) of 'successful'
    procrastinate  procrastinate_events: min(at) of 'started' .. max(at) of 'succeeded'

A wall-clock figure (release of the workers' start barrier until the poller saw "all done") is
reported beside it. Usage:

    .venv-bench/bin/python scripts/bench/peers_throughput.py                  # 10,000 jobs x3
    .venv-bench/bin/python scripts/bench/peers_throughput.py --jobs 1000 --repeat 1
    .venv-bench/bin/python scripts/bench/peers_throughput.py --targets pgqueuer --json

Other harnesses import it: ``run_peer_throughput(name, jobs, dsn) -> float`` gives one sample,
and ``register_target()`` adds a target (our own runner) that the CLI then runs alongside.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib
import psycopg
from benchlib import BenchError

HERE = Path(__file__).resolve().parent
WORKERS = 2


# --------------------------------------------------------------------------------------------
# targets


@dataclasses.dataclass
class Outcome:
    succeeded: int
    failed: int
    first_start: datetime | None
    last_done: datetime | None


class ThroughputTarget:
    """One thing to measure. Subclass for a new system (e.g. our runner) and register_target().

    The harness calls, in order: setup() once the fresh database exists, worker_argv() for each
    of the WORKERS processes, remaining() while polling, outcome() once remaining() is 0.
    Workers whose `barrier` is true print READY when connected and wait for a line on stdin.
    """

    name: str = "?"
    peer: str = "?"
    database: str = "bench_throughput"
    barrier: bool = True
    params: dict[str, Any] = {}  # noqa: RUF012 - read-only default, instances assign their own

    def setup(self, dsn: str, jobs: int) -> dict[str, Any]:
        raise NotImplementedError

    def worker_argv(self, dsn: str, index: int) -> list[str]:
        raise NotImplementedError

    def remaining(self, conn: psycopg.Connection) -> int:
        raise NotImplementedError

    def outcome(self, conn: psycopg.Connection) -> Outcome:
        raise NotImplementedError


class PgqueuerTarget(ThroughputTarget):
    peer = "pgqueuer"
    database = "bench_pgqueuer"

    def __init__(self, name: str, batch_size: int) -> None:
        self.name = name
        self.batch_size = batch_size
        self.params = {"driver": "psycopg", "batch_size": batch_size}

    def setup(self, dsn: str, jobs: int) -> dict[str, Any]:
        script = str(HERE / "worker_pgqueuer.py")
        return benchlib.run_helper(
            [benchlib.bench_python(), script, "setup-throughput", "--dsn", dsn, "--jobs", str(jobs)]
        )

    def worker_argv(self, dsn: str, index: int) -> list[str]:
        script = str(HERE / "worker_pgqueuer.py")
        return [benchlib.bench_python(), script, "drain", "--dsn", dsn, "--batch-size", str(self.batch_size)]

    def remaining(self, conn: psycopg.Connection) -> int:
        # Finished jobs are deleted from the queue table (and logged), so this is the backlog.
        row = conn.execute("SELECT count(*) FROM pgqueuer").fetchone()
        return int(row[0]) if row else 0

    def outcome(self, conn: psycopg.Connection) -> Outcome:
        row = conn.execute(
            """SELECT count(*) FILTER (WHERE status = 'successful'),
                      count(*) FILTER (WHERE status IN ('exception', 'failed', 'canceled')),
                      min(created) FILTER (WHERE status = 'picked'),
                      max(created) FILTER (WHERE status = 'successful')
               FROM pgqueuer_log"""
        ).fetchone()
        assert row is not None
        return Outcome(int(row[0]), int(row[1]), row[2], row[3])


class ProcrastinateTarget(ThroughputTarget):
    peer = "procrastinate"
    database = "bench_procrastinate"

    def __init__(self, name: str, concurrency: int) -> None:
        self.name = name
        self.concurrency = concurrency
        self.params = {"connector": "psycopg", "concurrency": concurrency}

    def setup(self, dsn: str, jobs: int) -> dict[str, Any]:
        script = str(HERE / "worker_procrastinate.py")
        return benchlib.run_helper(
            [benchlib.bench_python(), script, "setup-throughput", "--dsn", dsn, "--jobs", str(jobs)]
        )

    def worker_argv(self, dsn: str, index: int) -> list[str]:
        script = str(HERE / "worker_procrastinate.py")
        return [
            benchlib.bench_python(),
            script,
            "drain",
            "--dsn",
            dsn,
            "--concurrency",
            str(self.concurrency),
        ]

    def remaining(self, conn: psycopg.Connection) -> int:
        row = conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
        ).fetchone()
        return int(row[0]) if row else 0

    def outcome(self, conn: psycopg.Connection) -> Outcome:
        row = conn.execute(
            """SELECT (SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'),
                      (SELECT count(*) FROM procrastinate_jobs
                        WHERE status IN ('failed', 'aborted', 'cancelled')),
                      (SELECT min(at) FROM procrastinate_events WHERE type = 'started'),
                      (SELECT max(at) FROM procrastinate_events WHERE type = 'succeeded')"""
        ).fetchone()
        assert row is not None
        return Outcome(int(row[0]), int(row[1]), row[2], row[3])


TARGETS: dict[str, ThroughputTarget] = {}
DEFAULT_TARGETS = ["pgqueuer", "pgqueuer-b100", "procrastinate"]


def register_target(target: ThroughputTarget, default: bool = True) -> None:
    """Make `target` available by name (and, if `default`, part of the CLI's default set)."""
    TARGETS[target.name] = target
    if default and target.name not in DEFAULT_TARGETS:
        DEFAULT_TARGETS.append(target.name)


# pgqueuer's QueueManager.run(batch_size=10) is its default; 100 is the variant the issue asks for.
register_target(PgqueuerTarget("pgqueuer", batch_size=10))
register_target(PgqueuerTarget("pgqueuer-b100", batch_size=100))
# procrastinate's worker default is concurrency=1; c10 is there for context, not in the default set.
register_target(ProcrastinateTarget("procrastinate", concurrency=1))
register_target(ProcrastinateTarget("procrastinate-c10", concurrency=10), default=False)


# --------------------------------------------------------------------------------------------
# one measurement


@dataclasses.dataclass
class Sample:
    target: str
    jobs: int
    jobs_per_s: float  # jobs / (last completion - first start), from the peer's tables
    window_s: float
    wall_s: float  # barrier release -> poller saw all done
    info: dict[str, Any]

    @property
    def wall_jobs_per_s(self) -> float:
        return self.jobs / self.wall_s if self.wall_s > 0 else float("nan")


def measure(
    name: str,
    jobs: int,
    dsn: str = benchlib.DEFAULT_DSN,
    workers: int = WORKERS,
    analyze: bool = True,
) -> Sample:
    try:
        target = TARGETS[name]
    except KeyError:
        raise BenchError(f"unknown target {name!r}; known: {', '.join(TARGETS)}") from None
    with benchlib.scratch_dir(f"bench-{name}-") as logdir:
        db_dsn = benchlib.recreate_database(dsn, target.database)
        group = benchlib.Workers(name, logdir)
        try:
            info = target.setup(db_dsn, jobs)
            with psycopg.connect(db_dsn, autocommit=True) as conn:
                if analyze:
                    # Planner statistics for the freshly loaded queue, as autovacuum would give a
                    # long-lived one; without them a peer's dequeue plan can be far off (README).
                    conn.execute("ANALYZE")
                if target.remaining(conn) != jobs:
                    raise BenchError(
                        f"{name}: expected {jobs} queued jobs after setup, found {target.remaining(conn)}"
                    )
                for i in range(workers):
                    group.spawn(target.worker_argv(db_dsn, i))
                if target.barrier:
                    group.wait_ready()
                released = group.go()
                benchlib.poll_until(
                    lambda: target.remaining(conn) == 0,
                    timeout=max(120.0, jobs / 20.0),
                    interval=0.05,
                    what=f"{name}: all {jobs} jobs done",
                    alive=group.check_alive,
                )
                seen = time.time()
                outcome = target.outcome(conn)
            group.stop()
        finally:
            group.stop(grace=2.0)
            benchlib.drop_database(dsn, target.database)
    if outcome.succeeded != jobs or outcome.failed:
        raise BenchError(f"{name}: {outcome.succeeded} succeeded, {outcome.failed} failed, of {jobs}")
    if outcome.first_start is None or outcome.last_done is None:
        raise BenchError(f"{name}: no start/completion instants in the peer's tables")
    window = (outcome.last_done - outcome.first_start).total_seconds()
    return Sample(
        target=name,
        jobs=jobs,
        jobs_per_s=jobs / window if window > 0 else float("inf"),
        window_s=window,
        wall_s=seen - released,
        info=info,
    )


def run_peer_throughput(name: str, jobs: int = 10_000, dsn: str = benchlib.DEFAULT_DSN) -> float:
    """One sample: jobs completed per second by two worker processes of target `name`.

    `dsn` is an admin DSN: the target's own database is created beside it and dropped after.
    """
    return measure(name, jobs, dsn).jobs_per_s


# --------------------------------------------------------------------------------------------
# CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="no-op jobs per run (default 10000)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per target; the median is reported (default 3)"
    )
    parser.add_argument(
        "--dsn", default=benchlib.DEFAULT_DSN, help="admin DSN; bench databases are created beside it"
    )
    parser.add_argument(
        "--targets",
        nargs="+",
        default=None,
        metavar="NAME",
        help=f"default: {' '.join(DEFAULT_TARGETS)}; also known: "
        + " ".join(n for n in TARGETS if n not in DEFAULT_TARGETS),
    )
    parser.add_argument(
        "--no-analyze",
        dest="analyze",
        action="store_false",
        help="skip the ANALYZE between enqueue and start (cold planner statistics)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print results as JSON on stdout (progress on stderr)"
    )
    args = parser.parse_args(argv)
    names = args.targets or list(DEFAULT_TARGETS)
    for name in names:
        if name not in TARGETS:
            parser.error(f"unknown target {name!r}; known: {', '.join(TARGETS)}")

    benchlib.install_cleanup()
    env = benchlib.environment(args.dsn)
    results = []
    for name in names:
        samples: list[Sample] = []
        for k in range(args.repeat):
            sample = measure(name, args.jobs, args.dsn, analyze=args.analyze)
            samples.append(sample)
            print(
                f"[{name} {k + 1}/{args.repeat}] {sample.jobs_per_s:,.0f} jobs/s "
                f"({sample.window_s:.2f}s window, wall {sample.wall_s:.2f}s)",
                file=sys.stderr,
                flush=True,
            )
        target = TARGETS[name]
        results.append(
            {
                "target": name,
                "peer": target.peer,
                "version": samples[0].info.get("version"),
                "params": target.params,
                "median_jobs_per_s": benchlib.median([s.jobs_per_s for s in samples]),
                "samples_jobs_per_s": [s.jobs_per_s for s in samples],
                "windows_s": [s.window_s for s in samples],
                "median_wall_jobs_per_s": benchlib.median([s.wall_jobs_per_s for s in samples]),
                "samples_wall_jobs_per_s": [s.wall_jobs_per_s for s in samples],
            }
        )

    report = {
        "benchmark": "peer_throughput",
        "jobs": args.jobs,
        "workers": WORKERS,
        "repeat": args.repeat,
        "analyze_before_start": args.analyze,
        "environment": env,
        "results": results,
    }
    if args.json:
        print(json.dumps(benchlib.json_safe(report), indent=2))
    else:
        print(
            f"\nThroughput: {args.jobs:,} no-op jobs, {WORKERS} worker processes, {args.repeat} run(s) each; "
            f"PostgreSQL {env['postgres']}, {env['cpus']} CPUs"
            + ("" if args.analyze else ", no ANALYZE before start")
        )
        benchlib.print_table(
            ["target", "version", "params", "median jobs/s", "samples jobs/s", "wall jobs/s (median)"],
            [
                [
                    r["target"],
                    r["version"],
                    " ".join(f"{k}={v}" for k, v in r["params"].items()),
                    r["median_jobs_per_s"],
                    ", ".join(f"{x:,.0f}" for x in r["samples_jobs_per_s"]),
                    r["median_wall_jobs_per_s"],
                ]
                for r in results
            ],
        )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
