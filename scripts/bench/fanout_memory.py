"""Memory of a runner under a fan-out it cannot keep up with (issue 12, point 10).

    python scripts/bench/fanout_memory.py [--dsn URL] [--seconds 60] [--keys 100000] [--every 2s]

One `runner start` process serves one job whose partitions callable returns --keys keys for
every slot, a slot every --every (100,000 keys every 2 s is far beyond what one process
claims and runs, so the queued fan-out would grow without a bound). The process's RSS is
sampled from /proc every 2 s for --seconds; the script prints the samples, the growth over
the second half of the run (MB/s; flat means bounded) and how far the ledger got (runs,
slots fanned out, slots decided late by the misfire duty). A scratch database
`runner_bench_fanout` is created on the server of --dsn and dropped afterwards.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

from benchlib import DEFAULT_DSN, drop_database, recreate_database  # noqa: E402

from runner.store import migrate  # noqa: E402

APP = '''
from runner import Runner

app = Runner()
KEYS = [f"tenant-{{i}}" for i in range({keys})]


@app.job("wide", every="{every}", partitions=lambda slot: KEYS)
def wide(ctx):
    pass
'''


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("BENCH_DSN", DEFAULT_DSN))
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--every", default="2s")
    args = parser.parse_args()

    name = "runner_bench_fanout"
    recreate_database(args.dsn, name)
    if not args.dsn.startswith(("postgresql://", "postgres://")):
        raise SystemExit("--dsn must be a postgresql:// URL")
    url = args.dsn.split("?")[0].rsplit("/", 1)[0] + "/" + name
    try:
        migrate.upgrade(url)
        with tempfile.TemporaryDirectory() as tmp:
            app = Path(tmp) / "fanout_app.py"
            app.write_text(APP.format(keys=args.keys, every=args.every))
            log = Path(tmp) / "runner.log"
            with open(log, "w") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "runner", "start", "--app", f"{app}:app", "--log-level", "WARNING"],
                    env={**os.environ, "RUNNER_DATABASE_URL": url}, stdout=out, stderr=subprocess.STDOUT)
                samples: list[tuple[float, float]] = []
                print(f"{args.keys} keys every {args.every}, {args.seconds:.0f} s, one runner process")
                print("  t (s)   RSS (MB)", flush=True)
                began = time.monotonic()
                try:
                    time.sleep(2.0)  # the process starts
                    while (elapsed := time.monotonic() - began) < args.seconds:
                        if proc.poll() is not None:
                            raise SystemExit(f"the runner exited ({proc.returncode}):\n{log.read_text()[-2000:]}")
                        samples.append((elapsed, rss_mb(proc.pid)))
                        print(f"  {elapsed:5.1f}   {samples[-1][1]:8.1f}", flush=True)
                        time.sleep(2.0)  # the sampling period
                finally:
                    stopping = time.monotonic()
                    proc.terminate()
                    try:
                        proc.wait(120)
                        print(f"stopped {time.monotonic() - stopping:.1f} s after SIGTERM")
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                        print("still running 120 s after SIGTERM: killed")
                    if os.environ.get("BENCH_KEEP_LOG"):
                        print(log.read_text()[-5000:])
        with psycopg.connect(url, autocommit=True) as conn:
            runs, slots, fanned, late = conn.execute(
                "SELECT (SELECT count(*) FROM runner.job_runs),"
                " (SELECT count(DISTINCT schedule_slot) FROM runner.job_runs),"
                " (SELECT count(*) FROM runner.slot_fanouts),"
                " (SELECT count(*) FROM runner.job_runs WHERE status <> 'succeeded')").fetchone()  # type: ignore[misc]
    finally:
        drop_database(args.dsn, name)

    half = [s for s in samples if s[0] >= args.seconds / 2]
    if len(half) >= 2:
        slope = (half[-1][1] - half[0][1]) / (half[-1][0] - half[0][0])
        print(f"growth over the second half: {slope:+.2f} MB/s (peak {max(m for _, m in samples):.0f} MB)")
    print(f"ledger: {runs} runs over {slots} slots, {fanned} slots fanned out, {late} runs not succeeded")


if __name__ == "__main__":
    main()
