"""Write docs/reference/*.md from the code, where the code is the truth.

    python scripts/gen_reference.py [--out DIR] [--server-url URL]

Each page is read from what it documents: the CLI from the Typer app's click tree
(runner/cli.py), job options from ``Runner.job``'s signature and its docstring's option list
(runner/model/app.py) with the misfire policies (runner/model/policies.py), the contexts from their
classes (runner/context.py), metrics from the registry of runner/worker/metrics.py (the ledger-read
ones collected from a migrated scratch ledger), alert kinds from runner/model/alerts.py and their
view files, the SQL views and functions the readonly and operator roles are granted (from a
scratch database after `runner db upgrade` and sql/roles.sql, with each file's header
comment), the JSON API from the OpenAPI document `runner web` serves (runner/web/openapi.py),
environment variables from the string constants the package reads, exit codes from
runner/cli.py's docstring checked against every exit in that file.

The SQL and ledger-metric pages need a PostgreSQL server: ``--server-url`` (a database URL of
it; the scratch database is created beside it and dropped after), else
RUNNER_TEST_DATABASE_URL, else libpq's PG* variables. The scratch roles are named after this
process and dropped too.

The output is deterministic (sorted or in the code's own order, no time, no path of this
machine), and its links stay inside docs/reference. tests/test_reference.py regenerates the
pages and fails when they differ from the committed ones.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import inspect
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the runner of this checkout

PAGES = {
    "cli": ("CLI", "every command, subcommand and option of `runner`"),
    "jobs": ("Jobs", "the options of `@app.job(...)`, misfire policies, `JobContext` and `AsyncJobContext`"),
    "metrics": ("Metrics", "the Prometheus metrics of `runner start --metrics-port`"),
    "alerts": ("Alert kinds", "every kind of `runner.alerts`, and when it fires"),
    "sql": ("SQL views and functions", "what the readonly and operator roles may read and call"),
    "api": ("JSON API", "the API of `runner web`, from its OpenAPI document"),
    "environment": ("Environment variables", "every variable the runner reads"),
    "exit-codes": ("Exit codes", "what the exit code of a `runner` command means"),
}
GENERATED = "*Generated from the code by `python scripts/gen_reference.py`: do not edit by hand.*"

# What each environment variable does, for those that are not a CLI option's (whose help the
# page shows): the generator stops when the package reads a variable that is not described.
ENVIRONMENT = {
    "DATABASE_URL": "the database, when neither `--database-url` nor RUNNER_DATABASE_URL is given "
                    "(with none of them, the embedded PostgreSQL under `./.runner/`)",
    "RUNNER_HOME": "the home of the embedded PostgreSQL (default `./.runner`): its data, socket "
                   "and log",
    "RUNNER_LOCK_NAMESPACE": "the top 16 bits of every advisory lock key of the runners (an integer "
                             "0..65535, default 21077): change it when an application's own advisory "
                             "locks collide; every runner of a ledger must use the same",
    "RUNNER_WEB_TOKEN": "`runner web`: the operator's token (user `operator`)",
    "RUNNER_WEB_VIEWER_TOKEN": "`runner web`: a viewer's token (user `viewer`)",
    "RUNNER_WEB_SESSION_SECRET": "`runner web`: the key that signs session cookies (at least 32 "
                                 "characters), shared by every console that should accept the "
                                 "others' sessions; or `--session-secret-file`",
    "RUNNER_TEST_DATABASE_URL": "tests: the PostgreSQL server of the `runner_database` pytest "
                                "fixture and of `runner.testing` (runner/pytest_plugin.py)",
    "RUNNER_TEST_EMBEDDED_HOME": "tests: where the pytest plugin starts its embedded PostgreSQL "
                                 "when no server is named",
    "RUNNER_CRASH_POINT": "fault injection for the test suite (runner/worker/attempt.py): the point at "
                          "which an attempt kills its process; never set it in production",
    "RUNNER_CRASH_RATE": "fault injection: the fraction of attempts that crash at "
                         "RUNNER_CRASH_POINT (default 1.0)",
}
ENV_NAME = re.compile(r"RUNNER_[A-Z0-9_]+|DATABASE_URL")

# JobContext members the runner calls, not the handler
RUNNER_SIDE = frozenset({"cancel", "hand_off"})


# -- markdown -------------------------------------------------------------------------------


_CODE = re.compile(r"(``.+?``|`[^`\n]+`)")


def text(value: str) -> str:
    """Prose for markdown: ``<`` and ``>`` escaped outside code spans (else they would be
    read as HTML), double-backtick spans kept (markdown reads them as code too)."""
    parts = _CODE.split(value)
    return "".join(p if i % 2 else p.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                   for i, p in enumerate(parts))


def cell(value: Any) -> str:
    """One table cell: one line, pipes escaped outside code spans (in a code span, markdown's
    tables take a pipe as it is)."""
    parts = _CODE.split(text(" ".join(str(value).split())))
    return "".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def signature(fn: Any, name: str) -> str:
    """``name(params) -> result`` with the annotations as the source writes them."""
    sig = inspect.signature(fn)
    params = []
    star = False
    for p in sig.parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.KEYWORD_ONLY and not star:
            params.append("*")
            star = True
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        star = star or p.kind is p.VAR_POSITIONAL
        item = prefix + p.name
        if p.annotation is not p.empty:
            item += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            item += f" = {_default_text(p.default)}"
        params.append(item)
    result = f" -> {_annotation(sig.return_annotation)}" if sig.return_annotation is not sig.empty else ""
    return f"{name}({', '.join(params)}){result}"


def _default_text(value: Any) -> str:
    if isinstance(value, tuple) and all(isinstance(v, type) for v in value):
        return "(" + ", ".join(v.__name__ for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def code(value: str) -> str:
    """A code span holding ``value`` (one line; a value with backticks gets a longer fence)."""
    value = " ".join(value.split())
    fence = "``" if "`" in value else "`"
    return f"{fence} {value} {fence}" if fence == "``" else f"`{value}`"


def docstring(obj: Any) -> str:
    doc = inspect.getdoc(obj)
    return text(doc) if doc else ""


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def page(name: str, body: list[str]) -> str:
    title, _ = PAGES[name]
    lines = [f"# {title}", "", GENERATED, "", *body]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def sql_comment(path: Path, first_paragraph: bool = False) -> str:
    """The leading ``--`` comment of a SQL file, as text (its first paragraph only if asked)."""
    lines: list[str] = []
    for line in path.read_text().splitlines():
        if not line.startswith("--"):
            break
        body = line[2:].removeprefix(" ")
        if body.startswith("One kind of runner.alerts ("):  # every alert view says so
            continue
        if first_paragraph and not body.strip() and lines:
            break
        lines.append(body)
    return "\n".join(lines).strip()


def fenced(value: str) -> list[str]:
    return ["```text", *value.splitlines(), "```"]


# -- cli ---------------------------------------------------------------------------------------


def commands() -> list[tuple[str, Any, Any]]:
    """(path, command, context) of every command of the click tree typer builds, sorted."""
    import typer.main

    from runner import cli

    root = typer.main.get_command(cli.app)
    context_class = type(root.context_class(root, info_name="runner")) if hasattr(root, "context_class") else None
    found: list[tuple[str, Any, Any]] = []

    def walk(group: Any, path: list[str], parent: Any) -> None:
        for name in sorted(group.commands):
            sub = group.commands[name]
            ctx = context_class(sub, info_name=name, parent=parent) if context_class else None
            if hasattr(sub, "commands"):
                found.append((" ".join([*path, name]), sub, ctx))
                walk(sub, [*path, name], ctx)
            else:
                found.append((" ".join([*path, name]), sub, ctx))

    top = context_class(root, info_name="runner") if context_class else None
    walk(root, ["runner"], top)
    return [("runner", root, top), *found]


def _type(p: Any, ctx: Any) -> str:
    if getattr(p, "is_flag", False):
        return "flag"
    kind = str(p.display_type(ctx)).strip("<>")
    bounds = []
    if getattr(p, "min", None) is not None:
        bounds.append(f"≥ {p.min}")
    if getattr(p, "max", None) is not None:
        bounds.append(f"≤ {p.max}")
    kind = kind.replace(" range", "")
    if getattr(p, "multiple", False):
        kind = kind.removeprefix("list[").removesuffix("]") + ", repeatable"
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def _default(p: Any) -> str:
    if p.required:
        return "required"
    value = p.default
    if value is None or value == [] or value == ():
        return ""
    if getattr(p, "is_flag", False):
        return "on" if value else "off"
    return code(str(value))


def cli_page() -> str:
    body: list[str] = []
    tree = commands()
    root = tree[0][1]
    body += [text(root.help or ""), "",
             "Every command exits with the codes of [Exit codes](exit-codes.md); options read from "
             "the environment are listed in [Environment variables](environment.md) too.", "",
             "## Commands", ""]
    body += table(["command", "what it does"],
                  [[code(path), cell((cmd.help or "").split("\n\n")[0])] for path, cmd, _ in tree[1:]])
    body.append("")
    for path, cmd, ctx in tree[1:]:
        body += [f"## {path}", ""]
        if getattr(cmd, "hidden", False):
            body += ["(hidden)", ""]
        if cmd.help:
            body += [text(inspect.cleandoc(cmd.help)), ""]
        if hasattr(cmd, "commands"):
            body += ["Subcommands: " + ", ".join(code(f"{path} {n}") for n in sorted(cmd.commands)) + ".", ""]
            continue
        args = [p for p in cmd.params if p.param_type_name == "argument"]
        opts = [p for p in cmd.params if p.param_type_name == "option"]
        usage = " ".join([path, "[OPTIONS]" if opts else "", *(p.name.upper() for p in args)]).replace("  ", " ")
        body += [f"Usage: {code(usage)}", ""]
        if args:
            body += table(["argument", "type", "help"],
                          [[code(p.name.upper()), cell(_type(p, ctx)),
                            cell((getattr(p, "help", None) or "") + (" (required)" if p.required else ""))]
                           for p in args])
            body.append("")
        if opts:
            body += table(["option", "type", "default", "environment", "help"],
                          [[" ".join(code(o) for o in [*p.opts, *p.secondary_opts]), cell(_type(p, ctx)),
                            _default(p), code(p.envvar) if isinstance(p.envvar, str) else "",
                            cell(p.help or "")] for p in opts])
            body.append("")
    return page("cli", body)


# -- jobs -------------------------------------------------------------------------------------


def job_options() -> dict[str, str]:
    """The option list of ``Runner.job``'s docstring: name -> description."""
    from runner.model.app import Runner

    doc = inspect.getdoc(Runner.job) or ""
    _, _, listing = doc.partition("Options (")
    options: dict[str, str] = {}
    current = None
    for line in listing.splitlines()[1:]:
        match = re.match(r"^    (\w+): (.*)$", line)
        if match:
            current = match.group(1)
            options[current] = match.group(2)
        elif current and line.startswith("        "):
            options[current] += " " + line.strip()
        elif line.strip():
            current = None
    return options


