"""scripts/screenshots.py, run for real so that it cannot rot: it seeds a demo ledger in the
test's database, starts two `runner start` and a `runner web`, and shoots every console page
in Chromium into a tmp dir. Every expected PNG must be there, a real image of the viewport's
size and not a blank one, and the script must exit 0: it exits 1 when a page answered an
HTTP error or logged a console error. The committed docs/img/ has the same files, and every
image the tutorial names is there.

Skipped, with the reason, where /usr/bin/chromium is missing (``apt-get install -y chromium``)."""

from __future__ import annotations

import importlib.util
import re
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support import ROOT

CHROMIUM = Path("/usr/bin/chromium")
SCRIPT = ROOT / "scripts" / "screenshots.py"
IMG = ROOT / "docs" / "img"


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("screenshots", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path.name} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def expected() -> dict[str, tuple[int, int]]:
    """file -> (width, height) of every screenshot the script takes."""
    shots = script()
    return {name: (options["viewport"]["width"], options["viewport"]["height"])
            for name, _, options in shots.pages({"dead": 1, "plan": 1})}


@pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium: `apt-get install -y chromium`")
@pytest.mark.slow  # real runner start / runner web processes for tens of seconds: scheduled first
def test_the_script_shoots_every_page_without_an_error(db_url: str, tmp_path: Path) -> None:
    out = tmp_path / "img"
    done = subprocess.run([sys.executable, str(SCRIPT), "--database-url", db_url, "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "problems" not in done.stderr, done.stderr
    for name, size in expected().items():
        path = out / name
        assert path.exists(), f"{name} missing\n{done.stdout}"
        assert png_size(path) == size, name
        assert path.stat().st_size > 8_000, f"{name}: {path.stat().st_size} bytes, a blank page?"
    assert sorted(p.name for p in out.iterdir()) == sorted(expected()), "only the expected files"


def test_the_committed_screenshots_are_the_scripts() -> None:
    names = expected()
    committed = {p.name for p in IMG.glob("*.png")}
    assert committed == set(names), "docs/img/ holds exactly what scripts/screenshots.py makes (run it)"
    total = 0
    for name, size in names.items():
        assert png_size(IMG / name) == size, name
        total += (IMG / name).stat().st_size
    assert total < 500_000, f"docs/img/ is {total // 1024} KB: keep the screenshots small"


def test_every_image_the_tutorial_names_exists() -> None:
    for page in (ROOT / "docs" / "tutorial").rglob("*.md"):
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", page.read_text()):
            if "://" not in target:
                assert (page.parent / target).resolve().exists(), f"{page.relative_to(ROOT)}: no {target}"
