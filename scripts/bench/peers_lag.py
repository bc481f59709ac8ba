#!/usr/bin/env python3
"""Scheduling lag of the peers' periodic (cron) facilities: slot instant -> handler start.

For each target and each schedule count N: a fresh database (dropped first if present, dropped
again at the end), N schedules due every second (the finest granularity both peers offer: a
6-field cron, seconds last, parsed by croniter), TWO worker processes, and a no-op handler whose
first act is to record time.time() (one write(2) to a per-process file). Ticks whose slot falls
in a window of --seconds seconds, starting --warmup seconds after the workers are released, are
measured:

    lag = handler start - slot instant

    pgqueuer       SchedulerManager.schedule(); the slot is the schedule row's next_run just
                   before pgqueuer's fetch moved it on (kept by a probe trigger, see
                   worker_pgqueuer.py), the handler runs in the scheduler process itself.
    procrastinate  App.periodic(); the slot is the `timestamp` the deferrer gives the job; the
                   handler runs in a worker after the job went through the queue.

After the window the harness polls (no fixed sleeps) until every schedule has started a tick
slotted after the window, or --settle-timeout passes; slots in the window that never started
count as not run. Reported: p50/p95/p99/max lag, ticks run vs expected (N x seconds), and
duplicate starts of one slot. Usage:

    .venv-bench/bin/python scripts/bench/peers_lag.py                         # 100 schedules, 20 s
    .venv-bench/bin/python scripts/bench/peers_lag.py --schedules 100 1000
    .venv-bench/bin/python scripts/bench/peers_lag.py --schedules 10 --seconds 5 --json
"""

from __future__ import annotations

import argparse
import bisect
import collections
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib
import psycopg
from benchlib import BenchError

HERE = Path(__file__).resolve().parent


@dataclasses.dataclass(frozen=True)
class Tick:
    key: str  # which schedule
    slot: float  # epoch seconds the tick was due
    start: float  # epoch seconds the handler started


# --------------------------------------------------------------------------------------------
# targets


class LagTarget:
    """One scheduler to measure. Subclass for a new system (our runner) and register_target().

    The harness calls setup() on the fresh database, starts `workers` processes from
    worker_argv() (each given its own record file), and calls ticks() repeatedly while settling.
    """

    name: str = "?"
    peer: str = "?"
    database: str = "bench_lag"
    barrier: bool = True
    granularity_s: float = 1.0
    facility: str = "?"

    def setup(self, dsn: str) -> dict[str, Any]:
        raise NotImplementedError

    def worker_argv(self, dsn: str, index: int, schedules: int, record: Path, period_s: int) -> list[str]:
        """Command for worker `index`: `schedules` schedules due every `period_s` (1 or 60) s."""
        raise NotImplementedError

    def ticks(self, conn: psycopg.Connection, records: list[Path]) -> list[Tick]:
        raise NotImplementedError


class PgqueuerLag(LagTarget):
    name = peer = "pgqueuer"
    database = "bench_pgqueuer"
    facility = "SchedulerManager.schedule cron (psycopg driver)"

    def setup(self, dsn: str) -> dict[str, Any]:
        return benchlib.run_helper(
            [benchlib.bench_python(), str(HERE / "worker_pgqueuer.py"), "setup-lag", "--dsn", dsn]
        )

    def worker_argv(self, dsn: str, index: int, schedules: int, record: Path, period_s: int) -> list[str]:
        return [
            benchlib.bench_python(),
            str(HERE / "worker_pgqueuer.py"),
            "schedule",
            "--dsn",
            dsn,
            "--schedules",
            str(schedules),
            "--record",
            str(record),
            "--cron",
            cron_for(period_s),
        ]

    def ticks(self, conn: psycopg.Connection, records: list[Path]) -> list[Tick]:
        picks: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
        for sid, slot, picked in conn.execute(
            "SELECT schedule_id, extract(epoch FROM slot)::float8, extract(epoch FROM picked_at)::float8"
            " FROM bench_schedule_picks ORDER BY picked_at"
        ):
            picks[str(sid)].append((picked, slot))
        out = []
        for sid, _, start in benchlib.read_start_logs(records):
            mine = picks.get(sid, [])
            # The pick that dispatched this start: the latest one of this schedule before it.
            i = bisect.bisect_right(mine, (start, math.inf)) - 1
            if i >= 0:
                out.append(Tick(sid, mine[i][1], start))
        return out


