"""Throughput of `runner`: no-op runs completed per second by two `runner start` processes,
beside the raw ceiling of the same ledger statements issued directly.

    python scripts/bench/runner_throughput.py [--partitions 10000] [--repeat 3] [--workers 16] [--async]

One job with N partitions is due at one instant (every="30s"), so one slot fans out to N
runs; two real `runner start` processes drain it. Runs per second = N / (last finished_at -
slot instant), read from the ledger. The ceiling ("raw") is two processes issuing, in a
minimal psycopg loop, exactly the statements the runner issues per batch of runs (claim,
finish, unlock; runner/store/ledger.py), each process claiming its own share of the slot as the
runners do, with no handler, threads or scheduling around them.
Each measurement uses a fresh scratch database, dropped afterwards. With --async, every round
also measures the runner with an ``async def`` no-op handler (the runner's event loop,
runner/aio.py; ``--async-workers`` as ``--workers``), right after the sync one.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runner.model.schedule import idempotency_keys  # noqa: E402
from runner.store import ledger, migrate  # noqa: E402
from runner.store.ledger import Outcome, Owner, SlotClaim  # noqa: E402

APP = '''
from runner import Runner
app = Runner()

@app.job("fanout", every="30s", partitions=[str(i) for i in range({n})], grace="1h")
{kind}def fanout(ctx):
    pass
'''


def scratch(admin: str, name: str) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = psycopg.conninfo.make_conninfo(admin, dbname=name)
    migrate.upgrade(_as_url(admin, name))
    return url


def _as_url(admin: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(admin)
    host = info.get("host", "127.0.0.1")
    return f"postgresql://{info.get('user', 'postgres')}@{host}:{info.get('port', 5432)}/{name}"


def drop(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_for(check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)  # the peers are polled as often (peers_throughput.py)
    raise TimeoutError("condition not met")


def measure_runner(admin: str, partitions: int, workers: int, inflight: int,
                   is_async: bool = False) -> dict[str, Any]:
    name = "bench_runner_tp"
    url = _as_url(admin, name)
    scratch(admin, name)
    app_dir = Path(tempfile.mkdtemp())
    (app_dir / "bench_app.py").write_text(APP.format(n=partitions, kind="async " if is_async else ""))
    env = {**os.environ, "RUNNER_DATABASE_URL": url}
    procs = []
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            # start both just after a slot, so the next one (the measured one) finds them ready
            now = conn.execute("SELECT now()").fetchone()[0]
            slot = datetime.fromtimestamp((int(now.timestamp()) // 30 + 1) * 30, UTC)
            if (slot - now).total_seconds() < 8:
                slot += timedelta(seconds=30)
            time.sleep(max((slot - now).total_seconds() - 6, 0))
            for i in range(2):
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "runner", "start", "--app", str(app_dir / "bench_app.py") + ":app",
                     "--workers", str(workers), "--max-inflight", str(inflight), "--log-level", "WARNING"],
                    env=env, cwd=ROOT, stderr=open(app_dir / f"r{i}.log", "w")))  # noqa: SIM115
            live = "SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL"
            wait_for(lambda: conn.execute(live).fetchone()[0] == 2, 30)
            # a start slower than the 6 s allowed (a loaded machine) registered the job after
            # that slot, which is then not the job's: measure the first slot after both are up
            now = conn.execute("SELECT now()").fetchone()[0]
            if slot <= now:
                slot = datetime.fromtimestamp((int(now.timestamp()) // 30 + 1) * 30, UTC)
            wait_for(lambda: conn.execute(
                "SELECT count(*) FROM runner.job_runs WHERE schedule_slot = %s"
                " AND status = 'succeeded'", (slot,)).fetchone()[0] == partitions, 300)
            first, last, owners = conn.execute(
                "SELECT min(a.started_at), max(a.finished_at), count(DISTINCT a.owner_instance)"
                " FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id"
                " WHERE r.schedule_slot = %s", (slot,)).fetchone()
            dup = conn.execute("SELECT count(*) FROM runner.attempts a"
                               " JOIN runner.job_runs r ON r.id = a.run_id"
                               " WHERE r.schedule_slot = %s AND a.attempt > 1", (slot,)).fetchone()[0]
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
        drop(admin, name)
    elapsed = (last - slot).total_seconds()
    return {"runs": partitions, "seconds": elapsed, "runs_per_s": partitions / elapsed,
            "first_start_lag_s": (first - slot).total_seconds(), "owners": owners, "extra_attempts": dup}


def _raw_worker(url: str, partitions: int, batch: int, slot: datetime, share: int, barrier: Any, out: Any) -> None:
    owner = Owner(uuid4(), "bench", os.getpid(), 21077)
    lock = psycopg.connect(url, autocommit=True)
    done_conn = psycopg.connect(url, autocommit=True)
    keys = [str(i) for i in range(partitions)]
    start = slot - timedelta(seconds=30)
    # this process's share of the slot, as two runners split it (runner/worker/claims.py: Shares)
    claims = [SlotClaim("fanout", slot, k, date(2000, 1, 1), start, slot, ikey)
              for k, ikey in zip(keys, idempotency_keys("fanout", start, slot, keys, "1"), strict=True)
              if int(ikey[:8], 16) % 2 == share]
    barrier.wait(60)
    won = 0
    for i in range(0, len(claims), batch):
        _, runs = ledger.claim_slots(lock, owner, claims[i:i + batch])
        ledger.finish_attempts(done_conn, [Outcome(r.id, r.fence, "succeeded") for r in runs])
        ledger.unlock_runs(lock, owner.namespace, [r.id for r in runs])
        won += len(runs)
    out.put(won)


def measure_raw(admin: str, partitions: int, batch: int) -> dict[str, Any]:
    name = "bench_runner_raw"
    url = _as_url(admin, name)
    scratch(admin, name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO runner.jobs (job_name, schedule_kind, every_interval, track_from)"
                         " VALUES ('fanout', 'every', '30 seconds', now() - interval '1 hour')")
            slot = conn.execute("SELECT date_trunc('second', now()) - interval '1 second'").fetchone()[0]
        ctx = multiprocessing.get_context("spawn")
        barrier, out = ctx.Barrier(3), ctx.Queue()
        procs = [ctx.Process(target=_raw_worker, args=(url, partitions, batch, slot, share, barrier, out))
                 for share in range(2)]
        for p in procs:
            p.start()
        barrier.wait(60)
        t0 = time.perf_counter()
        won = 0
        for _ in procs:  # a worker that died (its traceback is on stderr) must not hang this
            while True:
                try:
                    won += out.get(timeout=1.0)
                    break
                except queue.Empty:
                    if any(p.exitcode not in (None, 0) for p in procs):
                        raise RuntimeError("a raw worker process failed") from None
        elapsed = time.perf_counter() - t0
        for p in procs:
            p.join()
    finally:
        drop(admin, name)
    assert won == partitions, won
    return {"runs": partitions, "seconds": elapsed, "runs_per_s": partitions / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--partitions", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--max-inflight", type=int, default=512)
    parser.add_argument("--batch", type=int, default=128, help="rows per statement in the raw loop")
    parser.add_argument("--async", dest="with_async", action="store_true",
                        help="measure the runner with an async def no-op handler too, in every round")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {"runner": [], "raw": []}
    if args.with_async:
        results["async"] = []
    for i in range(args.repeat):
        results["raw"].append(measure_raw(args.dsn, args.partitions, args.batch))
        results["runner"].append(measure_runner(args.dsn, args.partitions, args.workers, args.max_inflight))
        if args.with_async:
            results["async"].append(measure_runner(args.dsn, args.partitions, args.workers,
                                                   args.max_inflight, is_async=True))
        print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]['runs_per_s']:.0f}/s" for k, v in results.items()),
              file=sys.stderr)
    med = {k: statistics.median(r["runs_per_s"] for r in v) for k, v in results.items()}
    if args.json:
        print(json.dumps({"median_runs_per_s": med, "samples": results}, default=str, indent=2))
        return
    print(f"{'target':<10} {'median runs/s':>14} {'samples':>30}")
    for k, v in results.items():
        samples = ", ".join(f"{r['runs_per_s']:.0f}" for r in v)
        print(f"{k:<10} {med[k]:>14.0f} {samples:>30}")
    print(f"runner / raw ceiling: {med['runner'] / med['raw']:.2f}")
    if args.with_async:
        ratios = [a["runs_per_s"] / s["runs_per_s"] for s, a in zip(results["runner"], results["async"], strict=True)]
        print(f"async / sync runner, same round: median {statistics.median(ratios):.2f}"
              f" (rounds: {', '.join(f'{r:.2f}' for r in ratios)}); async / raw ceiling:"
              f" {med['async'] / med['raw']:.2f}")
        extra = sum(r["extra_attempts"] for r in results["async"])
        print(f"async extra attempts (must be 0): {extra}")
    extra = sum(r["extra_attempts"] for r in results["runner"])
    print(f"extra attempts (must be 0): {extra}; first start lag: "
          f"{statistics.median(r['first_start_lag_s'] for r in results['runner']) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
