"""Throughput side by side, in one run: runner, the raw ceiling, pgqueuer, procrastinate.

    scripts/bench/setup_peers.sh            # once: the peers' own virtualenv
    python scripts/bench/compare_throughput.py [--jobs 10000] [--repeat 3]

Rounds are interleaved (every target once per round), so a noisy neighbour hurts all
targets alike; the table reports medians and the ratios of the medians. Each sample uses a
fresh database. runner: two `runner start` processes draining one slot fanned out to N
partitions (runner_throughput.py); raw: the same ledger statements in a minimal loop, each
process claiming its own share, min(--max-inflight, 1000) rows a statement (the largest claim
the runner issues);
peers: two worker processes each draining N no-op jobs (peers_throughput.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchrecord  # noqa: E402
import peers_throughput  # noqa: E402
import runner_throughput  # noqa: E402

from runner.worker.loop import LoopConfig  # noqa: E402

LABELS = {"pgqueuer-b100": "pgqueuer b100"}  # the page's names of the targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--max-inflight", type=int, default=512)
    parser.add_argument("--peers", nargs="*", default=["pgqueuer", "pgqueuer-b100", "procrastinate"])
    benchrecord.add_option(parser)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {"runner": [], "raw ceiling": [], **{p: [] for p in args.peers}}
    for i in range(args.repeat):
        # the raw loop's statements are as large as the runner's can be: one claim statement
        # holds at most min(max_inflight, claim_batch) rows
        raw_batch = min(args.max_inflight, LoopConfig.claim_batch)
        samples["raw ceiling"].append(runner_throughput.measure_raw(args.dsn, args.jobs, raw_batch)["runs_per_s"])
        samples["runner"].append(runner_throughput.measure_runner(
            args.dsn, args.jobs, args.workers, args.max_inflight)["runs_per_s"])
        for peer in args.peers:
            samples[peer].append(peers_throughput.run_peer_throughput(peer, args.jobs, args.dsn))
        print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:.0f}/s" for k, v in samples.items()), file=sys.stderr)
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"{'target':<16} {'median runs/s':>14}  {'x runner':>8}  samples")
    for k, v in samples.items():
        print(f"{k:<16} {med[k]:>14.0f}  {med[k] / med['runner']:>8.2f}  {', '.join(f'{x:.0f}' for x in v)}")
    print(f"runner / raw ceiling = {med['runner'] / med['raw ceiling']:.2f} (target: >= 0.5)")
    benchrecord.write(args.record, benchrecord.make(
        "throughput", f"median runs per second of {args.jobs:,} no-op runs due at one slot, two processes each"
        f" (--workers {args.workers} --max-inflight {args.max_inflight}), {args.repeat} rounds", "runs/s",
        [{"label": LABELS.get(k, k), "values": {"runs_per_s": med[k], "x_runner": med[k] / med["runner"]},
          "samples": v} for k, v in samples.items()]))


if __name__ == "__main__":
    main()
