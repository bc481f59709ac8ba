"""Two versions of the gap scan's function on the same ledgers, interleaved.

    python scripts/bench/scan_variants.py OLD NEW [--rounds 5] [--dbs DB ...]

OLD and NEW each define runner.missing_slots_v1 and the view over it: a file, or REV:PATH, the
file PATH as of git revision REV of this repository, read with `git show` (e.g.
`f5aa018^:sql/revisions/0016_health.missing_slots.sql`, the definition of revision 0016_health,
against the live `sql/views/missing_slots.sql`). On each ledger (by default the three
kept by `BENCH_KEEP_DB=1 scripts/bench/ledger_age.py`, or seeded with its --seed-only), each
round applies each file in turn and times `SELECT count(*) FROM runner.missing_slots` (the
fastest of 3), then counts the buffers of one scan (auto_explain's nested plan in the server
log: --log, default the newest /var/log/postgresql/*.log). The ledgers are only read; the file
applied last is the second (NEW). With --behind INTERVAL (e.g. '6 hours') each scan runs in a
transaction rolled back after it, where every job's watermark is moved back by INTERVAL and the
holes above it are set aside: the scan after the watermark advance has lagged that long (a
fleet down for a while), where the probes for slots without a run are most of its work. Prints JSON: per ledger and file the rows listed, the median
time, the buffers (hit, read), and NEW/OLD and each ledger against the first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import benchrecord
import psycopg
from benchlib import auto_explain_buffers, newest_server_log
from psycopg.conninfo import make_conninfo

SCAN = "SELECT count(*) FROM runner.missing_slots"
REPO = Path(__file__).resolve().parents[2]
DEFAULT_DBS = ["bench_ledger_age_1000000", "bench_ledger_age_10000000", "bench_ledger_age_30000000"]


def _buffers(buffers: Any) -> dict[str, Any]:
    """(hit, read) as auto_explain_buffers gives them, or nothing when the log had none."""
    if isinstance(buffers, list | tuple) and len(buffers) == 2:
        return {"buffers_hit": buffers[0], "buffers_read": buffers[1]}
    return {}


def read_definition(spec: str) -> str:
    """The SQL of `spec`: an existing file, else REV:PATH read from this repository's history."""
    if Path(spec).is_file():
        return Path(spec).read_text()
    rev, sep, path = spec.partition(":")
    if not sep or not rev or not path:
        raise ValueError(f"{spec}: no such file, and not REV:PATH (a git revision and a path in it)")
    out = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or ["git show failed"])[-1]
        raise ValueError(f"{spec}: {why.removeprefix('fatal: ')}")
    return out.stdout


@contextmanager
def lagging(conn: psycopg.Connection[Any], behind: str | None) -> Iterator[None]:
    """With ``behind``: a transaction, rolled back at the end, in which every watermark is
    ``behind`` earlier and the holes above it are set aside (the scan expands those slots)."""
    if behind is None:
        yield
        return
    with conn.transaction(force_rollback=True):
        conn.execute("UPDATE runner.gap_watermarks SET complete_through = complete_through - %s::interval"
                     " WHERE complete_through IS NOT NULL", (behind,))
        conn.execute("DELETE FROM runner.gap_holes h USING runner.gap_watermarks w"
                     " WHERE w.job_name = h.job_name AND h.schedule_slot > w.complete_through")
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs=2, metavar="FILE",
                        help="OLD and NEW definitions of runner.missing_slots_v1: a file or REV:PATH (git show)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dbs", nargs="+", default=DEFAULT_DBS)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--log", default=None)
    parser.add_argument("--behind", default=None, metavar="INTERVAL",
                        help="scan with every watermark moved back by INTERVAL (rolled back after each scan)")
    benchrecord.add_option(parser)
    args = parser.parse_args()
    if args.files[0] == args.files[1]:
        parser.error("OLD and NEW are the same definition")
    try:  # the labels are the arguments as given: an old revision of a file has the live file's name
        sources = {f: read_definition(f) for f in args.files}
    except (OSError, ValueError) as exc:
        print(f"scan_variants.py: {exc}", file=sys.stderr)
        sys.exit(2)
    log = args.log or newest_server_log()
    names = list(sources)
    conns = {d: psycopg.connect(make_conninfo(args.dsn, dbname=d), autocommit=True) for d in args.dbs}
    out: dict[str, dict[str, dict[str, Any]]] = {d: {n: {"ms": []} for n in names} for d in args.dbs}
    for c in conns.values():
        c.execute("SET jit = off")
    for _ in range(args.rounds):
        for d, c in conns.items():
            for n in names:
                c.execute(sources[n])  # type: ignore[arg-type]
                with lagging(c, args.behind):
                    c.execute(SCAN).fetchone()  # (warm: the first scan after a replace plans it)
                times = []
                for _ in range(3):
                    with lagging(c, args.behind):
                        t = time.perf_counter()
                        c.execute(SCAN).fetchone()
                        times.append(time.perf_counter() - t)
                out[d][n]["ms"].append(round(min(times) * 1000, 1))
    for d, c in conns.items():
        for n in names:
            c.execute(sources[n])  # type: ignore[arg-type]
            with lagging(c, args.behind):
                out[d][n]["listed"] = c.execute(SCAN).fetchone()[0]  # type: ignore[index]
                out[d][n]["buffers"] = auto_explain_buffers(c, SCAN, log)
            out[d][n]["median_ms"] = statistics.median(out[d][n]["ms"])
    first = args.dbs[0]
    summary = {d: {"new_over_old": round(out[d][names[1]]["median_ms"] / out[d][names[0]]["median_ms"], 3),
                   **{f"{n}_over_{first}": round(out[d][n]["median_ms"] / out[first][n]["median_ms"], 3)
                      for n in names}}
               for d in args.dbs}
    print(json.dumps({"load": os.getloadavg(), "behind": args.behind, "files": names, "results": out, "summary": summary}, indent=1))
    print(json.dumps(summary), file=sys.stderr)
    rows = {d: c.execute("SELECT count(*) FROM runner.job_runs").fetchone()[0] for d, c in conns.items()}  # type: ignore[index]
    new = names[1]  # the definition applied last, the one the page cites
    benchrecord.write(args.record, benchrecord.make(
        "gapscan", f"count(*) of runner.missing_slots with {new}, median of {args.rounds} rounds (fastest of 3 each)"
        + (f", every watermark {args.behind} behind" if args.behind else ""),
        "ms", [{"label": f"{benchrecord.size_label(rows[d])} runs", "values": {
            "rows": rows[d], "scan_ms": out[d][new]["median_ms"], "listed": out[d][new]["listed"],
            **_buffers(out[d][new]["buffers"]), "x_first": summary[d][f"{new}_over_{first}"],
            "old_scan_ms": out[d][names[0]]["median_ms"], "new_over_old": summary[d]["new_over_old"]},
            "old": names[0]}
            for d in args.dbs]))


if __name__ == "__main__":
    main()
