"""The documentation site builds with no warning, leaves no page out, and the README stays short.

`mkdocs build --strict` (mkdocs.yml) fails on a broken link or anchor, a nav entry without its
file and a page missing from the nav; the checks below say the same in words a failing run
can act on, and hold the README to its size and its test command (CI runs "the README's test
command")."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

DOCS = ROOT / "docs"
TEST_COMMAND = "python -m pytest -q -n 2 --dist worksteal"


def nav_pages() -> list[str]:
    """Every page the nav of mkdocs.yml names, relative to docs/, in order."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text[text.index("\nnav:\n"):]
    return re.findall(r"^\s+-\s+(?:[^\n]*?:\s+)?([\w./-]+\.md)\s*$", nav, re.MULTILINE)


def doc_pages() -> set[str]:
    # docs/benchmarks/charts/ holds pieces the Benchmarks page includes (exclude_docs in mkdocs.yml)
    return {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")
            if not path.is_relative_to(DOCS / "benchmarks" / "charts")}


def links(page: str) -> set[str]:
    """The pages a page links to (relative .md links), relative to docs/."""
    base = (DOCS / page).parent
    found = set()
    for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", (DOCS / page).read_text(encoding="utf-8")):
        resolved = (base / target).resolve()
        if resolved.is_relative_to(DOCS.resolve()):
            found.add(resolved.relative_to(DOCS.resolve()).as_posix())
    return found


def test_the_site_builds_strictly_with_no_warning(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.fail("mkdocs and the Material theme are missing: pip install -e '.[dev]'")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    log = out.stdout + out.stderr
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert out.returncode == 0 and not warnings, "\n".join(warnings) or log[-3000:]
    assert (tmp_path / "site" / "index.html").stat().st_size > 0


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    listed = nav_pages()
    assert len(listed) == len(set(listed)), f"listed twice: {sorted(p for p in listed if listed.count(p) > 1)}"
    assert not doc_pages() - set(listed), f"pages left out of mkdocs.yml's nav: {sorted(doc_pages() - set(listed))}"
    assert not set(listed) - doc_pages(), f"nav entries without a file: {sorted(set(listed) - doc_pages())}"


def test_every_page_is_within_two_clicks_of_home() -> None:
    one = links("index.md")
    two = set().union(*(links(page) for page in one))
    far = doc_pages() - {"index.md"} - one - two
    assert not far, f"more than two clicks from docs/index.md: {sorted(far)}"


def test_the_readme_is_short_and_carries_the_test_command_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 150, f"README.md has {len(readme.splitlines())} lines: move text into docs/"
    assert f"```sh\n{TEST_COMMAND}\n```" in readme
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip().endswith(TEST_COMMAND)
