"""docs/reference is generated from the code (scripts/gen_reference.py): the committed pages
must be what the code generates now, and, whatever the generator does, every CLI option,
metric, job option, context member, alert kind, action, environment variable and exit code
the code has must appear in them. The OpenAPI document is fetched from a real `runner web`."""

from __future__ import annotations

import ast
import inspect
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psycopg

from tests.conftest import url_for
from tests.support import ROOT
from tests.web.conftest import OPERATOR_TOKEN, VIEWER_TOKEN, runner_web

REFERENCE = ROOT / "docs" / "reference"
REGENERATE = "run `python scripts/gen_reference.py` and commit docs/reference"
PAGES = ("index", "cli", "jobs", "metrics", "alerts", "sql", "api", "environment", "exit-codes")


def page(name: str) -> str:
    return (REFERENCE / f"{name}.md").read_text()


def section(text: str, heading: str) -> str:
    """The text under ``heading`` (a markdown heading line) up to the next heading of its level."""
    level = heading.split(" ", 1)[0]
    lines = text.splitlines()
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].startswith(level + " ") and not lines[i].startswith(level + "#")), len(lines))
    return "\n".join(lines[start:end])


def test_the_committed_reference_is_what_the_code_generates(tmp_path: Path) -> None:
    out = tmp_path / "reference"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_reference.py"), "--out", str(out),
                           "--server-url", url_for("postgres")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    generated = sorted(p.name for p in out.iterdir())
    committed = sorted(p.name for p in REFERENCE.iterdir())
    assert generated == sorted(f"{n}.md" for n in PAGES)
    assert committed == generated, f"docs/reference holds other files than the generator writes: {REGENERATE}"
    stale = [name for name in generated if (out / name).read_text() != (REFERENCE / name).read_text()]
    assert not stale, f"docs/reference/{', '.join(stale)} differ from what the code generates: {REGENERATE}"


