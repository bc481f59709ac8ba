"""Live jobs' scheduling lag while a throttled backfill runs, against the same without it.

    python scripts/bench/backfill_lag.py [--slots 10000] [--live 20] [--rate 100]
        [--concurrency 8] [--processes 2] [--workers 10] [--poll-interval 1.0]
        [--baseline 30] [--work-ms 0] [--dsn postgresql://postgres@127.0.0.1/postgres]
        [--results docs/benchmarks-archive.md] [--json]

One fresh scratch database (dropped afterwards). An app with ``--live`` jobs due every second
(no-op handlers) and one job ``bulk`` due every minute. ``--processes`` ``runner start``
processes run it throughout:

1. baseline: ``--baseline`` seconds of the live jobs alone;
2. backfill: ``runner backfill bulk`` over ``--slots`` past minutes (10,000 slots is about
   7 days), throttled with ``--rate`` and ``--concurrency``, until the plan completes.

From the ledger: live lag = ``started_at - schedule_slot`` (the claim's database clock minus
the slot instant) of the live runs whose slot falls in the baseline window, and of those
whose slot falls between the backfill's first and last start: p50/p95/p99/max. The
backfill's achieved rate = (runs - 1) / (last start - first start), and the most of its
runs the ledger saw running at once. ``--results`` appends the figures, the command and the
date to a markdown file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runner.store import migrate  # noqa: E402

DB = "bench_backfill_lag"
APP = '''
import time
from runner import Runner

app = Runner()
WORK = {work_s!r}


def noop(ctx):
    pass


def bulk(ctx):
    if WORK:
        time.sleep(WORK)


for i in range({live}):
    app.job(f"live-{{i:02d}}", every="1s")(noop)
app.job("bulk", every="1m")(bulk)
'''


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def url_of(admin: str, dbname: str) -> str:
    """A postgresql:// URL (alembic takes it) for database ``dbname`` of the admin DSN's server."""
    info = conninfo_to_dict(make_conninfo(admin))
    user = info.get("user", "postgres")
    password = f":{info['password']}" if info.get("password") else ""
    return f"postgresql://{user}{password}@{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}/{dbname}"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"runs": 0}
    return {"runs": len(values), "p50_ms": pct(values, 50) * 1000, "p95_ms": pct(values, 95) * 1000,
            "p99_ms": pct(values, 99) * 1000, "max_ms": max(values) * 1000}


def scalar(conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"backfill_lag: {what} not reached within {timeout:.0f} s")
        time.sleep(0.5)  # polling interval


