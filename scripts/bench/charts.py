"""Render the Benchmarks page's charts from the recorded figures.

    python scripts/bench/charts.py            # docs/benchmarks/data/*.json -> docs/benchmarks/charts/*.md
    python scripts/bench/charts.py --check    # exit 1 when a committed chart is not what its data renders

One chart per question of docs/benchmarks.md, a mermaid xychart-beta block that the page
includes. The data files are the JSON records the benchmark scripts write with `--record`
(benchrecord.py says their shape); after a run, copy its record over the question's file
and run this script.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchrecord import CHARTS, DATA, QUESTIONS, RecordError, load  # noqa: E402

# the x-axis names of a ratio chart's values (ledger_age)
NAMES = {
    "claim_runs_per_s": "claims/s", "live_lag_p99_ms": "lag p99", "prune_runs_per_s": "pruned/s",
    "status_cmd_s": "runner status", "runs_job_cmd_s": "runner runs", "alerts_sql_s": "alerts",
    "gap_scan_s": "gap scan", "bytes_per_m": "bytes/M runs",
}


YES_NO = "yes/no"  # a 1/0 value, shown as a word

# The questions whose table is rendered too (the others' tables hold figures their data do not:
# ranges over invocations, the peers' columns). Bars: one row per figure, (header, value, format).
COLUMNS: dict[str, list[tuple[str, str, str]]] = {
    "throughput": [("runs/s", "runs_per_s", "{:,.0f}"), ("× runner", "x_runner", "{:.2f}")],
    "console": [("median", "median_ms", "{:.1f} ms"), ("max", "max_ms", "{:.1f} ms")],
    "wide": [("p50", "p50_ms", "{:,.0f} ms"), ("p99", "p99_ms", "{:,.0f} ms"), ("max", "max_ms", "{:,.0f} ms"),
             ("handler start p99", "handler_p99_ms", "{:,.0f} ms"), ("p99 / the baseline's", "x_baseline_p99", "{:.2f}"), ("every run within 1 s", "all_within_1s", YES_NO),
             ("backends, most at once", "backends_most", "{:.0f}")],
    "gapscan": [("ledger rows", "rows", "{:,.0f}"), ("rows listed", "listed", "{:,.0f}"), ("gap scan", "scan_ms", "{:.1f} ms"),
                ("× the first ledger", "x_first", "{:.2f}"), ("buffers hit", "buffers_hit", "{:,.0f}"),
                ("buffers read", "buffers_read", "{:,.0f}"), ("old definition", "old_scan_ms", "{:.1f} ms"),
                ("new / old", "new_over_old", "{:.2f}")],
}
FIRST = {"throughput": "target", "console": "page", "wide": "shape", "gapscan": "ledger"}
# Ratio: one row per figure, one column per ledger size, then the largest over the smallest.
# A row whose smallest ledger does not compare (recipes of "the last 7 days" on 3 days of runs)
# is set against the second smallest: its last field is the row it is set against.
ROWS: dict[str, list[tuple[str, tuple[str, ...], str, float, int]]] = {
    "ledger_age": [
        ("claims, 2 × `runner start`, one fanned-out slot", ("claim_runs_per_s",), "{:,.0f} runs/s", 1, 0),
        ("live lag p99, jobs due every second", ("live_lag_p99_ms",), "{:.1f} ms", 1, 0),
        ("pruning, `runner.prune_v1`", ("prune_runs_per_s",), "{:,.0f} runs/s", 1, 0),
        ("`runner status --json` (wall)", ("status_cmd_s",), "{:.2f} s", 1, 0),
        ("`runner runs --job J --json` (wall)", ("runs_job_cmd_s",), "{:.2f} s", 1, 0),
        ("`SELECT * FROM runner.alerts`", ("alerts_sql_s",), "{:.2f} s", 1, 0),
        ("gap scan, `count(*)` of `runner.missing_slots`", ("gap_scan_s",), "{:,.1f} ms", 1000, 0),
        ("on-call recipes 4 / 7 (the last 7 days)", ("recipe_4_s", "recipe_7_s"), "{:.0f} ms", 1000, 1),
        ("bytes per million runs (runs + attempts, tables + indexes)", ("bytes_per_m",), "{:.0f} MB", 1e-6, 0),
    ],
}


def table(record: dict[str, Any]) -> list[str]:
    """The question's table as markdown lines, or none when the page writes it by hand."""
    name, figures = record["question"], record["figures"]
    if name in COLUMNS:
        cols = COLUMNS[name]
        lines = ["| " + " | ".join([FIRST[name], *(h for h, _, _ in cols)]) + " |",
                 "|---|" + "---:|" * len(cols)]
        for row in figures:
            cells = [_cell(fmt, [row["values"].get(key)]) for _, key, fmt in cols]
            if any(cells):
                lines.append(f"| {row['label']} | " + " | ".join(cells) + " |")
        return lines
    if name in ROWS:
        last = figures[-1]["values"]
        lines = ["| figure | " + " | ".join(r["label"] for r in figures) + f" | {figures[-1]['label']} / "
                 f"{figures[0]['label']} |", "|---|" + "---:|" * (len(figures) + 1)]
        for title, keys, fmt, scale, wanted in ROWS[name]:
            base = min(wanted, len(figures) - 1)
            first = figures[base]["values"]
            if all(row["values"].get(k) is None for row in figures for k in keys):
                continue
            cells = [_cell(fmt, [_scaled(row["values"].get(k), scale) for k in keys]) for row in figures]
            ratio = " / ".join(f"{last[k] / first[k]:.2f}" if first.get(k) and last.get(k) is not None else ""
                               for k in keys)
            if base == len(figures) - 1:
                ratio = ""  # nothing larger to set it against (two sizes, the smaller does not compare)
            elif base:
                ratio = f"{figures[base]['label']} → {figures[-1]['label']}: {ratio}"
            lines.append(f"| {title} | " + " | ".join(cells) + f" | {ratio} |")
        return lines
    return []