def test_the_generator_refuses_a_job_option_its_docstring_does_not_describe(tmp_path: Path) -> None:
    """The option list of Runner.job's docstring is the reference's source: a parameter
    without its entry stops the generator (checked in a process of its own, on a Runner whose
    docstring lost one entry)."""
    script = f"""
import sys
sys.path.insert(0, {str(ROOT / 'scripts')!r})
import gen_reference
from runner.model.app import Runner
Runner.job.__doc__ = Runner.job.__doc__.replace("            stale_after:", "            not_an_option:")
gen_reference.jobs_page()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode != 0
    assert "stale_after" in done.stderr and "not_an_option" in done.stderr


# -- whatever the generator does: everything the code has is in the pages -----------------------


def cli_tree() -> list[tuple[str, Any]]:
    import typer.main

    from runner import cli

    found: list[tuple[str, Any]] = []

    def walk(group: Any, path: str) -> None:
        for name, sub in group.commands.items():
            found.append((f"{path} {name}", sub))
            if hasattr(sub, "commands"):
                walk(sub, f"{path} {name}")

    walk(typer.main.get_command(cli.app), "runner")
    return found


def test_every_command_and_option_of_the_cli_is_in_cli_md() -> None:
    text = page("cli")
    tree = cli_tree()
    assert len(tree) > 30
    for path, cmd in tree:
        heading = f"## {path}"
        assert heading in text.splitlines(), f"{path} is not in docs/reference/cli.md: {REGENERATE}"
        own = section(text, heading)
        for p in cmd.params:
            if p.param_type_name == "option":
                for flag in [*p.opts, *p.secondary_opts]:
                    assert f"`{flag}`" in own, f"{path} {flag} is not in docs/reference/cli.md: {REGENERATE}"
                if isinstance(p.envvar, str):
                    assert f"`{p.envvar}`" in own
            else:
                assert f"`{p.name.upper()}`" in own, f"{path} {p.name.upper()}: {REGENERATE}"


def test_every_command_option_and_argument_of_the_cli_says_what_it_is() -> None:
    """The reference shows each one's help: a command, option or argument without one would be
    a bare name there."""
    bare = [f"{path} {p.opts[0]}" for path, cmd in cli_tree() for p in cmd.params if not (p.help or "").strip()]
    bare += [path for path, cmd in cli_tree() if not (cmd.help or "").strip()]
    assert not bare, f"no help text: {bare}"


def test_every_metric_of_the_registry_is_in_metrics_md(db_url: str) -> None:
    from runner.worker.metrics import LedgerCollector, Metrics

    text = page("metrics")
    names = {m.name for m in Metrics().registry.collect()}
    collector = LedgerCollector(lambda: psycopg.connect(db_url, autocommit=True))
    try:
        ledger = {m.name for m in collector.collect()}
    finally:
        collector.close()
    assert len(ledger) > 10, "the ledger collector yields its families on a migrated ledger"
    for name in sorted(names | ledger):
        assert f"`{name}" in text, f"metric {name} is not in docs/reference/metrics.md: {REGENERATE}"
    for family in Metrics().registry.collect():
        if family.type == "counter":
            assert f"`{family.name}_total`" in text


def test_every_job_option_and_context_member_is_in_jobs_md() -> None:
    from runner import JobContext
    from runner.aio import AsyncJobContext
    from runner.model.app import Runner

    text = page("jobs")
    options = section(text, "## @app.job(name, ...)")
    for name in inspect.signature(Runner.job).parameters:
        if name not in ("self", "name"):
            assert re.search(rf"^\| `{name}` \|", options, re.MULTILINE), \
                f"job option {name} is not in docs/reference/jobs.md: {REGENERATE}"
    for cls in (JobContext, AsyncJobContext):
        own = section(text, f"## {cls.__name__}")
        for name in dir(cls):
            if not name.startswith("_"):
                assert f"ctx.{name}" in own, f"{cls.__name__}.{name} is not in docs/reference/jobs.md: {REGENERATE}"


def test_every_alert_kind_is_in_alerts_md() -> None:
    from runner.model.alerts import KINDS

    lines = page("alerts").splitlines()
    for kind in KINDS:
        assert f"## {kind}" in lines, f"alert kind {kind} is not in docs/reference/alerts.md: {REGENERATE}"


def test_every_view_and_granted_function_is_in_sql_md() -> None:
    """Every view file, and every function sql/roles.sql names for the operator, has its
    heading (read here from the SQL text, not from a database)."""
    text = page("sql")
    for path in sorted((ROOT / "sql" / "views").glob("*.sql")):
        for name in re.findall(r"CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+runner\.(\w+)", path.read_text(), re.I):
            assert f"### runner.{name}" in text.splitlines(), f"view {name}: {REGENERATE}"
    roles = (ROOT / "sql" / "roles.sql").read_text()
    definers = re.search(r"AND p\.proname IN \(([^)]*)\)", roles)
    workers = re.search(r"CASE WHEN t\.proname IN \(([^)]*)\)", roles)
    assert definers and workers
    granted = set(re.findall(r"'(\w+)'", definers.group(1))) - set(re.findall(r"'(\w+)'", workers.group(1)))
    granted |= set(re.findall(r"EXECUTE ON FUNCTION runner\.(\w+)\(", roles))  # one by one, to both
    assert {"rerun_v1", "prune_v1", "set_lane_v1", "end_web_session_v1", "pause_condition_v1"} <= granted
    for name in sorted(granted):
        assert f"### runner.{name}" in text.splitlines(), f"function {name}: {REGENERATE}"


def test_every_action_has_its_path_in_api_md() -> None:
    from runner.actions import registry as actions

    text = page("api")
    for name in actions.names():
        assert f"### POST /api/actions/{name}" in text.splitlines(), f"action {name}: {REGENERATE}"


def environment_reads(source: str) -> set[str]:
    """The names a module reads from the environment: the constant argument of
    ``os.environ.get(...)``, ``env.get(...)``, ``getenv(...)``, ``environ[...]``, a Typer
    option's ``envvar=``, or the names of a ``for`` loop whose variable such a call reads."""
    tree = ast.parse(source)
    reads: set[str] = set()
    variables: set[str] = set()
    for node in ast.walk(tree):
        arg: ast.expr | None = None
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func.endswith(("environ.get", "getenv", "env.get")) and node.args:
                arg = node.args[0]
            for kw in node.keywords:
                if kw.arg == "envvar" and isinstance(kw.value, ast.Constant):
                    reads.add(kw.value.value)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith(("environ", "env")):
            arg = node.slice
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            reads.add(arg.value)
        elif isinstance(arg, ast.Name):
            variables.add(arg.id)
    for node in ast.walk(tree):
        if (isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id in variables
                and isinstance(node.iter, ast.Tuple | ast.List)):
            reads |= {e.value for e in node.iter.elts if isinstance(e, ast.Constant)}
    return reads


