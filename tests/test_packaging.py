"""The wheel holds every package of the runner: pyproject.toml lists its packages by hand
(sql/ and migrations/ are mapped into the package), so a new subpackage must be listed there,
else the installed runner fails to import it (scripts/wheel_check.py found runner.worker
missing). A newcomer's editable install does not show it; this test does."""

from __future__ import annotations

import tomllib

from tests.support import ROOT


def test_every_subpackage_of_runner_is_in_the_wheel() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "runner").rglob("__init__.py")}
    missing = found - listed
    assert not missing, f"add {sorted(missing)} to [tool.setuptools] packages in pyproject.toml"
