"""The Benchmarks page's charts come from the benchmark scripts' recorded figures.

Each question of docs/benchmarks.md includes one chart, docs/benchmarks/charts/<question>.md,
which scripts/bench/charts.py renders from docs/benchmarks/data/<question>.json; each script
behind a question writes such a file with --record. One cheap script (runner_lag.py, a few
seconds) runs for real against the test server.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT

BENCH = ROOT / "scripts" / "bench"
sys.path.insert(0, str(BENCH))

import benchrecord  # noqa: E402
import charts  # noqa: E402

PAGE = ROOT / "docs" / "benchmarks.md"


def sections() -> dict[str, str]:
    """Each question of the page (a `## ...?` heading) and its text."""
    parts = re.split(r"^## (.+)$", PAGE.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {heading.strip(): body for heading, body in zip(parts[1::2], parts[2::2], strict=True)
            if heading.strip().endswith("?")}


def test_the_committed_charts_are_what_charts_py_renders_from_the_committed_data() -> None:
    wanted = charts.expected()
    committed = {p.name: p.read_text(encoding="utf-8") for p in benchrecord.CHARTS.glob("*.md")}
    stale = sorted(n for n in wanted.keys() | committed.keys() if wanted.get(n) != committed.get(n))
    assert not stale, f"charts not what their data render: {stale}; run python scripts/bench/charts.py"
    assert charts.main(["--check"]) == 0


def test_every_question_of_the_page_has_its_chart_and_its_data() -> None:
    by_heading = {q.heading: name for name, q in benchrecord.QUESTIONS.items()}
    found = sections()
    assert set(found) == set(by_heading), (
        f"questions of the page without an entry in benchrecord.QUESTIONS: {sorted(set(found) - set(by_heading))};"
        f" entries no heading of the page asks: {sorted(set(by_heading) - set(found))}")
    for heading, body in found.items():
        name = by_heading[heading]
        includes = re.findall(r'^--8<-- "benchmarks/charts/([\w-]+)\.md"$', body, flags=re.MULTILINE)
        assert includes == [name], f"{heading!r} includes charts {includes}, not [{name!r}]"
        record = benchrecord.load(benchrecord.DATA / f"{name}.json")
        assert record["question"] == name
        script = record["command"].split()[record["command"].split().index("python") + 1]
        assert Path(script).name == benchrecord.QUESTIONS[name].script, f"{name}.json: made by {script}"
        assert "```mermaid" not in body, f"{heading!r}: a hand-written chart; charts come from charts.py"
        if name in charts.COLUMNS or name in charts.ROWS:
            assert "|---" not in body, f"{heading!r}: a hand-written table; charts.py renders this one"
            assert "|---" in charts.table(record)[1]


def test_every_script_behind_a_question_takes_record() -> None:
    for name, question in benchrecord.QUESTIONS.items():
        out = subprocess.run([sys.executable, str(BENCH / question.script), "--help"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "--record FILE" in out.stdout, f"{question.script} (question {name}) has no --record"
        source = (BENCH / question.script).read_text(encoding="utf-8")
        assert re.search(rf'benchrecord\.make\(\s*"{name}"', source), f"{question.script} records no {name!r}"


def test_runner_lag_records_a_file_charts_py_renders(tmp_path: Path) -> None:
    out_file = tmp_path / "lag.json"
    admin = os.environ["RUNNER_TEST_DATABASE_URL"]  # the test server's postgres database (conftest)
    proc = subprocess.run(
        [sys.executable, str(BENCH / "runner_lag.py"), "--dsn", admin, "--jobs", "3", "--seconds", "1",
         "--repeat", "1", "--workers", "2", "--record", str(out_file)],
        cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = benchrecord.load(out_file)
    assert not record["transcribed"]
    assert record["command"].startswith("python scripts/bench/runner_lag.py --dsn")
    assert "--record" not in record["command"]
    assert len(record["load"]["start"]) == 3 and len(record["load"]["end"]) == 3
    [row] = record["figures"]
    assert row["label"] == "3 jobs" and row["values"]["jobs"] == 3
    assert row["values"]["extra_attempts"] == 0
    assert 0 <= row["values"]["p99_ms"] < 1000
    chart = charts.render(record, "lag.json")
    assert 'x-axis ["3 jobs"]' in chart and f"bar [{charts._fmt(row['values']['p99_ms'])}]" in chart


def test_ledger_age_records_one_row_per_size_and_charts_py_draws_largest_over_smallest() -> None:
    def result(rows: int, factor: float) -> dict[str, Any]:  # the shape ledger_age.measure() returns
        return {"rows": rows, "jobs": 1000, "days": rows // 1_000_000 * 3, "claim_runs_per_s": 20000 * factor,
                "live_lag_p99_ms": 7.0, "prune_runs_per_s": 29000, "status_cmd_s": 0.8, "runs_job_cmd_s": 0.4,
                "alerts_sql_s": 2.4, "gap_scan_s": 0.1, "job_health_sql_s": 0.5, "runs_job_sql_s": 0.01,
                "recipes_s": {"4": 0.3, "7": 0.2},
                "runs_bytes_per_m": {"table": 300_000_000, "indexes": 100_000_000},
                "attempts_bytes_per_m": {"table": 150_000_000, "indexes": 50_000_000}}

    import ledger_age

    record = ledger_age.record([result(1_000_000, 1.0), result(30_000_000, 0.5)])
    benchrecord.check(json.loads(json.dumps(record)), "ledger_age record")
    assert [r["label"] for r in record["figures"]] == ["1M", "30M"]
    assert record["figures"][0]["values"]["bytes_per_m"] == 600_000_000
    assert record["figures"][0]["values"]["recipe_4_s"] == 0.3
    chart = charts.render(record, "ledger_age.json")
    assert '"claims/s"' in chart and "bar [0.5, 1, 1," in chart


def test_charts_py_refuses_a_bad_record_in_one_line(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "charts"
    data.mkdir()
    good = benchrecord.make("throughput", "m", "runs/s", [{"label": "runner", "values": {"runs_per_s": 1.0}}],
                            argv=["scripts/bench/compare_throughput.py"])
    (data / "throughput.json").write_text(json.dumps({**good, "figures": [{"label": "runner",
                                                                            "values": {"runs_per_s": "fast"}}]}))
    proc = subprocess.run([sys.executable, str(BENCH / "charts.py"), "--data", str(data), "--charts", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "runs_per_s is 'fast', not a number" in proc.stderr
    assert not out.exists(), "nothing written from bad data"


@pytest.mark.parametrize("name", sorted(benchrecord.QUESTIONS))
def test_each_committed_record_says_how_it_was_made(name: str) -> None:
    record = benchrecord.load(benchrecord.DATA / f"{name}.json")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record["date"]), record["date"]
    assert record["command"].startswith(("python scripts/bench/", "BENCH_KEEP_DB=1 python scripts/bench/"))
    if record["transcribed"]:
        assert "load" in record and record["source"]


def test_scan_variants_reads_an_old_definition_from_a_revision_of_this_repository() -> None:
    import scan_variants

    # revision 0016_health's gap scan, a file the commit f5aa018 removed from the tree
    old = scan_variants.read_definition("f5aa018^:sql/revisions/0016_health.missing_slots.sql")
    assert old.startswith("-- runner.missing_slots: the gap scan.")
    assert "CREATE OR REPLACE FUNCTION runner.missing_slots_v1(" in old
    assert "CREATE OR REPLACE VIEW runner.missing_slots AS" in old
    assert old != (ROOT / "sql" / "views" / "missing_slots.sql").read_text(encoding="utf-8")
    live = scan_variants.read_definition("sql/views/missing_slots.sql")
    assert live == (ROOT / "sql" / "views" / "missing_slots.sql").read_text(encoding="utf-8")


def test_scan_variants_refuses_a_revision_it_cannot_read_in_one_line() -> None:
    for spec, said in (("f5aa018^:sql/revisions/no_such.sql", "no_such.sql"),
                       ("no-such-revision:sql/views/missing_slots.sql", "no-such-revision"),
                       ("no_such_file.sql", "not REV:PATH")):
        proc = subprocess.run([sys.executable, str(BENCH / "scan_variants.py"), spec, "sql/views/missing_slots.sql",
                               "--dbs", "no_such_database"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (spec, proc.stderr[-2000:])
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"scan_variants.py: {spec}: "), proc.stderr
        assert said in proc.stderr


def test_each_chart_colours_every_series_and_draws_the_second_figure_behind_the_first() -> None:
    # mermaid's default bars are a pale lavender on white and its lines join unrelated pages; each
    # series gets a colour of the palette, and the plotted figure is drawn last, in front
    for name, record in ((p.stem, benchrecord.load(p)) for p in sorted(benchrecord.DATA.glob("*.json"))):
        chart = charts.render(record, f"{name}.json")
        [palette] = re.findall(r'plotColorPalette: "([^"]+)"', chart)
        plots = re.findall(r"^    (bar|line) \[(.*)\]$", chart, flags=re.MULTILINE)
        assert len(palette.split(", ")) == len(plots), (name, palette, plots)
        assert f'themeCSS: "{charts.TEXT_CSS}"' in chart, f"{name}: texts the dark scheme colours white on white"
        question = benchrecord.QUESTIONS[name]
        if question.kind == "ratio":
            assert [kind for kind, _ in plots] == ["bar", "line"] and set(plots[1][1].split(", ")) == {"1"}
            continue
        assert all(kind == "bar" for kind, _ in plots), f"{name}: a line across unrelated bars"
        first = [r["values"][question.plot[0]] for r in record["figures"] if r["values"].get(question.plot[0]) is not None]
        assert plots[-1][1] == ", ".join(charts._fmt(v) for v in first), f"{name}: the plotted figure is not in front"
        assert palette.split(", ")[-1] == charts.DARK
        if len(plots) > 1:
            assert question.legend and question.legend[1:] in chart, f"{name}: the caption does not say which bar is which"
