"""No import circle among the runner's modules (issue 27). Every import of a runner module
counts, at module level or inside a function (a lazy import is a dependency all the same:
``Runner.running()`` importing runner/worker/inprocess.py closed a circle of 16 modules
through runner/worker/loop.py until the job model moved below the process,
runner/model/jobs.py). An import of a package's ``__init__`` (``from runner import
__version__``) is not an edge: it only hands names on, and every submodule's import runs it
anyway.

The layers (docs/contributing.md, "Where things live"): the model imports nothing of the store,
the worker, the actions or the faces; the store nothing of the worker, the actions or the faces;
the worker and the actions nothing of the faces; the common ground at the top of the package
nothing of any layer. "Imports" is reach: through any chain of modules, at the top or not."""

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


# The modules at the top of the package, none of them in a layer: what users import
# (README.md, docs/), and the common ground that every layer may use.
PUBLIC = {"runner", "runner.__main__", "runner.aio", "runner.context", "runner.example", "runner.pytest_plugin",
          "runner.testing", "runner.verification"}
COMMON = {"runner.errors", "runner.events", "runner.printable", "runner.settings"}
# runner/sqlfiles.py is the store's, at the top because the shipped migrations import it by that
# name (migrations/versions/*.py never change: migrations/shipped.txt)
SQLFILES = "runner.sqlfiles"
FACES = {"runner.cli", "runner.web"}

# What each layer may not reach.
NEVER = {
    "model": {"store", "worker", "actions", "faces"},
    "store": {"worker", "actions", "faces"},
    "worker": {"faces"},
    "actions": {"faces"},
    "common": {"model", "store", "worker", "actions", "faces"},
}

# Imports of today's code that break a rule: each is named here with its reason, and is the
# only way through; fixing one fails this test until it is struck.
KNOWN_BREAKS = {
    # Runner.running() makes the runner inside the application (a lazy import)
    ("runner.model.app", "runner.worker.inprocess"),
    # a job declares its verification kinds (users import them from runner.verification), and
    # that module also runs them, through the store's SQL files
    ("runner.model.app", "runner.verification"),
    ("runner.model.jobs", "runner.verification"),
}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if module in FACES or ".".join(parts[:2]) in FACES:
        return "faces"
    if module == SQLFILES:
        return "store"
    if module in COMMON:
        return "common"
    if len(parts) >= 2 and parts[1] in ("model", "store", "worker", "actions"):
        return parts[1]
    return None


def _reach(graph: dict[str, set[str]], start: str) -> dict[str, list[str]]:
    """Every module ``start`` reaches, each with one shortest chain of imports to it."""
    paths = {start: [start]}
    todo = [start]
    while todo:
        node = todo.pop(0)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                todo.append(nxt)
    return paths


def test_every_module_has_its_place() -> None:
    graph = _graph()
    placed = {m for m in graph if _layer(m) is not None} | PUBLIC
    assert set(graph) - placed == set(), "a module of no layer: move it into one, or say why it stays at the top"
    assert not PUBLIC - set(graph), f"gone: {sorted(PUBLIC - set(graph))}"


def test_the_layers_import_downwards_only() -> None:
    graph = _graph()
    for source, target in KNOWN_BREAKS:
        assert target in graph[source], f"{source} no longer imports {target}: strike it from KNOWN_BREAKS"
        graph[source] = graph[source] - {target}
    broken = []
    for module in sorted(graph):
        forbidden = NEVER.get(_layer(module) or "", set())
        for reached, chain in _reach(graph, module).items():
            if _layer(reached) in forbidden:
                broken.append(" -> ".join(chain))
    assert broken == [], "a layer imports upwards:\n" + "\n".join(broken)