def test_every_environment_variable_the_package_reads_is_in_environment_md() -> None:
    text = page("environment")
    found: set[str] = set()
    for path in (ROOT / "runner").rglob("*.py"):
        found |= environment_reads(path.read_text())
    found -= {"PATH"}  # the embedded server's child environment passes PATH on
    assert {"RUNNER_DATABASE_URL", "DATABASE_URL", "RUNNER_WEB_TOKEN", "RUNNER_HOME", "RUNNER_APP"} <= found
    for name in sorted(found):
        assert f"| `{name}` |" in text, f"{name} is not in docs/reference/environment.md: {REGENERATE}"


def test_every_exit_code_of_the_cli_is_in_exit_codes_md() -> None:
    source = (ROOT / "runner" / "cli.py").read_text()
    codes = {1, 2}  # fail() and click's usage errors
    codes |= {int(c) for c in re.findall(r"typer\.Exit\((\d+)\)", source)}
    codes |= {int(c) for c in re.findall(r"sys\.exit\((\d+)\)", source)}
    codes |= {int(c) for c in re.findall(r"\bfail\(.*, (\d+)\)$", source, re.MULTILINE)}
    assert {1, 2, 3, 130} <= codes
    text = page("exit-codes")
    for code in sorted(codes):
        assert f"| `{code}` |" in text, f"exit code {code} is not in docs/reference/exit-codes.md: {REGENERATE}"


def test_the_reference_is_deterministic_and_links_only_within_itself() -> None:
    for name in PAGES:
        text = page(name)
        for target in re.findall(r"\]\(([^)]+)\)", text):
            assert not re.match(r"[a-z]+:", target) and not target.startswith("/"), (name, target)
            path = target.split("#")[0]
            assert path == "../index.md" or (path.endswith(".md") and "/" not in path
                                             and path[:-3] in PAGES), (name, target)
        for machine in (str(ROOT), str(Path.home()), "/tmp/"):
            assert machine not in text, (name, machine)
        assert not re.search(r"\b0x[0-9a-f]{6,}\b", text), f"{name}: an object's address"


# -- the OpenAPI document, from a real `runner web` ------------------------------------------------


