"""Wider instants: 10,000 (or 100,000) slot x partition runs due at one instant, on two `runner start`.

    python scripts/bench/wide_instants.py [--shapes 1x10000 100x100] [--slots 3] [--every 10]
        [--processes 2] [--workers 100] [--max-inflight 1000] [--repeat 3] [--baseline 1000] [--json]
    python scripts/bench/wide_instants.py --shapes 100x1000/60 --slots 2 --repeat 1 --baseline 0

A shape JOBSxPARTITIONS is that many jobs, each ``every=`` --every seconds with that many
static partitions, so JOBS x PARTITIONS runs fall due at every slot instant (1x10000: one job
fanned out to 10,000 tenants; 100x100: a hundred such jobs of 100 each). JOBSxPARTITIONS/SECONDS
gives the shape a period of its own: 100x1000/60 is 100,000 runs due at one instant every
minute (issue 32's shape: all started within 5 s at p99, the processes' memory bounded, no
extra attempt). No-op handlers. Per shape and round: a fresh scratch database, the runner
processes started, one slot let pass (start-up, shares settling), then --slots slots measured
from the ledger: per run, lag = the attempt's started_at (the claim statement's database
clock) - the slot instant; p50 / p99 / max over every run of the measured slots, and per slot
the time until all its runs had started. Beside it, the handler start lag: each no-op handler
appends its slot and time.time() to a file of its process (one write(2)), so the wait of a
claimed run for a handler thread (--max-inflight above --workers) is in that figure. The
measurement waits until every run of the measured slots has an attempt, or the period after
the last slot has passed. While the
processes run, pg_stat_activity of the scratch database is sampled every 0.1 s: the most
backends seen at once, in all and by application_name, so "no more connections than today"
is a figure, not a claim; and each process's memory from /proc: its peak resident set
(VmHWM) and its resident set after start-up, before the first slot (Linux only).

Extra attempts: every run of the measured slots must have exactly one attempt (attempt rows
beyond one per run, counted, must be 0), and every expected run must exist.

--baseline N measures scripts/bench/runner_lag.py's figure (N jobs every second, the same
processes and flags) in the same round, so the wide figures stand beside the 1,000-run one
measured minutes apart on the same (shared, noisy) machine. Rounds interleave the shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import benchrecord  # noqa: E402
import runner_lag  # noqa: E402
from benchlib import (  # noqa: E402
    DEFAULT_DSN,
    drop_database,
    environment,
    install_cleanup,
    percentile,
    recreate_database,
    scratch_dir,
)

from runner.store import migrate  # noqa: E402

APP = '''
import os, time
from runner import Runner
app = Runner()

# each handler's start, one line appended (one write(2)) to this process's own file
_starts = os.open(os.path.join({starts!r}, f"starts.{{os.getpid()}}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)

def noop(ctx):
    os.write(_starts, f"{{ctx.slot.timestamp()}} {{time.time()}}\\n".encode())

for j in range({jobs}):
    app.job(f"wide-{{j:03d}}", every="{every}s", partitions=[f"t{{i:05d}}" for i in range({partitions})],
            grace="1h")(noop)
'''

LAGS = ("SELECT r.schedule_slot, extract(epoch FROM a.started_at - r.schedule_slot)::float8"
        " FROM runner.job_runs r JOIN runner.attempts a ON a.run_id = r.id AND a.attempt = 1"
        " WHERE r.schedule_slot = ANY(%s)")
BACKENDS = ("SELECT coalesce(application_name, ''), count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1")
# each active statement (its text without leading comment lines, first 70 characters), what it
# waits on (or cpu), how long it has run, and for a lock wait the statement of the session
# that blocks it
ACTIVE = (r"""SELECT left(regexp_replace(regexp_replace(a.query, '^(\s*--[^\n]*\n)*\s*', ''), '\s+', ' ', 'g'), 70),
                 coalesce(a.wait_event_type || ':' || a.wait_event, 'cpu'),
                 extract(epoch FROM clock_timestamp() - a.query_start)::float8,
                 CASE WHEN a.wait_event_type = 'Lock' THEN
                     (SELECT left(regexp_replace(regexp_replace(b.query, '^(\s*--[^\n]*\n)*\s*', ''),
                                                 '\s+', ' ', 'g'), 70)
                      FROM pg_stat_activity b WHERE b.pid = (pg_blocking_pids(a.pid))[1]) END
          FROM pg_stat_activity a
          WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.state = 'active'
            AND a.backend_type = 'client backend'""")


def url_of(dsn: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    return (f"postgresql://{info.get('user', 'postgres')}@{info.get('host', '127.0.0.1')}:"
            f"{info.get('port', 5432)}/{info['dbname']}")


def memory_kb(pid: int, field: str) -> int | None:
    """A field of /proc/PID/status in kB (VmRSS, VmHWM), or None where there is no /proc."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class Backends(threading.Thread):
    """Samples pg_stat_activity of one database until stopped: the most backends at once, and
    per active statement the samples by what it waited on (a lock wait with the statement
    that held it) and the longest it was seen running."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.most = 0
        self.most_by_app: Counter[str] = Counter()
        self.waits: Counter[tuple[str, str, str]] = Counter()  # (statement, wait, blocker) -> samples
        self.longest: dict[str, float] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.halt.is_set():
                by_app = dict(conn.execute(BACKENDS).fetchall())
                self.most = max(self.most, sum(by_app.values()))
                for app, n in by_app.items():
                    self.most_by_app[app] = max(self.most_by_app[app], n)
                for statement, wait, seconds, blocker in conn.execute(ACTIVE).fetchall():
                    self.waits[(statement, wait, blocker or "")] += 1
                    self.longest[statement] = max(self.longest.get(statement, 0.0), seconds or 0.0)
                self.halt.wait(0.1)

    def activity(self) -> list[dict[str, Any]]:
        """The statements seen, the most sampled first: samples by wait, the longest run."""
        return [{"statement": st, "wait": w, "blocked_by": b, "samples": n,
                 "longest_s": round(self.longest.get(st, 0.0), 3)}
                for (st, w, b), n in self.waits.most_common(25)]


def measure(admin: str, jobs: int, partitions: int, every: int, slots: int, processes: int,
            workers: int, inflight: int) -> dict[str, Any]:
    name = f"bench_wide_{jobs}x{partitions}"
    url = url_of(recreate_database(admin, name))
    migrate.upgrade(url)
    procs: list[subprocess.Popen[bytes]] = []
    with scratch_dir("wide_") as tmp:
        (tmp / "wide_app.py").write_text(APP.format(jobs=jobs, partitions=partitions, every=every,
                                                    starts=str(tmp)))
        sampler = Backends(url)
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                for i in range(processes):
                    procs.append(subprocess.Popen(
                        [sys.executable, "-m", "runner", "start", "--app", f"{tmp / 'wide_app.py'}:app",
                         "--workers", str(workers), "--max-inflight", str(inflight), "--log-level", "WARNING"],
                        env={**os.environ, "RUNNER_DATABASE_URL": url}, cwd=ROOT,
                        stderr=open(tmp / f"r{i}.log", "wb")))  # noqa: SIM115
                deadline = time.monotonic() + 60
                live = "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL"
                while conn.execute(live).fetchone()[0] < processes:
                    if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                        raise RuntimeError("the runners did not start:\n" + "\n".join(
                            (tmp / f"r{i}.log").read_text()[-2000:] for i in range(processes)))
                    time.sleep(0.1)
                sampler.start()
                rss_idle = [memory_kb(p.pid, "VmRSS") for p in procs]
                # the first slot at least 2 s away is the warm-up; the next `slots` are measured
                now = conn.execute("SELECT extract(epoch FROM now())::float8").fetchone()[0]
                first = (int(now + 2) // every + 1) * every
                wanted = [first + every * (k + 1) for k in range(slots)]
                expected = jobs * partitions * slots
                instants = conn.execute("SELECT array_agg(to_timestamp(s)) FROM unnest(%s::float8[]) s",
                                        (wanted,)).fetchone()[0]
                time.sleep(max(wanted[-1] - time.time(), 0))
                # then until every run of the measured slots has started, or a period has passed
                started = ("SELECT count(*) FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id"
                           " WHERE r.schedule_slot = ANY(%s) AND a.attempt = 1")
                deadline = wanted[-1] + max(every - 1, 5)
                # (every 2 s: at 100,000 runs a slot this count took up to 1.7 s, on the same
                # two cores as the runners)
                while conn.execute(started, (instants,)).fetchone()[0] < expected and time.time() < deadline:
                    time.sleep(2.0)
                rss_peak = [memory_kb(p.pid, "VmHWM") for p in procs]
                rows = conn.execute(LAGS, (instants,)).fetchall()
                dup = conn.execute("SELECT count(*) FROM runner.attempts a JOIN runner.job_runs r"
                                   " ON r.id = a.run_id WHERE r.schedule_slot = ANY(%s) AND a.attempt > 1",
                                   (instants,)).fetchone()[0]
                attempts, runs_with = conn.execute(
                    "SELECT count(*), count(DISTINCT a.run_id) FROM runner.attempts a JOIN runner.job_runs r"
                    " ON r.id = a.run_id WHERE r.schedule_slot = ANY(%s)", (instants,)).fetchone()
            # each handler's start (its first action, in the app above): a claimed run may wait
            # for a handler thread (--max-inflight above --workers), so this lag is the user's
            measured, give_up = set(wanted), time.monotonic() + 30
            while True:
                handler_lags = [float(b) - float(a) for f in tmp.glob("starts.*")
                                for a, b in (line.split() for line in f.read_text().splitlines())
                                if float(a) in measured]
                if len(handler_lags) >= expected or time.monotonic() > give_up:
                    break
                time.sleep(0.5)  # polling interval of the condition
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(60)
            sampler.halt.set()
            if sampler.is_alive():
                sampler.join(5)
            drop_database(admin, name)
    lags = [lag for _, lag in rows]
    per_slot: dict[Any, float] = {}
    for slot, lag in rows:
        per_slot[slot] = max(per_slot.get(slot, 0.0), lag)
    return {
        "shape": f"{jobs}x{partitions}/{every}", "expected_runs": expected, "runs": len(lags),
        "extra_attempts": dup + (attempts - runs_with),
        "rss_idle_mb": [round(k / 1024, 1) if k else None for k in rss_idle],
        "rss_peak_mb": [round(k / 1024, 1) if k else None for k in rss_peak],
        "p50_ms": percentile(lags, 50) * 1000, "p99_ms": percentile(lags, 99) * 1000,
        "max_ms": max(lags, default=float("nan")) * 1000,
        "within_1s": sum(1 for lag in lags if lag <= 1.0),
        "handler_p50_ms": percentile(handler_lags, 50) * 1000,
        "handler_p99_ms": percentile(handler_lags, 99) * 1000, "handler_starts": len(handler_lags),
        "slot_all_started_ms": [round(v * 1000, 1) for v in per_slot.values()],
        "backends_most": sampler.most, "backends_by_app": dict(sampler.most_by_app),
        "activity": sampler.activity(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="an admin DSN (scratch databases are made on its server)")
    parser.add_argument("--shapes", nargs="+", default=["1x10000", "100x100"], help="JOBSxPARTITIONS")
    parser.add_argument("--slots", type=int, default=3, help="slots measured per round (after one warm-up slot)")
    parser.add_argument("--every", type=int, default=10, help="the jobs' period, seconds")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--max-inflight", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", type=int, default=1000,
                        help="runner_lag.py's N jobs every second, in the same rounds (0: none)")
    parser.add_argument("--baseline-seconds", type=float, default=20)
    parser.add_argument("--json", action="store_true")
    benchrecord.add_option(parser)
    args = parser.parse_args()
    install_cleanup()
    env = environment(args.dsn)
    shapes = []
    for spec in args.shapes:
        size, _, period = spec.lower().partition("/")
        j, p = (int(x) for x in size.split("x"))
        shapes.append((j, p, int(period) if period else args.every))
    samples: dict[str, list[dict[str, Any]]] = {f"{j}x{p}/{e}": [] for j, p, e in shapes}
    base: list[dict[str, Any]] = []
    for i in range(args.repeat):
        if args.baseline:
            base.append(runner_lag.measure(args.dsn, args.baseline, args.baseline_seconds, args.processes,
                                           args.workers, args.max_inflight))
            print(f"round {i + 1}, {args.baseline} jobs every second: p99 {base[-1]['p99_ms']:.1f} ms",
                  file=sys.stderr)
        for j, p, e in shapes:
            r = measure(args.dsn, j, p, e, args.slots, args.processes, args.workers, args.max_inflight)
            samples[r["shape"]].append(r)
            print(f"round {i + 1}, {r['shape']}: p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms, max "
                  f"{r['max_ms']:.0f} ms, handler start p50 {r['handler_p50_ms']:.0f} ms p99 "
                  f"{r['handler_p99_ms']:.0f} ms ({r['handler_starts']} starts), "
                  f"{r['runs']}/{r['expected_runs']} runs, slots all started "
                  f"{r['slot_all_started_ms']} ms, backends {r['backends_most']} {r['backends_by_app']}, "
                  f"RSS MB idle {r['rss_idle_mb']} peak {r['rss_peak_mb']}, extra attempts {r['extra_attempts']}",
                  file=sys.stderr)
    keys = ("p50_ms", "p99_ms", "max_ms", "handler_p50_ms", "handler_p99_ms", "backends_most")
    base_p99 = statistics.median(r["p99_ms"] for r in base) if base else None
    figures: list[dict[str, Any]] = [
        {"label": shape, "values": {**{k: statistics.median(r[k] for r in runs) for k in keys},
                                    "all_within_1s": float(all(r["within_1s"] == r["expected_runs"] for r in runs)),
                                    "x_baseline_p99": statistics.median(r["p99_ms"] for r in runs) / base_p99
                                    if base_p99 else None},
         "samples_p99_ms": [r["p99_ms"] for r in runs]} for shape, runs in samples.items()]
    if base:  # the same rounds' runner_lag.py figure, the baseline the shapes are set against
        figures.append({"label": f"{args.baseline:,} jobs every second (baseline)",
                        "values": {k: statistics.median(r[k] for r in base) for k in ("p50_ms", "p99_ms", "max_ms")}
                        | {"x_baseline_p99": 1.0}, "samples_p99_ms": [r["p99_ms"] for r in base]})
    benchrecord.write(args.record, benchrecord.make(
        "wide", f"start lag of the runs due at one instant, shapes JOBSxPARTITIONS, {args.processes} runner start"
        f" --workers {args.workers} --max-inflight {args.max_inflight}; medians of {args.repeat} rounds"
        + (f"; baseline: {args.baseline:,} jobs every second in the same rounds" if base else ""), "ms", figures))
    if args.json:
        print(json.dumps({"environment": env, "baseline": base, "shapes": samples}, indent=2, default=str))
        return
    print(f"medians of {args.repeat} rounds; {args.processes} processes, --workers {args.workers}"
          f" --max-inflight {args.max_inflight}; load {env['loadavg_1m_at_start']} at start")
    print(f"{'shape':>13} {'runs/expected':>16} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'handler p99':>11}"
          f" {'backends':>9} {'max RSS MB':>10}   p99 samples")
    if base:
        m = statistics.median(r["p99_ms"] for r in base)
        print(f"{str(args.baseline) + 'x1/1':>13} {sum(r['runs'] for r in base):>7}/"
              f"{sum(r['expected_runs'] for r in base):<8} {statistics.median(r['p50_ms'] for r in base):>8.1f}"
              f" {m:>8.1f} {statistics.median(r['max_ms'] for r in base):>8.1f} {'':>11} {'':>9} {'':>10}   "
              + ", ".join(f"{r['p99_ms']:.1f}" for r in base))
    for shape, runs in samples.items():
        peak = max((m for r in runs for m in r["rss_peak_mb"] if m), default=float("nan"))
        print(f"{shape:>13} {sum(r['runs'] for r in runs):>7}/{sum(r['expected_runs'] for r in runs):<8}"
              f" {statistics.median(r['p50_ms'] for r in runs):>8.1f} {statistics.median(r['p99_ms'] for r in runs):>8.1f}"
              f" {statistics.median(r['max_ms'] for r in runs):>8.1f}"
              f" {statistics.median(r['handler_p99_ms'] for r in runs):>11.1f} {max(r['backends_most'] for r in runs):>9}"
              f" {peak:>10.1f}   "
              + ", ".join(f"{r['p99_ms']:.1f}" for r in runs)
              + f"; extra attempts (must be 0): {sum(r['extra_attempts'] for r in runs)}")


if __name__ == "__main__":
    main()
