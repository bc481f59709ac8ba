"""No import circle among the runner's modules (issue 27). Every import of a runner module
counts, at module level or inside a function (a lazy import is a dependency all the same:
``Runner.running()`` importing runner/inprocess.py closed a circle of 16 modules through
runner/loop.py until the job model moved below the process, runner/jobs.py). An import of a
package's ``__init__`` (``from runner import __version__``) is not an edge: it only hands
names on, and every submodule's import runs it anyway."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "runner"


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    files = {_name(p): p for p in PACKAGE.rglob("*.py")}
    packages = {_name(p) for p in PACKAGE.rglob("__init__.py")}
    modules = set(files) - packages
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph (a list of modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def test_the_runner_modules_import_each_other_in_no_circle() -> None:
    circle = _circle(_graph())
    assert circle is None, "an import circle: " + " -> ".join(circle or [])
