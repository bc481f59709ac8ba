"""Live lag while a large backfill runs flat out: on the live processes, or on dedicated bulk ones.

    python scripts/bench/lane_lag.py [--live 100] [--slots 10000] [--processes 2] [--bulk-processes 2]
        [--workers 10] [--concurrency 100] [--baseline 30] [--repeat 1]
        [--dsn postgresql://postgres@127.0.0.1:5432/postgres] [--results docs/benchmarks-archive.md] [--json]

One scratch database (dropped afterwards), an app with ``--live`` no-op jobs due every second
and one job ``hist`` due every minute. Per round, two set-ups, each measured with and without
a backfill of ``--slots`` past minutes of ``hist`` (no rate limit, plan concurrency
``--concurrency``, no-op handlers, i.e. as fast as the runners go):

* (a) shared: ``--processes`` ``runner start`` processes serving every lane (no ``--lanes``:
  the backfill runs on the live processes, ``--lane-slots bulk=N``, ``--shared-bulk-slots``);
* (b) dedicated: ``--processes`` processes with ``--lanes realtime,correction,manual`` and
  ``--bulk-processes`` processes with ``--lanes bulk``;
* (c) the baseline: each set-up's first ``--baseline`` seconds, before its backfill (the
  dedicated bulk processes already running, idle).

Live lag = started_at - schedule_slot from the ledger (the claim's database clock minus the
slot instant) for the live runs whose slot falls in the window: the baseline window, or the
backfill's first to last start. Printed: p50/p99/max per set-up and window, the medians over
``--repeat`` rounds, and each p99 against its set-up's baseline. ``--results`` appends the
table, the command and the date to a markdown file. The machine (2 cores here) runs the
database, the runners and the backfill at once: on a shared machine, say so with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402

from runner.store import migrate  # noqa: E402

DB = "bench_lane_lag"
APP = '''
from runner import Runner

app = Runner()


def noop(ctx):
    pass


for i in range({live}):
    app.job(f"live-{{i:03d}}", every="1s", grace="30s")(noop)
app.job("hist", every="1m")(noop)
'''


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def url_of(dsn: str) -> str:
    info = conninfo_to_dict(dsn)
    password = f":{info['password']}" if info.get("password") else ""
    return (f"postgresql://{info.get('user', 'postgres')}{password}@{info.get('host', '127.0.0.1')}:"
            f"{info.get('port', 5432)}/{info['dbname']}")


def scalar(conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise benchlib.BenchError(f"lane_lag: {what} not reached within {timeout:.0f} s")
        time.sleep(0.25)  # polling interval of the harness


def lags(conn: psycopg.Connection[Any], start: datetime, end: datetime) -> list[float]:
    return [r[0] for r in conn.execute(
        "SELECT extract(epoch FROM started_at - schedule_slot)::float8 FROM runner.job_runs"
        " WHERE job_name LIKE 'live-%%' AND schedule_slot > %s AND schedule_slot <= %s"
        " AND started_at IS NOT NULL", (start, end)).fetchall()]


def stats(values: list[float]) -> dict[str, Any]:
    return {"runs": len(values), "p50_ms": benchlib.percentile(values, 50) * 1000,
            "p99_ms": benchlib.percentile(values, 99) * 1000,
            "max_ms": (max(values) * 1000) if values else float("nan")}


class Setup:
    """The runner processes of one set-up."""

    def __init__(self, app: str, url: str, logdir: Path, workers: int) -> None:
        self.app, self.url, self.logdir, self.workers = app, url, logdir, workers
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *extra: str) -> None:
        with open(self.logdir / f"{name}.log", "wb") as out:
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "runner", "start", "--app", self.app, "--workers", str(self.workers),
                 "--log-level", "WARNING", *extra],
                env={**os.environ, "RUNNER_DATABASE_URL": self.url}, stdout=out, stderr=subprocess.STDOUT,
                cwd=ROOT, start_new_session=True))

    def stop(self) -> None:
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        self.procs = []


def one_setup(args: argparse.Namespace, conn: psycopg.Connection[Any], setup: Setup, label: str,
              origin: datetime) -> dict[str, Any]:
    """Baseline window, then the backfill until it completes; the live lag of each."""
    since = scalar(conn, "SELECT now()")
    wait_for(lambda: scalar(conn, "SELECT count(DISTINCT job_name) FROM runner.job_runs WHERE status = 'succeeded'"
                                  " AND job_name LIKE 'live-%%' AND schedule_slot > %s", (since,)) >= args.live,
             90, f"{label}: every live job running")
    time.sleep(args.warmup)  # start-up settles before the baseline window opens
    base_start = scalar(conn, "SELECT now()")
    log(f"{label}: baseline, {args.baseline:.0f} s of live jobs alone")
    time.sleep(args.baseline)  # the measurement window itself
    base_end = scalar(conn, "SELECT now()")
    last = origin + timedelta(minutes=args.slots)
    made = subprocess.run(
        [sys.executable, "-m", "runner", "backfill", "hist", "--from", origin.isoformat(), "--to", last.isoformat(),
         "--reason", "benchmark", "--concurrency", str(args.concurrency), "--max-failures", "0",
         "--yes", "--json", "--app", setup.app],
        env={**os.environ, "RUNNER_DATABASE_URL": setup.url}, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if made.returncode != 0:
        raise benchlib.BenchError(f"lane_lag: runner backfill failed: {made.stderr.strip()}")
    plan = json.loads(made.stdout)["backfill"]
    log(f"{label}: backfill {plan['id']} of {plan['expected_runs']} run(s), flat out")
    wait_for(lambda: scalar(conn, "SELECT status FROM runner.backfills WHERE id = %s", (plan["id"],))
             in ("completed", "paused", "cancelled"), args.slots / 20 + 300, "the plan's end")
    first, final, runs = conn.execute(
        "SELECT min(a.started_at), max(a.started_at), count(*) FROM runner.attempts a"
        " JOIN runner.job_runs r ON r.id = a.run_id JOIN runner.backfills b ON b.replay_group_id = r.replay_group_id"
        " WHERE b.id = %s AND a.started_at >= b.created_at", (plan["id"],)).fetchone()
    span = (final - first).total_seconds()
    return {"baseline": stats(lags(conn, base_start, base_end)), "backfill": stats(lags(conn, first, final)),
            "backfill_runs": runs, "backfill_seconds": span, "backfill_rate": (runs - 1) / span if span else None}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    dsn = benchlib.recreate_database(args.dsn, DB)
    url = url_of(dsn)
    tmp = Path(tempfile.mkdtemp(prefix="lane_lag_"))
    rounds: list[dict[str, Any]] = []
    setup: Setup | None = None
    env = benchlib.environment(dsn)
    try:
        migrate.upgrade(url)
        (tmp / "lane_app.py").write_text(APP.format(live=args.live))
        app = f"{tmp / 'lane_app.py'}:app"
        conn = psycopg.connect(url, autocommit=True)
        conn.execute("SET TIME ZONE 'UTC'")
        # each backfill covers slots of its own, further back in time
        origin = (scalar(conn, "SELECT now()") - timedelta(days=400)).replace(second=0, microsecond=0)
        for n in range(args.repeat):
            result: dict[str, Any] = {}
            for label in ("shared", "dedicated"):
                setup = Setup(app, url, tmp, args.workers)
                poll = ("--poll-interval", str(args.poll_interval))
                if label == "shared":
                    for i in range(args.processes):
                        setup.start(f"shared-{n}-{i}", "--lane-slots", f"bulk={args.shared_bulk_slots}", *poll)
                else:
                    for i in range(args.processes):
                        setup.start(f"live-{n}-{i}", "--lanes", "realtime,correction,manual", *poll)
                    for i in range(args.bulk_processes):
                        setup.start(f"bulk-{n}-{i}", "--lanes", "bulk", *poll)
                result[label] = one_setup(args, conn, setup, f"round {n + 1} {label}", origin)
                origin -= timedelta(minutes=args.slots)
                setup.stop()
                setup = None
            rounds.append(result)
            log(f"round {n + 1}: " + json.dumps({k: {w: round(v[w]['p99_ms'], 1) for w in ('baseline', 'backfill')}
                                                  for k, v in result.items()}))
        conn.close()
    finally:
        if setup is not None:
            setup.stop()
        benchlib.drop_database(args.dsn, DB)
        if os.environ.get("BENCH_KEEP_LOGS"):
            log(f"(logs kept in {tmp})")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    def med(label: str, window: str, key: str) -> float:
        return benchlib.median([r[label][window][key] for r in rounds])

    summary = {label: {window: {key: med(label, window, key) for key in ("p50_ms", "p99_ms", "max_ms")}
                       for window in ("baseline", "backfill")} for label in ("shared", "dedicated")}
    for label in summary:
        summary[label]["p99_ratio"] = summary[label]["backfill"]["p99_ms"] / summary[label]["baseline"]["p99_ms"]
        summary[label]["backfill_rate"] = benchlib.median([r[label]["backfill_rate"] or 0.0 for r in rounds])
    return {"date": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": " ".join(shlex.quote(a) for a in ["python", "scripts/bench/lane_lag.py", *sys.argv[1:]]),
            "environment": env, "settings": vars(args) | {"results": None},
            "rounds": rounds, "summary": summary}


def markdown(r: dict[str, Any]) -> str:
    s, m, env = r["settings"], r["summary"], r["environment"]
    lines = [f"## Lanes: live lag beside a flat-out backfill ({r['date'][:10]})", "",
             f"`{r['command']}`, {r['date']}; {env.get('cpus')} CPUs shared with other sessions' work, "
             f"PostgreSQL {env.get('postgres')}, Python {env.get('python')}.", "",
             f"{s['live']} live no-op jobs every 1 s; a backfill of {s['slots']:,} slots (no rate limit, "
             f"plan concurrency {s['concurrency']}, no-op handlers). (a) shared: {s['processes']} processes "
             f"serving every lane with `--lane-slots bulk={s['shared_bulk_slots']}`; (b) dedicated: {s['processes']} with `--lanes realtime,correction,manual` "
             f"+ {s['bulk_processes']} with `--lanes bulk`; (c) baseline: each set-up's {s['baseline']:.0f} s "
             f"before its backfill. --workers {s['workers']}, poll {s['poll_interval']} s. Medians of "
             f"{s['repeat']} round(s); lag = started_at - schedule_slot from the ledger.", "",
             "| set-up | window | p50 ms | p99 ms | max ms | p99 / baseline | backfill runs/s |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for label, name in (("shared", "(a) shared"), ("dedicated", "(b) dedicated bulk")):
        for window, wname in (("baseline", "(c) no backfill"), ("backfill", "during the backfill")):
            x = m[label][window]
            ratio = f"{m[label]['p99_ratio']:.2f}" if window == "backfill" else "1.00"
            rate = f"{m[label]['backfill_rate']:.0f}" if window == "backfill" else ""
            lines.append(f"| {name} | {wname} | {x['p50_ms']:.1f} | {x['p99_ms']:.1f} | {x['max_ms']:.1f} | "
                         f"{ratio} | {rate} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=benchlib.DEFAULT_DSN, help="an admin DSN")
    parser.add_argument("--live", type=int, default=100)
    parser.add_argument("--slots", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=2, help="processes serving the live jobs")
    parser.add_argument("--bulk-processes", type=int, default=2, help="dedicated --lanes bulk processes in (b)")
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=100, help="the plan's concurrency")
    parser.add_argument("--shared-bulk-slots", type=int, default=10,
                        help="bulk handler slots of each shared process in (a): flat out, as many as --workers")
    parser.add_argument("--poll-interval", type=float, default=1.0)
    parser.add_argument("--baseline", type=float, default=30.0, help="seconds of live jobs alone per set-up")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--results", type=Path, help="append the table to this markdown file")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args)
    text = markdown(result)
    print(json.dumps(result, indent=2, default=str) if args.json else text)
    if args.results:
        with args.results.open("a") as out:
            out.write("\n" + text)
        log(f"appended to {args.results}")


if __name__ == "__main__":
    main()