def live_lags(conn: psycopg.Connection[Any], start: datetime, end: datetime) -> list[float]:
    return [r[0] for r in conn.execute(
        "SELECT extract(epoch FROM started_at - schedule_slot)::float8 FROM runner.job_runs"
        " WHERE job_name LIKE 'live-%%' AND schedule_slot > %s AND schedule_slot <= %s"
        " AND started_at IS NOT NULL", (start, end)).fetchall()]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DB)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB)))
    url = url_of(args.dsn, DB)
    procs: list[subprocess.Popen[bytes]] = []
    tmp = Path(tempfile.mkdtemp(prefix="backfill_lag_"))
    try:
        migrate.upgrade(url)
        app_file = tmp / "bench_app.py"
        app_file.write_text(APP.format(live=args.live, work_s=args.work_ms / 1000))
        env = {**os.environ, "RUNNER_DATABASE_URL": url}
        for i in range(args.processes):
            with open(tmp / f"runner-{i}.log", "wb") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "runner", "start", "--app", f"{app_file}:app",
                     "--workers", str(args.workers), "--poll-interval", str(args.poll_interval),
                     "--log-level", "WARNING"],
                    env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True))
        conn = psycopg.connect(url, autocommit=True)
        conn.execute("SET TIME ZONE 'UTC'")
        log(f"{args.processes} runner(s) with {args.live} live job(s); warming up")
        wait_for(lambda: scalar(conn, "SELECT count(DISTINCT job_name) FROM runner.job_runs"
                                      " WHERE status = 'succeeded'") >= args.live, 60, "live runs")
        time.sleep(args.warmup)  # let start-up settle before the baseline window opens
        base_start = scalar(conn, "SELECT now()")
        log(f"baseline: {args.baseline:.0f} s of live jobs alone")
        time.sleep(args.baseline)  # the measurement window itself
        base_end = scalar(conn, "SELECT now()")

        first = (base_start - timedelta(days=8)).replace(second=0, microsecond=0)
        last = first + timedelta(minutes=args.slots)
        command = ["backfill", "bulk", "--from", first.isoformat(), "--to", last.isoformat(),
                   "--reason", "benchmark", "--concurrency", str(args.concurrency), "--max-failures", "0",
                   "--yes", "--json", "--app", f"{app_file}:app"]
        if args.rate:
            command += ["--rate", str(args.rate)]
        made = subprocess.run([sys.executable, "-m", "runner", *command], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        if made.returncode != 0:
            raise SystemExit(f"backfill_lag: runner backfill failed: {made.stderr.strip()}")
        plan = json.loads(made.stdout)["backfill"]
        log(f"backfill {plan['id']}: {plan['expected_runs']} run(s), rate {args.rate or 'unlimited'}/s, "
            f"concurrency {args.concurrency}")
        budget = (args.slots / args.rate if args.rate else args.slots / 10) * 3 + 120
        wait_for(lambda: scalar(conn, "SELECT status FROM runner.backfills WHERE id = %s", (plan["id"],))
                 in ("completed", "paused", "cancelled"), budget, "the plan's end")
        status = scalar(conn, "SELECT status FROM runner.backfills WHERE id = %s", (plan["id"],))
        if status != "completed":
            raise SystemExit(f"backfill_lag: the plan ended {status}")
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            p.wait(60)
        procs = []

        group = plan["replay_group_id"]
        bf_first, bf_last, bf_runs, created, finished = conn.execute(
            "SELECT min(r.started_at), max(r.started_at), count(*), b.created_at, b.finished_at"
            " FROM runner.job_runs r JOIN runner.backfills b ON b.replay_group_id = r.replay_group_id"
            " WHERE b.id = %s AND r.status = 'succeeded' GROUP BY b.created_at, b.finished_at",
            (plan["id"],)).fetchone()
        peak = scalar(conn, """
            SELECT max(n) FROM (
                SELECT sum(d) OVER (ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS n
                FROM (SELECT a.started_at AS t, 1 AS d FROM runner.attempts a
                      JOIN runner.job_runs r ON r.id = a.run_id WHERE r.replay_group_id = %(g)s
                      UNION ALL
                      SELECT a.finished_at, -1 FROM runner.attempts a
                      JOIN runner.job_runs r ON r.id = a.run_id WHERE r.replay_group_id = %(g)s) e) x""",
                      {"g": group})
        span = (bf_last - bf_first).total_seconds()
        result = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": " ".join(shlex.quote(a) for a in ["python", "scripts/bench/backfill_lag.py", *sys.argv[1:]]),
            "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPU(s), "
                       f"PostgreSQL {scalar(conn, 'SHOW server_version')}, Python {platform.python_version()}",
            "settings": {"slots": args.slots, "live_jobs": args.live, "rate": args.rate,
                         "concurrency": args.concurrency, "processes": args.processes, "workers": args.workers,
                         "poll_interval": args.poll_interval, "work_ms": args.work_ms},
            "live_without_backfill": stats(live_lags(conn, base_start, base_end)),
            "live_during_backfill": stats(live_lags(conn, bf_first, bf_last)),
            "backfill": {"runs": bf_runs, "seconds": span,
                         "achieved_rate": (bf_runs - 1) / span if span > 0 else None,
                         "created_to_finished_s": (finished - created).total_seconds(),
                         "peak_running_in_ledger": peak},
        }
        conn.close()
        return result
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        if os.environ.get("BENCH_KEEP_LOGS"):
            log(f"(logs kept in {tmp})")
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DB)))


def markdown(r: dict[str, Any]) -> str:
    s = r["settings"]
    lines = [
        f"## Backfill beside live jobs ({r['date'][:10]})",
        "",
        f"`{r['command']}` on {r['machine']}, {r['date']}.",
        "",
        f"{s['processes']} `runner start` processes ({s['workers']} workers, poll {s['poll_interval']} s), "
        f"{s['live_jobs']} live jobs every 1 s; a backfill of {s['slots']:,} slots (a job every 1 min) "
        f"at --rate {s['rate'] or 'unlimited'} --concurrency {s['concurrency']}, handler work "
        f"{s['work_ms']} ms. Lag = started_at - schedule_slot from the ledger.",
        "",
        "| live jobs' lag | runs | p50 ms | p95 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, key in (("without a backfill", "live_without_backfill"), ("during the backfill", "live_during_backfill")):
        x = r[key]
        lines.append(f"| {label} | {x['runs']} | {x.get('p50_ms', 0):.1f} | {x.get('p95_ms', 0):.1f} | "
                     f"{x.get('p99_ms', 0):.1f} | {x.get('max_ms', 0):.1f} |")
    b = r["backfill"]
    lines += ["", f"Backfill: {b['runs']:,} runs started over {b['seconds']:.1f} s: achieved "
              f"{b['achieved_rate']:.1f} runs/s (limit {s['rate'] or 'none'}); at most "
              f"{b['peak_running_in_ledger']} running at once in the ledger (limit {s['concurrency']}); "
              f"plan created to completed in {b['created_to_finished_s']:.1f} s.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres", help="an admin DSN")
    parser.add_argument("--slots", type=int, default=10_000)
    parser.add_argument("--live", type=int, default=20)
    parser.add_argument("--rate", type=float, default=100.0, help="backfill runs per second (0: unlimited)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--poll-interval", type=float, default=1.0)
    parser.add_argument("--baseline", type=float, default=30.0, help="seconds of live jobs alone")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--work-ms", type=float, default=0.0, help="each backfill run's work (a sleep)")
    parser.add_argument("--results", type=Path, help="append the figures to this markdown file")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args)
    text = markdown(result)
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print(text)
    if args.results:
        with args.results.open("a") as out:
            out.write(("\n" if args.results.exists() and args.results.stat().st_size else "") + text)
        log(f"appended to {args.results}")


if __name__ == "__main__":
    main()