def _annotation(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return ""
    return value if isinstance(value, str) else getattr(value, "__name__", str(value))


def _value(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return "required"
    return code(repr(value))


def members(cls: type) -> list[tuple[str, Any]]:
    """The public attributes and methods of ``cls`` (its own and inherited), by name."""
    out = []
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        out.append((name, inspect.getattr_static(cls, name)))
    return out


def _member_rows(cls: type) -> tuple[list[list[str]], list[list[str]]]:
    handler_rows, runner_rows = [], []
    for name, value in members(cls):
        if isinstance(value, property):
            fget = value.fget
            hint = inspect.signature(fget).return_annotation if fget else inspect.Parameter.empty
            shown = code(f"ctx.{name}")
            kind = f"property: {_annotation(hint)}" if hint is not inspect.Parameter.empty else "property"
            doc = inspect.getdoc(fget) or ""
        elif callable(value):
            fn = value
            prefix = "await " if inspect.iscoroutinefunction(fn) else ""
            shown = code(prefix + signature(fn, f"ctx.{name}"))
            kind = "async method" if inspect.iscoroutinefunction(fn) else "method"
            doc = inspect.getdoc(fn) or ""
        else:
            continue
        if not doc:
            raise SystemExit(f"gen_reference: {cls.__name__}.{name} has no docstring: document it")
        row = [shown, kind, cell(doc)]
        (runner_rows if name in RUNNER_SIDE else handler_rows).append(row)
    return handler_rows, runner_rows


def jobs_page() -> str:
    import runner
    import runner.model.app
    from runner.context import AsyncJobContext, JobContext
    from runner.model import policies
    from runner.model.app import Runner
    from runner.model.jobs import LANE_NAME, OVERLAP_POLICIES, Backoff, Retention
    from runner.model.tiers import tiers

    described = job_options()
    sig = inspect.signature(Runner.job)
    params = [p for p in sig.parameters.values() if p.name not in ("self", "name")]
    missing = [p.name for p in params if p.name not in described]
    extra = sorted(set(described) - {p.name for p in params})
    if missing or extra:
        raise SystemExit(f"gen_reference: Runner.job's docstring lists no option {missing} / options "
                         f"that are not parameters {extra}: keep its Options list equal to the signature")
    body = [text(inspect.getdoc(runner.model.app) or ""), "",
            "## @app.job(name, ...)", "", f"{code('@app.job(name, **options)')}: {docstring(Runner.job).split(chr(10) + chr(10))[0]}", ""]
    body += table(["option", "type", "default", "what it does"],
                  [[code(p.name), cell(_annotation(p.annotation)), _value(p.default), cell(described[p.name])]
                   for p in params])
    body += ["", f"Lane names match {code(LANE_NAME.pattern)}; `overlap` is one of "
             + ", ".join(code(o) for o in OVERLAP_POLICIES) + ".", ""]
    body += ["## Misfire policies", "", docstring(policies).split("\n\n")[0], ""]
    body += table(["policy", "`misfire=`", "tier action", "starts runs", "tier alerts by default", "what it does"],
                  [[code(p.name), code(p.policy) if p.policy else "", code(p.tier_action) if p.tier_action else "",
                    "yes" if p.runs else "no", "yes" if p.alert else "no", cell(p.summary)]
                   for p in policies.REGISTRY.values()])
    body += ["", "### tiers(...)", "", code(signature(tiers, "tiers")), "", docstring(tiers), ""]
    for cls in (Backoff, Retention):
        fields = ", ".join(f"{f.name}={_default_text(f.default)}" if f.default is not dataclasses.MISSING
                           else f.name for f in dataclasses.fields(cls))
        body += [f"### {cls.__name__}", "", code(f"{cls.__name__}({fields})"), "", docstring(cls), ""]
    body += ["## app.running(...)", "", code(signature(Runner.running, "app.running")), "",
             docstring(Runner.running), ""]
    for cls in (JobContext, AsyncJobContext):
        handler_rows, runner_rows = _member_rows(cls)
        body += [f"## {cls.__name__}", "", docstring(cls), ""]
        body += table(["member", "kind", "what it is"], handler_rows)
        if runner_rows:
            body += ["", "Called by the runner, not by a handler:", ""]
            body += table(["member", "kind", "what it is"], runner_rows)
        body.append("")
    body += ["## Exceptions", "", "The exceptions of `runner` a handler raises or meets:", ""]
    errors = sorted(n for n in runner.__all__
                    if isinstance(getattr(runner, n), type) and issubclass(getattr(runner, n), BaseException))
    body += table(["exception", "base", "when"],
                  [[code(f"runner.{n}"), code(getattr(runner, n).__mro__[1].__name__),
                    cell(inspect.getdoc(getattr(runner, n)) or "")] for n in errors])
    return page("jobs", body)


# -- metrics ------------------------------------------------------------------------------------


def metric_rows(families: list[tuple[str, str, tuple[str, ...], str]]) -> list[list[str]]:
    rows = []
    for name, kind, labels, help_text in sorted(families):
        exposed = name + "_total" if kind == "counter" else name
        shown = code(exposed) + (f" ({code(name + '_bucket')}, `_sum`, `_count`)" if kind == "histogram" else "")
        rows.append([shown, kind, ", ".join(code(label) for label in labels), cell(help_text)])
    return rows


def process_metrics() -> list[tuple[str, str, tuple[str, ...], str]]:
    from prometheus_client.metrics import MetricWrapperBase

    from runner.worker.metrics import Metrics

    m = Metrics()
    return [(v._name, v._type, tuple(v._labelnames), v._documentation)
            for v in vars(m).values() if isinstance(v, MetricWrapperBase)]


def ledger_metrics(url: str) -> list[tuple[str, str, tuple[str, ...], str]]:
    """The families the ledger collector yields, collected for real from a migrated ledger."""
    import psycopg

    from runner.worker.metrics import LedgerCollector

    collector = LedgerCollector(lambda: psycopg.connect(url, autocommit=True))
    try:
        families = list(collector.collect())
    finally:
        collector.close()
    if len(families) < 2:
        raise SystemExit("gen_reference: the ledger metrics could not be read from the scratch ledger")
    return [(f.name, f.type, tuple(getattr(f, "_labelnames", ())), f.documentation) for f in families]


def metrics_page(url: str) -> str:
    import runner.worker.metrics as metrics

    body = [docstring(metrics), ""]
    body += ["## Of the process", "", "Counted by the runner process itself (its own attempts):", ""]
    body += table(["metric", "type", "labels", "help"], metric_rows(process_metrics()))
    body += ["", "## From the ledger", "", "Collected from the ledger when scraped (`LedgerCollector`):", ""]
    body += table(["metric", "type", "labels", "help"], metric_rows(ledger_metrics(url)))
    body += ["", "Attempt outcomes (`status` of `runner_attempts_completed_total`): "
             + ", ".join(code(s) for s in metrics.STATUSES) + "."]
    return page("metrics", body)


# -- alerts -------------------------------------------------------------------------------------


def alerts_page() -> str:
    from runner.model import alerts

    body = [docstring(alerts), "", "Every kind's view has the columns kind, job_name, owner, run_id, "
            "detail, since; the kinds in the order of `runner.alerts`:", ""]
    body += table(["kind", "view"], [[code(k), code(alerts.view_of(k))] for k in alerts.KINDS])
    body.append("")
    for kind in alerts.KINDS:
        comment = sql_comment(ROOT / "sql" / alerts.file_of(kind))
        if not comment:
            raise SystemExit(f"gen_reference: sql/{alerts.file_of(kind)} has no header comment")
        body += [f"## {kind}", "", f"{code(alerts.view_of(kind))} (sql/{alerts.file_of(kind)}):", "",
                 *fenced(comment), ""]
    return page("alerts", body)


# -- sql (a scratch ledger) ------------------------------------------------------------------------


@contextlib.contextmanager
def scratch_ledger(server_url: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A new database on the server of ``server_url``, migrated to head, with sql/roles.sql
    applied under role names of this process; dropped (with the roles) afterwards."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from runner.store import migrate

    tag = f"ref_{os.getpid()}"
    dbname = f"runner_{tag}"
    roles = {kind: f"runner_{tag}_{kind}" for kind in ("worker", "operator", "readonly", "condition")}
    params = conninfo_to_dict(server_url)
    url = make_conninfo(server_url, dbname=dbname)
    admin = psycopg.connect(server_url, autocommit=True)
    try:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(dbname)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        try:
            migrate.upgrade(_url(params, dbname))
            with psycopg.connect(url, autocommit=True) as conn:
                for kind, role in roles.items():
                    conn.execute(sql.SQL("SELECT set_config({}, {}, false)").format(
                        sql.Literal(f"runner.{kind}_role"), sql.Literal(role)))
                conn.execute((ROOT / "sql" / "roles.sql").read_text().encode())
            yield url, roles
        finally:
            with contextlib.suppress(psycopg.Error), psycopg.connect(url, autocommit=True) as conn:
                for role in roles.values():
                    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
            for role in roles.values():
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
    finally:
        admin.close()


def _url(params: dict[str, Any], dbname: str) -> str:
    """A postgresql:// URL (alembic's SQLAlchemy takes no keyword string) for ``dbname``."""
    from urllib.parse import quote

    user = quote(str(params.get("user") or os.environ.get("PGUSER") or "postgres"), safe="")
    password = params.get("password") or os.environ.get("PGPASSWORD")
    auth = f"{user}:{quote(str(password), safe='')}" if password else user
    host = str(params.get("host") or os.environ.get("PGHOST") or "127.0.0.1")
    port = params.get("port") or os.environ.get("PGPORT") or 5432
    if host.startswith("/"):
        return f"postgresql://{auth}@/{quote(dbname)}?host={quote(host)}&port={port}"
    return f"postgresql://{auth}@{host}:{port}/{quote(dbname)}"


VIEWS = """
SELECT c.relname AS name,
       array_agg(a.attname::text ORDER BY a.attnum) AS columns,
       array_agg(format_type(a.atttypid, a.atttypmod) ORDER BY a.attnum) AS types
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = 'runner' AND c.relkind IN ('v', 'm')
  AND has_table_privilege(%(readonly)s, c.oid, 'SELECT')
GROUP BY c.relname
ORDER BY c.relname
"""

FUNCTIONS = """
SELECT p.proname AS name, pg_get_function_arguments(p.oid) AS arguments,
       pg_get_function_result(p.oid) AS result, p.prosecdef AS definer,
       pg_get_userbyid(p.proowner) AS owner,
       bool_or(g.rolname = %(readonly)s) AS readonly, bool_or(g.rolname = %(operator)s) AS operator
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
CROSS JOIN LATERAL aclexplode(p.proacl) acl
JOIN pg_roles g ON g.oid = acl.grantee
WHERE n.nspname = 'runner' AND acl.privilege_type = 'EXECUTE' AND g.rolname IN (%(readonly)s, %(operator)s)
GROUP BY p.oid, p.proname
ORDER BY p.proname, pg_get_function_arguments(p.oid)
"""


def object_files() -> dict[str, Path]:
    """Function or view name -> the file of sql/objects.txt that defines it."""
    found: dict[str, Path] = {}
    pattern = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:FUNCTION|VIEW|MATERIALIZED\s+VIEW)\s+runner\.(\w+)",
                         re.IGNORECASE)
    for line in (ROOT / "sql" / "objects.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        path = ROOT / "sql" / line
        for name in pattern.findall(path.read_text()):
            found.setdefault(name, path)
    return found


def sql_page(url: str, roles: dict[str, str]) -> str:
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(url, row_factory=dict_row) as conn:
        names = {"readonly": roles["readonly"], "operator": roles["operator"]}
        views = conn.execute(VIEWS, names).fetchall()
        functions = conn.execute(FUNCTIONS, names).fetchall()
    files = object_files()
    body = [text("Read from a scratch ledger after `runner db upgrade` and sql/roles.sql: the views "
                 "`runner_readonly` may read (and so `runner_operator`, which has what the readonly role "
                 "has; both read the tables as well) and the functions each of them is granted. "
                 "Each entry's text is the first paragraph of the header comment of its file under "
                 "sql/views or sql/functions; the file has the rest."), ""]

    from runner.model import alerts

    shown: dict[Path, str] = {}  # a file's comment is shown once, under its first object

    def entry(name: str) -> list[str]:
        path = files.get(name)
        if path is None:
            return ["(defined by a schema step, not a file of sql/objects.txt)", ""]
        where = f"sql/{path.relative_to(ROOT / 'sql')}"
        if name.startswith("alert_") and name.removeprefix("alert_") in alerts.KINDS:
            return [f"File: {code(where)}. One kind of `runner.alerts`: see [Alert kinds](alerts.md).", ""]
        if path in shown:
            return [f"File: {code(where)}, with {code(shown[path])} (its header comment is there).", ""]
        shown[path] = f"runner.{name}"
        comment = sql_comment(path, first_paragraph=True)
        return [f"File: {code(where)}", "", *(fenced(comment) if comment else []), ""]

    body += ["## Views", ""]
    for v in views:
        body += [f"### runner.{v['name']}", "", *entry(v["name"])]
        body += table(["column", "type"], [[code(c), code(t)] for c, t in zip(v["columns"], v["types"], strict=True)])
        body.append("")
    for title, who in (("Functions the readonly role may call", "readonly"),
                       ("Functions only the operator role may call", "operator")):
        rows = [f for f in functions if (f["readonly"] if who == "readonly" else f["operator"] and not f["readonly"])]
        body += [f"## {title}", ""]
        if who == "readonly":
            body += ["The operator role may call these too.", ""]
        for f in rows:
            runs_as = "the condition role" if f["owner"] == roles["condition"] else "the schema owner"
            definer = f" (SECURITY DEFINER: runs as {runs_as})" if f["definer"] else ""
            body += [f"### runner.{f['name']}", "",
                     code(f"runner.{f['name']}({f['arguments']}) RETURNS {f['result']}") + definer, "",
                     *entry(f["name"])]
    return page("sql", body)


# -- api --------------------------------------------------------------------------------------------


def _schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "oneOf" in schema:
        return " or ".join(_schema_type(s) for s in schema["oneOf"])
    kind = schema.get("type", "")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array":
        kind = f"array of {_schema_type(schema.get('items', {}))}"
    if "enum" in schema:
        kind += ": " + ", ".join(str(v) for v in schema["enum"])
    if "format" in schema:
        kind += f" ({schema['format']})"
    bounds = [f"≥ {schema['minimum']:g}" if "minimum" in schema else "",
              f"≤ {schema['maximum']:g}" if "maximum" in schema else ""]
    bounds = [b for b in bounds if b]
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def api_page() -> str:
    from runner.web import openapi

    doc = openapi.document()
    body = [text(doc["info"]["description"]), "",
            text("`runner web` serves this document at `GET /api/openapi.json` (OpenAPI "
                 f"{doc['openapi']}), behind the same authentication as the reads; this page is "
                 "rendered from it."), "",
            "## Authentication", ""]
    for name, scheme in sorted(doc["components"]["securitySchemes"].items()):
        body.append(f"- {code(name)}: {cell(scheme['description'])}")
    body += ["", "What each kind of endpoint needs:", ""]
    body += [f"- {code(t['name'])}: {cell(t['description'])}" for t in doc["tags"]]
    body += ["", "Every error is a JSON object `{\"error\": \"one line\"}` with its status:", ""]
    body += table(["status", "when"], [[code(k), cell(v)] for k, v in sorted(openapi.ERROR_STATUSES.items())])
    body += ["", "## Endpoints", ""]
    body += table(["method", "path", "summary"],
                  [[m.upper(), code(path), cell(op["summary"])]
                   for path, ops in doc["paths"].items() for m, op in sorted(ops.items())])
    body.append("")
    for path, ops in doc["paths"].items():
        for method, op in sorted(ops.items()):
            body += [f"### {method.upper()} {path}", "", cell(op["summary"]) + ".", ""]
            if op.get("description"):
                body += [text(op["description"]), ""]
            if op.get("parameters"):
                body += table(["parameter", "in", "type", "required", "default", "description"],
                              [[code(p["name"]), p["in"], cell(_schema_type(p["schema"])),
                                "yes" if p.get("required") else "no",
                                code(str(p["schema"]["default"])) if "default" in p["schema"] else "",
                                cell(p.get("description", ""))] for p in op["parameters"]])
                body.append("")
            if "requestBody" in op:
                schema = op["requestBody"]["content"]["application/json"]["schema"]
                body += ["Body (`application/json`):", ""]
                body += table(["field", "type", "required", "default", "description"],
                              [[code(n), cell(_schema_type(s)), "yes" if n in schema.get("required", []) else "no",
                                code(str(s["default"]).lower() if isinstance(s["default"], bool) else str(s["default"]))
                                if "default" in s else "", cell(s.get("description", ""))]
                               for n, s in schema["properties"].items()])
                body.append("")
            ok = op["responses"]["200"]
            headers = ", ".join(code(h) for h in sorted(ok.get("headers", {})))
            schema = ok["content"]["application/json"]["schema"]
            body += [f"Responses: `200` {cell(ok['description'])} ({_schema_type(schema)})"
                     + (f", with the headers {headers}" if headers else "") + "; errors "
                     + ", ".join(code(c) for c in sorted(op["responses"]) if c != "200") + ".", ""]
    body += ["## Schemas", ""]
    for name, schema in sorted(doc["components"]["schemas"].items()):
        body += [f"### {name}", ""]
        body += table(["field", "type", "required", "description"],
                      [[code(n), cell(_schema_type(s)), "yes" if n in schema.get("required", []) else "no",
                        cell(s.get("description", ""))] for n, s in schema["properties"].items()])
        body.append("")
    return page("api", body)


# -- environment ------------------------------------------------------------------------------------


def environment_reads() -> dict[str, list[str]]:
    """Every environment variable name the package holds as a string constant -> the files."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "runner").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and ENV_NAME.fullmatch(node.value):
                found.setdefault(node.value, set()).add(str(path.relative_to(ROOT)))
    return {name: sorted(files) for name, files in sorted(found.items())}


def environment_page() -> str:
    options: dict[str, list[tuple[str, Any]]] = {}
    for path, cmd, _ in commands():
        for p in getattr(cmd, "params", []):
            if isinstance(getattr(p, "envvar", None), str):
                options.setdefault(p.envvar, []).append((path, p))
    reads = environment_reads()
    undescribed = sorted(n for n in reads if n not in ENVIRONMENT and n not in options)
    if undescribed:
        raise SystemExit(f"gen_reference: the package reads {undescribed} with no description: add it to "
                         "ENVIRONMENT in scripts/gen_reference.py")
    stale = sorted(set(ENVIRONMENT) - set(reads))
    if stale:
        raise SystemExit(f"gen_reference: ENVIRONMENT describes {stale}, which the package no longer reads")
    rows = []
    for name in sorted(set(reads) | set(options)):
        if name in options:
            helps = sorted({p.help or "" for _, p in options[name]})
            flags = sorted({p.opts[0] for _, p in options[name]})
            where = sorted({path for path, _ in options[name]})
            what = " / ".join(helps) + f" (the option {', '.join(code(f) for f in flags)} of " \
                + ", ".join(code(w) for w in where) + ")"
            if name in ENVIRONMENT:
                what = ENVIRONMENT[name] + "; " + what
        else:
            what = ENVIRONMENT[name]
        rows.append([code(name), cell(what), ", ".join(code(f) for f in reads.get(name, ["runner/cli.py"]))])
    body = ["A command-line option wins over its variable. Besides these, libpq reads its own "
            "variables (`PGHOST`, `PGPASSWORD`, `PGPASSFILE`, ...) for every connection, and the "
            "test suite reads a few of its own (see the contributing guide).", ""]
    body += table(["variable", "what it does", "read in"], rows)
    return page("environment", body)


# -- exit codes ------------------------------------------------------------------------------------


def documented_exit_codes() -> dict[int, str]:
    from runner import cli

    doc = inspect.getdoc(cli) or ""
    _, _, listing = doc.partition("Exit codes")
    codes: dict[int, str] = {}
    current = None
    for line in listing.splitlines()[1:]:
        match = re.match(r"^\* (\d+): (.*)$", line)
        if match:
            current = int(match.group(1))
            codes[current] = match.group(2)
        elif current is not None and line.startswith("  "):
            codes[current] += " " + line.strip()
        elif line.strip() and current is not None:
            break
    return codes


def exits_in_cli() -> dict[int, list[str]]:
    """Every literal exit code of runner/cli.py (``fail(..., N)``, ``typer.Exit(N)``,
    ``sys.exit(N)``; ``fail(...)`` alone is 1) -> the functions it is in."""
    tree = ast.parse((ROOT / "runner" / "cli.py").read_text())
    found: dict[int, set[str]] = {}

    def note(value: int, where: str) -> None:
        found.setdefault(value, set()).add(where)

    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            if name == "fail" and fn.name != "fail":
                args = [a for a in node.args[1:]] + [k.value for k in node.keywords if k.arg == "code"]
                if not args:
                    note(1, fn.name)
                for a in args:
                    if isinstance(a, ast.Constant) and isinstance(a.value, int):
                        note(a.value, fn.name)
            elif name in ("typer.Exit", "sys.exit", "SystemExit"):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, int) and not isinstance(sub.value, bool):
                        note(sub.value, fn.name)
    return {value: sorted(where) for value, where in sorted(found.items())}


def exit_codes_page() -> str:
    documented = documented_exit_codes()
    found = exits_in_cli()
    undocumented = sorted(set(found) - set(documented))
    if undocumented:
        raise SystemExit(f"gen_reference: runner/cli.py exits with {undocumented}, which its docstring's "
                         "'Exit codes' list does not describe")
    body = ["From the docstring of runner/cli.py, checked against every literal exit of that file "
            "(a `fail(...)` is 1, or the code it is given); `runner start` and `runner web` exit 0 "
            "when stopped by SIGTERM or SIGINT.", ""]
    body += table(["code", "meaning", "exits with it (functions of runner/cli.py)"],
                  [[code(str(c)), cell(m), ", ".join(code(f) for f in found.get(c, []))]
                   for c, m in sorted(documented.items())])
    body += ["", "The usage errors (2) of click itself (an unknown option, a value out of range, a "
             "missing argument) are reported by `main()` as one line too."]
    return page("exit-codes", body)


# -- index and main -----------------------------------------------------------------------------------


def index_page() -> str:
    body = ["Generated from the code where the code is the truth: a test "
            "(tests/test_reference.py) fails when a page differs from what the code says.", ""]
    body += [f"- [{title}]({name}.md): {text(what)}" for name, (title, what) in PAGES.items()]
    lines = ["# Reference", "", GENERATED, "", *body]
    return "\n".join(lines) + "\n"


def server_url(flag: str | None) -> str:
    return flag or os.environ.get("RUNNER_TEST_DATABASE_URL") or "dbname=postgres"


def build(server: str) -> dict[str, str]:
    pages = {"index": index_page(), "cli": cli_page(), "jobs": jobs_page(), "alerts": alerts_page(),
             "api": api_page(), "environment": environment_page(), "exit-codes": exit_codes_page()}
    with scratch_ledger(server) as (url, roles):
        pages["metrics"] = metrics_page(url)
        pages["sql"] = sql_page(url, roles)
    return {name: pages[name] for name in ["index", *PAGES]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "reference")
    parser.add_argument("--server-url", help="a database URL of the PostgreSQL server to make the scratch "
                                             "ledger on (default: RUNNER_TEST_DATABASE_URL, else PG*)")
    args = parser.parse_args(argv)
    pages = build(server_url(args.server_url))
    args.out.mkdir(parents=True, exist_ok=True)
    for name, content in pages.items():
        (args.out / f"{name}.md").write_text(content)
    print(f"gen_reference: {len(pages)} pages in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