def fetch(base: str, path: str, token: str | None) -> tuple[int, Any]:
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def resolve(doc: dict[str, Any], node: Any) -> None:
    """Every $ref of ``node`` points into the document."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if ref is not None:
            assert ref.startswith("#/"), ref
            target: Any = doc
            for part in ref[2:].split("/"):
                target = target[part]
        for value in node.values():
            resolve(doc, value)
    elif isinstance(node, list):
        for value in node:
            resolve(doc, value)


def test_runner_web_serves_its_openapi_document_behind_the_reads_auth(db_url: str, tmp_path: Path) -> None:
    from runner.actions import registry as actions
    from runner.web import app as web_app
    from runner.web import auth

    env = {"RUNNER_WEB_TOKEN": OPERATOR_TOKEN, "RUNNER_WEB_VIEWER_TOKEN": VIEWER_TOKEN}
    with runner_web(db_url, tmp_path, env=env) as base:
        status, body = fetch(base, "/api/openapi.json", None)
        assert status == 401 and "error" in body
        status, _ = fetch(base, "/api/openapi.json", "not-a-token-0123456789")
        assert status == 401
        status, doc = fetch(base, "/api/openapi.json", VIEWER_TOKEN)
        assert status == 200
    assert re.fullmatch(r"3\.\d+\.\d+", doc["openapi"])
    assert doc["info"]["title"] and doc["info"]["version"]
    assert set(doc["components"]["securitySchemes"]) == {"bearer", "proxy"}
    for path, operations in doc["paths"].items():
        assert path.startswith("/api/") and ":" not in path, path
        for method, op in operations.items():
            assert method in ("get", "post"), (path, method)
            assert "200" in op["responses"] and "401" in op["responses"], (path, method)
            for p in op.get("parameters", []):
                assert p["in"] in ("query", "path") and "schema" in p
                if p["in"] == "path":
                    assert p["required"] and "{" + p["name"] + "}" in path
            for name in re.findall(r"\{(\w+)\}", path):
                assert any(p["name"] == name and p["in"] == "path" for p in op.get("parameters", [])), (path, name)
    resolve(doc, doc)
    # every action of the registry, with its console parameters in the body
    for name in actions.names():
        op = doc["paths"][f"/api/actions/{name}"]["post"]
        schema = op["requestBody"]["content"]["application/json"]["schema"]
        assert "reason" in schema["required"]
        web_params = {p.name for p in actions.get(name).params if p.web}
        assert web_params | {"reason", "dry_run"} == set(schema["properties"]), name
    # every /api/ route the console has (read from the app itself), with its method
    creds = auth.credentials(environ=env)
    app = web_app.create_app(web_app.WebConfig(database_url=db_url, read_database_url=None, credentials=creds))
    routes = [(r.path, sorted(r.methods - {"HEAD"})) for r in app.routes
              if getattr(r, "path", "").startswith("/api/") and getattr(r, "methods", None)]
    assert len(routes) > 20
    for path, methods in routes:
        if path == "/api/actions/{action}":
            continue  # one path per action, above
        shown = re.sub(r"\{(\w+):\w+\}", r"{\1}", path)
        for method in methods:
            assert method.lower() in doc["paths"].get(shown, {}), f"{method} {path} is not in the document"


def test_with_open_reads_anyone_may_read_the_document_as_they_may_read_the_pages(db_url: str) -> None:
    from starlette.testclient import TestClient

    from runner.web import app as web_app
    from runner.web import auth

    creds = auth.credentials(open_reads=True, environ={})
    config = web_app.WebConfig(database_url=db_url, read_database_url=None, credentials=creds)
    with TestClient(web_app.create_app(config), base_url="http://localhost") as client:
        answer = client.get("/api/openapi.json")
        assert answer.status_code == 200 and answer.json()["paths"]
        assert client.get("/api/jobs").status_code == 200


def test_the_documents_query_parameters_are_the_ones_page_reads_take() -> None:
    """READ_QUERY (runner/web/openapi.py) against the query and path parameters each read of
    page_reads (runner/web/app.py) takes from a request, read from its source."""
    from runner.web import openapi

    tree = ast.parse((ROOT / "runner" / "web" / "app.py").read_text())
    page_reads = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "page_reads")
    taken: dict[str, set[str]] = {}
    for fn in page_reads.body:
        if isinstance(fn, ast.FunctionDef):
            names: set[str] = set()
            for node in ast.walk(fn):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("get", "getlist") and node.args
                        and isinstance(node.args[0], ast.Constant)):
                    names.add(node.args[0].value)
                if (isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("path_params")
                        and isinstance(node.slice, ast.Constant)):
                    names.add(node.slice.value)
            taken[fn.name] = names
    returned = next(n for n in page_reads.body if isinstance(n, ast.Return))
    assert isinstance(returned.value, ast.Dict)
    by_read = {k.value: taken[v.id] for k, v in zip(returned.value.keys, returned.value.values, strict=True)
               if isinstance(k, ast.Constant) and isinstance(v, ast.Name)}
    assert len(by_read) >= 10
    for read, names in by_read.items():
        documented = {p[0] for p in openapi.READ_QUERY[read]}
        assert documented == names, f"{read}: the document says {sorted(documented)}, the read takes {sorted(names)}"