class ProcrastinateLag(LagTarget):
    name = peer = "procrastinate"
    database = "bench_procrastinate"
    facility = "App.periodic cron (psycopg connector, worker concurrency 1)"

    def setup(self, dsn: str) -> dict[str, Any]:
        return benchlib.run_helper(
            [benchlib.bench_python(), str(HERE / "worker_procrastinate.py"), "setup-lag", "--dsn", dsn]
        )

    def worker_argv(self, dsn: str, index: int, schedules: int, record: Path, period_s: int) -> list[str]:
        return [
            benchlib.bench_python(),
            str(HERE / "worker_procrastinate.py"),
            "schedule",
            "--dsn",
            dsn,
            "--schedules",
            str(schedules),
            "--record",
            str(record),
            "--cron",
            cron_for(period_s),
        ]

    def ticks(self, conn: psycopg.Connection, records: list[Path]) -> list[Tick]:
        return [
            Tick(key, float(slot), start) for key, slot, start in benchlib.read_start_logs(records) if slot
        ]


def cron_for(period_s: int) -> str:
    """Cron text for 'every period_s seconds' in the croniter dialect both peers use."""
    if period_s == 1:
        return "* * * * * *"  # the optional 6th field is seconds
    if period_s == 60:
        return "* * * * *"
    raise ValueError(f"unsupported period {period_s}s (1 or 60)")


TARGETS: dict[str, LagTarget] = {}
DEFAULT_TARGETS: list[str] = []


def register_target(target: LagTarget, default: bool = True) -> None:
    TARGETS[target.name] = target
    if default and target.name not in DEFAULT_TARGETS:
        DEFAULT_TARGETS.append(target.name)


register_target(PgqueuerLag())
register_target(ProcrastinateLag())


# --------------------------------------------------------------------------------------------
# one measurement


@dataclasses.dataclass
class LagRun:
    target: str
    schedules: int
    seconds: int
    expected: int
    run: int
    duplicates: int
    lags_s: list[float]
    settled: bool
    info: dict[str, Any]


def measure(
    name: str,
    schedules: int,
    seconds: int,
    dsn: str = benchlib.DEFAULT_DSN,
    workers: int = 2,
    warmup: float = 3.0,
    settle_timeout: float = 30.0,
    period_s: int = 1,
) -> LagRun:
    target = TARGETS[name]
    with benchlib.scratch_dir(f"bench-lag-{name}-") as logdir:
        db_dsn = benchlib.recreate_database(dsn, target.database)
        group = benchlib.Workers(name, logdir)
        records = [logdir / f"starts-{i}.tsv" for i in range(workers)]
        try:
            info = target.setup(db_dsn)
            with psycopg.connect(db_dsn, autocommit=True) as conn:
                for i in range(workers):
                    group.spawn(target.worker_argv(db_dsn, i, schedules, records[i], period_s))
                if target.barrier:
                    group.wait_ready()
                released = group.go()
                t0 = float(math.ceil(released + warmup))
                t_end = t0 + seconds
                slots = [float(x) for x in range(math.ceil(t0 / period_s) * period_s, int(t_end), period_s)]
                if not slots:
                    raise BenchError(f"a {seconds}s window holds no {period_s}s slot; lengthen --seconds")
                # Settled once every schedule started a slot past the last one in the window (for
                # 1 s periods one more, so a slower worker's start of an earlier slot is not missed).
                past = slots[-1] + (period_s if period_s == 1 else 0)
                # The window is time-based by definition; the processes are watched meanwhile.
                while time.time() < past:
                    group.check_alive()
                    time.sleep(0.2)

                def settled() -> bool:
                    last: dict[str, float] = {}
                    for tick in target.ticks(conn, records):
                        last[tick.key] = max(last.get(tick.key, -math.inf), tick.slot)
                    return len(last) >= schedules and min(last.values()) >= past

                try:
                    benchlib.poll_until(
                        settled,
                        timeout=settle_timeout,
                        interval=0.25,
                        what="every schedule to pass the window",
                        alive=group.check_alive,
                    )
                    ok = True
                except BenchError:
                    ok = False
                ticks = target.ticks(conn, records)
            group.stop()
        finally:
            group.stop(grace=2.0)
            benchlib.drop_database(dsn, target.database)

    in_window = [t for t in ticks if t0 <= t.slot < t_end]
    by_slot = collections.Counter((t.key, t.slot) for t in in_window)
    first: dict[tuple[str, float], float] = {}
    for t in in_window:
        k = (t.key, t.slot)
        first[k] = min(first.get(k, math.inf), t.start)
    return LagRun(
        target=name,
        schedules=schedules,
        seconds=seconds,
        expected=schedules * len(slots),
        run=len(by_slot),
        duplicates=sum(c - 1 for c in by_slot.values()),
        lags_s=[start - slot for (_, slot), start in first.items()],
        settled=ok,
        info=info,
    )


