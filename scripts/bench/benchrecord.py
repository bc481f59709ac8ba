"""The figures a benchmark answers one question of docs/benchmarks.md with, as a JSON file.

A script given `--record FILE` writes one record: which question, what was measured, the
command line, the date, the machine's load average at start and at the end, and the figures,
one row per thing compared (a target, a size, a page), each row a label and its values:

    {"format": 1, "question": "throughput", "measured": "...", "unit": "runs/s",
     "command": "python scripts/bench/compare_throughput.py --repeat 3",
     "date": "2026-11-29T22:18:00Z", "load": {"start": [..], "end": [..]}, "transcribed": false,
     "figures": [{"label": "runner", "values": {"runs_per_s": 14145.0}}, ...]}

The records the page cites live in docs/benchmarks/data/<question>.json; `python
scripts/bench/charts.py` renders each into docs/benchmarks/charts/<question>.md. A record
transcribed by hand from the benchmark archive says `"transcribed": true` and where from.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = 1
REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "docs" / "benchmarks" / "data"
CHARTS = REPO / "docs" / "benchmarks" / "charts"
_LOAD_AT_IMPORT = [round(x, 2) for x in os.getloadavg()]


@dataclass(frozen=True)
class Question:
    """One question of the page: its heading, the script that answers it, what the chart plots."""

    heading: str
    script: str
    title: str
    y_label: str
    plot: tuple[str, ...]  # the values plotted: the first as dark bars, the others as light bars behind them
    kind: str = "bars"  # "bars": one x position per figure row; "ratio": one per value, last row / first
    legend: str = ""  # what the dark and the light bars are, when there are both


QUESTIONS: dict[str, Question] = {
    "throughput": Question(
        "How many runs per second, against the peers and the ceiling?", "compare_throughput.py",
        "No-op runs per second, two processes", "runs/s", ("runs_per_s",)),
    "lag": Question(
        "How late does a slot start, by how many jobs share it?", "runner_lag.py",
        "Slot start lag p99", "ms", ("p99_ms", "entered_p99_ms"),
        legend="dark: the attempt started (the ledger); light, behind: the handler entered"),
    "wide": Question(
        "How fast does a wide instant start?", "wide_instants.py",
        "Start lag of 10,000 runs due at one instant", "ms", ("p99_ms", "max_ms"),
        legend="dark: p99; light, behind: max"),
    "gapscan": Question(
        "Does the gap scan cost grow with the ledger?", "scan_variants.py",
        "Gap scan by ledger size", "ms", ("scan_ms",)),
    "console": Question(
        "How fast are the console's pages?", "web_latency.py",
        "Console pages", "ms", ("median_ms", "max_ms"),
        legend="dark: median; light, behind: max"),
    "ledger_age": Question(
        "Does the runner slow down as the ledger ages?", "ledger_age.py",
        "Largest ledger over the smallest", "× smallest",
        ("claim_runs_per_s", "live_lag_p99_ms", "prune_runs_per_s", "status_cmd_s", "runs_job_cmd_s",
         "alerts_sql_s", "gap_scan_s", "bytes_per_m"), kind="ratio",
        legend="each figure on the largest ledger over the same on the smallest; the line at 1: no change"),
    "takeover": Question(
        "How fast is a dead owner replaced?", "takeover_resources.py",
        "Takeover after kill -9 (poll interval 1 s)", "s", ("takeover_s",)),
}


class RecordError(ValueError):
    """A record file charts.py cannot use; the message is one line naming the file."""


def add_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--record", metavar="FILE", type=Path,
                        help="also write the figures as JSON (docs/benchmarks/data/<question>.json is the page's)")


def command_line(argv: list[str] | None = None) -> str:
    """The command as typed from the repository's root: `python scripts/bench/x.py ...`."""
    argv = list(sys.argv if argv is None else argv)
    for i, arg in enumerate(argv):  # where the figures were written is not how they were measured
        if arg == "--record":
            del argv[i:i + 2]
            break
        if arg.startswith("--record="):
            del argv[i]
            break
    script = Path(argv[0]).resolve()
    shown = str(script.relative_to(REPO)) if script.is_relative_to(REPO) else argv[0]
    return shlex.join(["python", shown, *argv[1:]])


def make(question: str, measured: str, unit: str, figures: list[dict[str, Any]],
         argv: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    """A record of this run: the command, now, the load at import and now, the figures."""
    record = {
        "format": FORMAT, "question": question, "measured": measured, "unit": unit,
        "command": command_line(argv), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load": {"start": _LOAD_AT_IMPORT, "end": [round(x, 2) for x in os.getloadavg()]},
        "transcribed": False, **extra,
        "figures": [{"label": str(f["label"]), "values": {k: _number(v) for k, v in f["values"].items()},
                     **{k: v for k, v in f.items() if k not in ("label", "values")}}  # e.g. the samples
                    for f in figures],
    }
    check(record, f"<{question} record>")
    return record


def write(path: Path | None, record: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    print(f"recorded {record['question']} figures in {path}", file=sys.stderr)


def load(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise RecordError(f"{path}: not a readable JSON record ({exc})") from None
    check(record, str(path))
    return record  # type: ignore[no-any-return]


def check(record: Any, where: str) -> None:
    """Raise RecordError unless record has every field a chart needs, of the right kind."""
    if not isinstance(record, dict):
        raise RecordError(f"{where}: a record is a JSON object")
    if record.get("format") != FORMAT:
        raise RecordError(f"{where}: format must be {FORMAT}, not {record.get('format')!r}")
    question = record.get("question")
    if question not in QUESTIONS:
        raise RecordError(f"{where}: unknown question {question!r} (one of {', '.join(QUESTIONS)})")
    for key in ("measured", "unit", "command", "date"):
        if not isinstance(record.get(key), str) or not record[key]:
            raise RecordError(f"{where}: {key} must be a non-empty string")
    if not isinstance(record.get("transcribed"), bool):
        raise RecordError(f"{where}: transcribed must be true or false")
    if record["transcribed"] and not isinstance(record.get("source"), str):
        raise RecordError(f"{where}: a transcribed record says where from in source")
    figures = record.get("figures")
    if not isinstance(figures, list) or not figures:
        raise RecordError(f"{where}: figures must be a non-empty list")
    for row in figures:
        if not isinstance(row, dict) or not isinstance(row.get("label"), str) or not isinstance(row.get("values"), dict):
            raise RecordError(f"{where}: each figure is {{'label': str, 'values': {{name: number}}}}")
        for name, value in row["values"].items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise RecordError(f"{where}: {row['label']} {name} is {value!r}, not a number")
    wanted = QUESTIONS[question].plot
    if not any(row["values"].get(wanted[0]) is not None for row in figures):
        raise RecordError(f"{where}: no figure has {wanted[0]}, the value its chart plots")


def size_label(rows: int) -> str:
    """A ledger's size as the page writes it: 1M, 30M, 50k."""
    return f"{rows / 1e6:.3g}M" if rows >= 1_000_000 else f"{rows / 1e3:.3g}k"


def _number(value: Any) -> int | float | None:
    if value is None or isinstance(value, str):
        return None  # e.g. web_latency.py's "HTTP 500" for a page that failed
    if isinstance(value, int):
        return value
    number = float(value)
    return None if math.isnan(number) else round(number, 3)