def _scaled(value: float | None, scale: float) -> float | None:
    return None if value is None else value * scale


def _cell(fmt: str, values: list[float | None]) -> str:
    """One cell; several values share the unit at its end (`340 / 211 ms`)."""
    if all(v is None for v in values):
        return ""
    if fmt == YES_NO:
        return " / ".join("" if v is None else "yes" if v else "no" for v in values)
    shown = [fmt.format(v) if v is not None else "-" for v in values]
    unit = fmt.split("}", 1)[1]
    return " / ".join(s.removesuffix(unit) for s in shown[:-1]) + (" / " if len(shown) > 1 else "") + shown[-1]


# mermaid's xychart draws its series in order, each on the last, and has no legend (the caption
# says which is which): the second figure as light bars, the plotted one as dark bars in front,
# a ratio chart's "no change" as a line at 1. More rows or longer labels than fit under the
# bars: bars sideways.
DARK, LIGHT, LINE = "#3949ab", "#9fa8da", "#e65100"
# The chart is drawn on white in both of the site's schemes; the theme's mermaid styles colour a
# text that is the last of its group (the title, the axes' titles, their last labels) in the
# scheme's label colour, which in the dark scheme is white on white: every text stays dark.
TEXT_CSS = "text { fill: #333333; }"
WIDTH, HEIGHT, ROW, SIDEWAYS = 700, 400, 26, 6
LABEL_ROOM = 75  # characters of labels that fit under the bars (the wide chart's baseline label did not)


def render(record: dict[str, Any], data_name: str) -> str:
    """The chart file of one record: its table when rendered, a mermaid block, where it came from."""
    question = QUESTIONS[record["question"]]
    if question.kind == "ratio":
        labels, series, top = _ratios(record, question.plot)
        plots = [("bar", DARK, series[0]), ("line", LINE, [1.0] * len(labels))]
    else:
        labels, series, top = _bars(record, question.plot)
        plots = [*(("bar", LIGHT, values) for values in series[1:]), ("bar", DARK, series[0])]
    sideways = len(labels) > SIDEWAYS or max(map(len, labels)) * len(labels) > LABEL_ROOM
    day = record["date"][:10]
    rows = table(record)
    lines = [
        "<!-- generated by python scripts/bench/charts.py from docs/benchmarks/data/"
        f"{data_name}: edit the data, not this file -->",
        *([*rows, ""] if rows else []),
        "```mermaid",
        "---",
        "config:",
        f'  themeCSS: "{TEXT_CSS}"',
        "  xyChart:",
        f"    width: {WIDTH}",
        f"    height: {max(HEIGHT, 80 + ROW * len(labels)) if sideways else HEIGHT}",
        "  themeVariables:",
        "    xyChart:",
        f'      plotColorPalette: "{", ".join(color for _, color, _ in plots)}"',
        "---",
        "xychart-beta" + (" horizontal" if sideways else ""),
        f'    title "{_text(question.title)} ({day})"',
        "    x-axis [" + ", ".join(f'"{_text(label)}"' for label in labels) + "]",
        f'    y-axis "{_text(question.y_label)}" 0 --> {_nice(top)}',
        *(f"    {kind} [" + ", ".join(_fmt(v) for v in values) + "]" for kind, _, values in plots),
        "```",
    ]
    origin = "transcribed from the benchmark archive" if record["transcribed"] else "recorded"
    shown = len(series) > 1 or question.kind == "ratio"
    legend = f"{question.legend[0].upper()}{question.legend[1:]}. " if question.legend and shown else ""
    lines.append("")
    lines.append(f"<small>{legend}Chart of `{record['command']}`, {origin} ({record['date']}{_load(record)});"
                 f" data: `docs/benchmarks/data/{data_name}`.</small>")
    return "\n".join(lines) + "\n"


