"""Scheduling lag of `runner`: N jobs due at the same instant every second.

    python scripts/bench/runner_lag.py [--jobs 100 1000] [--seconds 20] [--processes 2] [--repeat 3] [--async]

Starts the runner processes, lets them run for the window, stops them, and reads from the
ledger, per run, lag = attempt start (the claim statement's database clock) - slot instant,
over the slots fully inside the window. Prints p50/p95/p99/max, the slots expected and run,
and for each slot the time until all N of its runs had started; also when each handler was
entered (the app records time.time() in memory and writes it out at exit). Fresh scratch
database per size and run, dropped afterwards; --repeat runs each size, the table shows
medians. With --async, every round measures each size twice, with plain no-op handlers and
with ``async def`` no-op handlers (run on the runner's event loop, runner/aio.py), one right
after the other, and the table shows both and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import benchrecord
import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runner.store import migrate  # noqa: E402

APP = '''
import atexit, os, time
from runner import Runner
app = Runner()
_entered = []  # (slot epoch, handler entry epoch): written once at exit, not per run
atexit.register(lambda: open(os.path.join({out!r}, f"entered-{{os.getpid()}}.txt"), "w").write(
    "".join(f"{{s}} {{t}}\\n" for s, t in _entered)))

{kind}def noop(ctx):
    _entered.append((ctx.slot.timestamp(), time.time()))

for i in range({n}):
    app.job(f"lag-{{i:04d}}", every="1s")(noop)
'''


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def measure(admin: str, jobs: int, seconds: float, processes: int, workers: int, inflight: int = 0,
            is_async: bool = False) -> dict[str, Any]:
    info = psycopg.conninfo.conninfo_to_dict(admin)
    name = f"bench_runner_lag_{jobs}_{os.getpid()}"  # two sessions on one server do not collide
    url = f"postgresql://{info.get('user', 'postgres')}@{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    migrate.upgrade(url)
    tmp = Path(tempfile.mkdtemp())
    (tmp / "lag_app.py").write_text(APP.format(n=jobs, out=str(tmp), kind="async " if is_async else ""))
    procs = []
    try:
        for i in range(processes):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "runner", "start", "--app", f"{tmp / 'lag_app.py'}:app",
                 "--workers", str(workers), "--max-inflight", str(inflight), "--log-level", "WARNING"],
                env={**os.environ, "RUNNER_DATABASE_URL": url}, cwd=ROOT,
                stderr=open(tmp / f"r{i}.log", "w")))  # noqa: SIM115
        with psycopg.connect(url, autocommit=True) as conn:
            live = "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL"
            deadline = time.monotonic() + 60
            while conn.execute(live).fetchone()[0] < processes and time.monotonic() < deadline:
                time.sleep(0.1)
            start = conn.execute("SELECT date_trunc('second', now()) + interval '2 seconds'").fetchone()[0]
            time.sleep(seconds + 2)  # the measurement window itself
            end = conn.execute("SELECT date_trunc('second', now()) - interval '1 second'").fetchone()[0]
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
    entered = [
        t - s for f in tmp.glob("entered-*.txt") for s, t in (map(float, line.split()) for line in f.open())
        if start.timestamp() <= s <= end.timestamp()]
    with psycopg.connect(url, autocommit=True) as conn:
        lags = [r[0] for r in conn.execute(
            "SELECT extract(epoch FROM a.started_at - r.schedule_slot)::float8 FROM runner.job_runs r"
            " JOIN runner.attempts a ON a.run_id = r.id AND a.attempt = 1"
            " WHERE r.schedule_slot BETWEEN %s AND %s", (start, end)).fetchall()]
        per_slot = [r[0] for r in conn.execute(
            "SELECT extract(epoch FROM max(a.started_at) - r.schedule_slot)::float8 FROM runner.job_runs r"
            " JOIN runner.attempts a ON a.run_id = r.id AND a.attempt = 1"
            " WHERE r.schedule_slot BETWEEN %s AND %s GROUP BY r.schedule_slot", (start, end)).fetchall()]
        expected = jobs * (int((end - start).total_seconds()) + 1)
        dup = conn.execute("SELECT count(*) FROM runner.job_runs r WHERE r.schedule_slot BETWEEN %s AND %s"
                           " AND r.attempt > 1", (start, end)).fetchone()[0]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return {"jobs": jobs, "expected_runs": expected, "runs": len(lags), "extra_attempts": dup,
            "p50_ms": pct(lags, 50) * 1000, "p95_ms": pct(lags, 95) * 1000, "p99_ms": pct(lags, 99) * 1000,
            "max_ms": max(lags) * 1000, "slot_all_started_max_ms": max(per_slot) * 1000,
            "slot_all_started_median_ms": statistics.median(per_slot) * 1000,
            "handlers_entered": len(entered),
            "entered_p50_ms": pct(entered, 50) * 1000, "entered_p99_ms": pct(entered, 99) * 1000,
            "entered_max_ms": max(entered) * 1000}


def record(samples: dict[Any, list[dict[str, Any]]], args: Any) -> dict[str, Any]:
    """The medians of each size, as the Benchmarks page's lag record."""
    keys = ("p50_ms", "p99_ms", "max_ms", "entered_p99_ms", "extra_attempts")
    return benchrecord.make(
        "lag", "lag of each run's first attempt (its start in the ledger minus the slot instant) and of the"
        f" handler entering, N jobs every second, {args.processes} processes, medians of {args.repeat} runs"
        f" of {args.seconds:g} s", "ms",
        [{"label": f"{n:,} jobs" if isinstance(n, int) else f"{n} jobs",
          "values": {"jobs": int(str(n).split()[0]), **{k: statistics.median(r[k] for r in runs) for k in keys}},
          "samples_p99_ms": [r["p99_ms"] for r in runs]}
         for n, runs in samples.items()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--max-inflight", type=int, default=0, help="0: 2 x workers")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size; the table shows medians")
    parser.add_argument("--async", dest="with_async", action="store_true",
                        help="measure async def no-op handlers too, beside the sync ones in every round")
    parser.add_argument("--json", action="store_true")
    benchrecord.add_option(parser)
    args = parser.parse_args()
    kinds = ["sync", "async"] if args.with_async else ["sync"]
    samples: dict[Any, list[dict[str, Any]]] = {
        (n if kind == "sync" else f"{n} async"): [] for n in args.jobs for kind in kinds}
    for i in range(args.repeat):  # sizes interleaved, so a noisy minute hurts both alike
        for n in args.jobs:
            for kind in kinds:
                key = n if kind == "sync" else f"{n} async"
                samples[key].append(measure(args.dsn, n, args.seconds, args.processes, args.workers,
                                            args.max_inflight, kind == "async"))
                r = samples[key][-1]
                print(f"round {i + 1}, {key} jobs: p99 {r['p99_ms']:.1f} ms, handler entered p99 "
                      f"{r['entered_p99_ms']:.1f} ms", file=sys.stderr)
    benchrecord.write(args.record, record(samples, args))
    if args.json:
        print(json.dumps(samples, indent=2))
        return
    keys = ("p50_ms", "p95_ms", "p99_ms", "max_ms", "slot_all_started_median_ms", "slot_all_started_max_ms",
            "entered_p50_ms", "entered_p99_ms", "entered_max_ms")
    print(f"medians of {args.repeat} runs ({args.seconds:g} s each; {args.processes} processes,"
          f" --workers {args.workers} --max-inflight {args.max_inflight or 2 * args.workers})")
    print(f"{'jobs':>5} {'runs/expected':>14} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8}"
          f" {'all of a slot started, median/max ms':>38}   handler entered: p50 / p99 / max ms")
    for n, runs in samples.items():
        m = {k: statistics.median(r[k] for r in runs) for k in keys}
        got, expected = sum(r["runs"] for r in runs), sum(r["expected_runs"] for r in runs)
        print(f"{n!s:>5} {got:>6}/{expected:<7} {m['p50_ms']:>8.1f} {m['p95_ms']:>8.1f}"
              f" {m['p99_ms']:>8.1f} {m['max_ms']:>8.1f} {m['slot_all_started_median_ms']:>18.1f}"
              f" / {m['slot_all_started_max_ms']:.1f}   {m['entered_p50_ms']:.1f} / {m['entered_p99_ms']:.1f}"
              f" / {m['entered_max_ms']:.1f}")
        p99s = ", ".join(f"{r['p99_ms']:.1f}" for r in runs)
        print(f"      p99 samples: {p99s} ms; extra attempts (must be 0): {sum(r['extra_attempts'] for r in runs)}")
    if args.with_async:
        for n in args.jobs:
            sync_runs, async_runs = samples[n], samples[f"{n} async"]
            ratios = [a["p99_ms"] / s["p99_ms"] for s, a in zip(sync_runs, async_runs, strict=True)]
            entered = [a["entered_p99_ms"] / s["entered_p99_ms"] for s, a in zip(sync_runs, async_runs, strict=True)]
            print(f"{n} jobs, async / sync of the same round: p99 {statistics.median(ratios):.2f}"
                  f" (rounds: {', '.join(f'{r:.2f}' for r in ratios)}); handler entered p99"
                  f" {statistics.median(entered):.2f}")


if __name__ == "__main__":
    main()