def summarize(runs: list[LagRun]) -> dict[str, Any]:
    lags = [x for r in runs for x in r.lags_s]
    ms = [x * 1000.0 for x in lags]
    return {
        "target": runs[0].target,
        "schedules": runs[0].schedules,
        "seconds": runs[0].seconds,
        "runs": len(runs),
        "expected_ticks": sum(r.expected for r in runs),
        "ticks_run": sum(r.run for r in runs),
        "duplicate_starts": sum(r.duplicates for r in runs),
        "settled": all(r.settled for r in runs),
        "p50_ms": benchlib.percentile(ms, 50),
        "p95_ms": benchlib.percentile(ms, 95),
        "p99_ms": benchlib.percentile(ms, 99),
        "max_ms": max(ms) if ms else math.nan,
        "min_ms": min(ms) if ms else math.nan,
        "p99_ms_per_run": [benchlib.percentile([x * 1000.0 for x in r.lags_s], 99) for r in runs],
    }


# --------------------------------------------------------------------------------------------
# CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--schedules", type=int, nargs="+", default=[100], help="schedule counts (default 100)"
    )
    parser.add_argument("--seconds", type=int, default=20, help="measured window in seconds (default 20)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per target and count; lags are pooled (default 1)"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes per target (default 2)")
    parser.add_argument(
        "--every",
        choices=["second", "minute"],
        default="second",
        help="schedule period (default second, the finest both peers offer; minute is the SPEC's load)",
    )
    parser.add_argument(
        "--warmup", type=float, default=3.0, help="seconds after start before the window (default 3)"
    )
    parser.add_argument(
        "--settle-timeout", type=float, default=30.0, help="max wait after the window (default 30)"
    )
    parser.add_argument(
        "--dsn", default=benchlib.DEFAULT_DSN, help="admin DSN; bench databases are created beside it"
    )
    parser.add_argument(
        "--targets", nargs="+", default=None, metavar="NAME", help=f"default: {' '.join(DEFAULT_TARGETS)}"
    )
    parser.add_argument(
        "--json", action="store_true", help="print results as JSON on stdout (progress on stderr)"
    )
    args = parser.parse_args(argv)
    names = args.targets or list(DEFAULT_TARGETS)
    for name in names:
        if name not in TARGETS:
            parser.error(f"unknown target {name!r}; known: {', '.join(TARGETS)}")

    period_s = 60 if args.every == "minute" else 1
    benchlib.install_cleanup()
    env = benchlib.environment(args.dsn)
    results = []
    for n in args.schedules:
        for name in names:
            runs = []
            for k in range(args.repeat):
                run = measure(
                    name, n, args.seconds, args.dsn, args.workers, args.warmup, args.settle_timeout, period_s
                )
                runs.append(run)
                p99 = benchlib.percentile(run.lags_s, 99) * 1000.0
                print(
                    f"[{name} x{n} {k + 1}/{args.repeat}] ticks {run.run}/{run.expected}, p99 {p99:.0f} ms"
                    + ("" if run.settled else " (did not settle)"),
                    file=sys.stderr,
                    flush=True,
                )
            summary = summarize(runs)
            target = TARGETS[name]
            summary.update(
                peer=target.peer,
                version=runs[0].info.get("version"),
                facility=target.facility,
                granularity_s=target.granularity_s,
            )
            results.append(summary)

    report = {
        "benchmark": "peer_scheduling_lag",
        "seconds": args.seconds,
        "period_s": period_s,
        "workers": args.workers,
        "repeat": args.repeat,
        "environment": env,
        "results": results,
    }
    if args.json:
        print(json.dumps(benchlib.json_safe(report), indent=2))
    else:
        print(
            f"\nScheduling lag (slot instant -> handler start): every-{args.every} schedules, "
            f"{args.seconds}s window, {args.workers} worker processes, {args.repeat} run(s); "
            f"PostgreSQL {env['postgres']}, {env['cpus']} CPUs"
        )
        benchlib.print_table(
            [
                "target",
                "version",
                "schedules",
                "ticks run/expected",
                "dup",
                "p50 ms",
                "p95 ms",
                "p99 ms",
                "max ms",
            ],
            [
                [
                    r["target"],
                    r["version"],
                    r["schedules"],
                    f"{r['ticks_run']}/{r['expected_ticks']}" + ("" if r["settled"] else " *"),
                    r["duplicate_starts"],
                    r["p50_ms"],
                    r["p95_ms"],
                    r["p99_ms"],
                    r["max_ms"],
                ]
                for r in results
            ],
        )
        if not all(r["settled"] for r in results):
            print("* did not settle within --settle-timeout: some schedules never passed the window")
        for name in names:
            t = TARGETS[name]
            print(
                f"  {name}: {t.facility} (here '{cron_for(period_s)}'); finest period {t.granularity_s:g} s"
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