def _load(record: dict[str, Any]) -> str:
    """The machine's 1-minute load average at the start and at the end, as the caption gives it."""
    load = record.get("load")
    if isinstance(load, dict) and load.get("start") and load.get("end"):
        return f", load {load['start'][0]:.1f} at the start, {load['end'][0]:.1f} at the end"
    return f", load {load}" if isinstance(load, str) else ""


def _bars(record: dict[str, Any], plot: tuple[str, ...]) -> tuple[list[str], list[list[float]], float]:
    rows = [r for r in record["figures"] if r["values"].get(plot[0]) is not None]
    series = [[r["values"][plot[0]] for r in rows]]
    for name in plot[1:]:  # light bars only where every plotted row has the value
        values = [r["values"].get(name) for r in rows]
        if all(v is not None for v in values):
            series.append(values)
    return [r["label"] for r in rows], series, max(max(s) for s in series)


def _ratios(record: dict[str, Any], plot: tuple[str, ...]) -> tuple[list[str], list[list[float]], float]:
    first, last = record["figures"][0]["values"], record["figures"][-1]["values"]
    names = [n for n in plot if first.get(n) and last.get(n) is not None]
    ratios = [round(last[n] / first[n], 2) for n in names]
    return [NAMES.get(n, n) for n in names], [ratios], max(max(ratios), 1.0)


def _nice(top: float) -> float | int:
    """A round axis end a little above the largest value."""
    target = top * 1.1
    step = 10 ** math.floor(math.log10(target)) if target > 0 else 1
    for mult in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if step * mult >= target:
            end = step * mult
            return int(end) if end >= 1 and float(end).is_integer() else round(end, 6)
    return target  # not reached


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _text(text: str) -> str:
    return text.replace('"', "'")


def expected(data: Path = DATA) -> dict[str, str]:
    """Chart file name -> its text, for every record in data."""
    out: dict[str, str] = {}
    for path in sorted(data.glob("*.json")):
        record = load(path)
        if path.stem != record["question"]:
            raise RecordError(f"{path}: holds question {record['question']!r}; name it {record['question']}.json")
        out[f"{path.stem}.md"] = render(record, path.name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a chart is stale")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--charts", type=Path, default=CHARTS)
    args = parser.parse_args(argv)
    try:
        charts = expected(args.data)
    except RecordError as exc:
        print(f"charts.py: {exc}", file=sys.stderr)
        return 2
    missing = sorted(set(QUESTIONS) - {name.removesuffix(".md") for name in charts})
    if missing:
        print(f"charts.py: no data for {', '.join(missing)} in {args.data}", file=sys.stderr)
        return 2
    stale = [n for n, text in charts.items()
             if not (args.charts / n).exists() or (args.charts / n).read_text() != text]
    extra = sorted(p.name for p in args.charts.glob("*.md") if p.name not in charts) if args.charts.exists() else []
    if args.check:
        for name in stale + extra:
            print(f"{args.charts / name}: stale; run python scripts/bench/charts.py", file=sys.stderr)
        return 1 if stale or extra else 0
    args.charts.mkdir(parents=True, exist_ok=True)
    for name in stale:
        (args.charts / name).write_text(charts[name])
        print(f"wrote {args.charts / name}")
    for name in extra:
        (args.charts / name).unlink()
        print(f"removed {args.charts / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
