"""The OpenAPI 3 document of the console's JSON API, served at ``GET /api/openapi.json``.

Built from what serves the API, so it cannot name a route or a parameter that is not there
(runner/web/app.py makes its /api/ routes from the two tables below):

* the actions: one ``POST /api/actions/NAME`` per action of the registry (runner/actions/registry.py),
  its JSON body the action's console parameters (``Param.web``) with their kinds, bounds,
  defaults and help, plus ``reason`` and ``dry_run``; and the short paths of some of them
  (``ACTION_ROUTES`` below, e.g. ``POST /api/runs/rerun``);
* the reads: ``API_READS`` below (path -> the page read it answers with); the
  query parameters of each read are listed here (``READ_QUERY``), and
  tests/test_reference.py checks them against what ``page_reads`` takes from a request.

Authentication is the API's (runner/web/auth.py): ``Authorization: Bearer <token>``, or the
header of a trusted proxy (``--trust-proxy-header``, on a Unix socket only), or nothing at all
with ``--open-reads`` (reads only). The document itself is served under the same rule as the
reads (a viewer's credential, or ``--open-reads``): it holds no ledger data, but a console
that answers anonymous probes with its version and its list of actions tells an attacker more
than one that answers 401; the same document is published in the docs
(docs/reference/api.md), so nobody who may use the API lacks it.

The document depends on this code only (not on the console's configuration): whether actions
are on for a caller is ``GET /api/whoami``'s ``actions``.
"""

from __future__ import annotations

from typing import Any

from runner import __version__
from runner.actions import registry
from runner.web import reads

ERROR_STATUSES = {
    "400": "bad input: a parameter that cannot be parsed or an action the ledger refused "
           "(nothing written)",
    "401": "no credential, or a wrong one",
    "403": "a viewer asked for an action, or a cross-origin request",
    "404": "no such run, plan or job",
    "413": "the body is over 64 KiB",
    "415": "an action's body is not application/json",
    "421": "the Host header is not one of the console's names (--allowed-host)",
    "429": "too many failed token checks (see Retry-After)",
    "503": "the ledger does not answer",
}

TIME = {"type": "string", "format": "date-time", "description": "ISO 8601 with a UTC offset"}

# path parameters and query parameters of each read of API_READS (below), by read
# name: (name, where, schema, required, description)
READ_QUERY: dict[str, tuple[tuple[str, str, dict[str, Any], bool, str], ...]] = {
    "whoami": (),
    "jobs": (
        ("sort", "query", {"type": "string", "enum": list(reads.JOB_SORTS), "default": "health"}, False,
         "the column the jobs are ordered by (health: the unhealthy first)"),
        ("dir", "query", {"type": "string", "enum": ["asc", "desc"], "default": "asc"}, False,
         "desc: descending"),
        ("search", "query", {"type": "string", "maxLength": reads.MAX_SEARCH}, False,
         "only jobs whose name or owner contains this text"),
    ),
    "job": (
        ("name", "query", {"type": "string"}, True, "the job's name"),
        ("until", "query", TIME, False, "the grid's last instant (default: now)"),
    ),
    "runs": (
        ("job", "query", {"type": "string"}, False, "only this job"),
        ("partition", "query", {"type": "string"}, False, "only this partition key"),
        ("status", "query", {"type": "array", "items": {"type": "string", "enum": list(reads.RUN_STATUSES)}},
         False, "only these statuses (repeat the parameter)"),
        ("trigger", "query", {"type": "string", "enum": list(reads.TRIGGERS)}, False, "only this trigger"),
        ("lane", "query", {"type": "string"}, False, "only runs of this lane"),
        ("since", "query", TIME, False, "slots at or after"),
        ("until", "query", TIME, False, "slots before"),
        ("after", "query", {"type": "string"}, False,
         "the cursor of the next page (SLOT~ID of the last run of the previous one)"),
        ("limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}, False,
         "runs per page"),
    ),
    "run": (("run_id", "path", {"type": "integer"}, True, "the run's id"),),
    "gaps": (
        ("job", "query", {"type": "string"}, False, "only this job"),
        ("state", "query", {"type": "array", "items": {"type": "string", "enum": list(reads.GAP_STATES)}},
         False, "only these states (repeat the parameter)"),
        ("since", "query", TIME, False, "slots at or after"),
        ("until", "query", TIME, False, "slots before"),
        ("limit", "query", {"type": "integer", "minimum": 1, "maximum": 10000, "default": 500}, False,
         "rows at most"),
    ),
    "backfills": (("job", "query", {"type": "string"}, False, "only this job's plans"),),
    "backfill": (("plan_id", "path", {"type": "integer"}, True, "the plan's id"),),
    "alerts": (("job", "query", {"type": "string"}, False, "only this job's alerts"),),
    "requests": (
        ("job", "query", {"type": "string"}, False, "only requests about this job"),
        ("before", "query", {"type": "integer", "minimum": 1}, False,
         "only requests with a smaller id (the next page)"),
        ("limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}, False,
         "requests per page"),
    ),
    "runners": (),
    "openapi": (),
}

READ_SUMMARY = {
    "whoami": "who the credential is: name, role, who (as audited) and whether it may act",
    "jobs": "every job with its health, as the Jobs page and `runner status`",
    "job": "one job: health, definition, next slots, the grid of its recent slots, timings",
    "runs": "runs, newest slot first, filtered, a page at a time",
    "run": "one run with its attempts, effects and the requests that touched it",
    "gaps": "the gap scan (runner.missing_slots): slots without a successful run",
    "backfills": "the backfill plans with progress, rate and verification",
    "backfill": "one backfill plan: limits, progress, rate, failures, verification",
    "alerts": "runner.alerts, newest first",
    "requests": "the audit log (runner.requests), newest first",
    "runners": "the runner processes (runner.instances), the live ones first",
    "openapi": "this document",
}

# The JSON API's paths, which runner/web/app.py makes its /api/ routes from. The reads: path ->
# the read of page_reads it answers with (whoami and openapi are their own); GET only.
API_READS: tuple[tuple[str, str], ...] = (
    ("/api/whoami", "whoami"),
    ("/api/openapi.json", "openapi"),
    ("/api/jobs", "jobs"),
    ("/api/job", "job"),
    ("/api/runs", "runs"),
    ("/api/runs/{run_id:int}", "run"),
    ("/api/gaps", "gaps"),
    ("/api/backfills", "backfills"),
    ("/api/backfills/{plan_id:int}", "backfill"),
    ("/api/alerts", "alerts"),
    ("/api/requests", "requests"),
    ("/api/runners", "runners"),
)
# short paths of some actions (each is also POST /api/actions/NAME); a {plan_id} in the path
# is the body's plan_id
ACTION_ROUTES: tuple[tuple[str, str], ...] = (
    ("/api/runs/rerun", "rerun"),
    ("/api/runs/approve", "approve"),
    ("/api/runs/skip", "skip"),
    ("/api/jobs/pause", "pause"),
    ("/api/jobs/resume", "resume"),
    ("/api/backfills", "backfill"),
    ("/api/backfills/{plan_id:int}/pause", "backfill_pause"),
    ("/api/backfills/{plan_id:int}/resume", "backfill_resume"),
    ("/api/backfills/{plan_id:int}/cancel", "backfill_cancel"),
)

LEDGER_HEADERS = {
    "X-Runner-Ledger-As-Of": {
        "description": "the instant the answer is judged at (a replica's last replayed commit)",
        "schema": {"type": "string", "format": "date-time"}},
    "X-Runner-Replay-Lag-Seconds": {
        "description": "how far the replica the answer was read from is behind (0 on a primary)",
        "schema": {"type": "string"}},
}


def _error(code: str) -> dict[str, Any]:
    return {"description": ERROR_STATUSES[code],
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def param_schema(p: registry.Param) -> dict[str, Any]:
    """The JSON schema of one action parameter, from its kind (runner/actions/registry.py KINDS)."""
    schema: dict[str, Any]
    if p.kind == "text":
        schema = {"type": "string", "maxLength": registry.MAX_TEXT}
    elif p.kind == "time":
        schema = dict(TIME)
    elif p.kind in ("int", "float"):
        schema = {"type": "integer" if p.kind == "int" else "number"}
    elif p.kind == "flag":
        schema = {"type": "boolean"}
    elif p.kind == "list":
        schema = {"oneOf": [{"type": "array", "items": {"type": "string"}},
                            {"type": "string", "description": "comma-separated"}]}
    else:  # a limit: a number, or "none" to remove it
        number: dict[str, Any] = {"type": "integer" if p.kind == "limit_int" else "number"}
        if p.low is not None:
            number["minimum"] = p.low
        if p.high is not None:
            number["maximum"] = p.high
        return {"oneOf": [number, {"type": "string", "enum": ["none"]}], "description": p.help}
    if p.low is not None:
        schema["minimum"] = p.low
    if p.high is not None:
        schema["maximum"] = p.high
    if p.default is not None and p.default != "" and p.default != ():
        schema["default"] = list(p.default) if isinstance(p.default, tuple) else p.default
    if p.help:
        schema["description"] = p.help
    return schema


def action_body(action: registry.Action, from_path: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON body of an action: its console parameters (those of ``from_path`` come from
    the path instead), ``reason`` and ``dry_run``."""
    props: dict[str, Any] = {}
    required: list[str] = ["reason"]
    for p in action.params:
        if not p.web or p.name in from_path:
            continue
        props[p.name] = param_schema(p)
        if p.required:
            required.append(p.name)
    props["reason"] = {"type": "string", "minLength": 1, "maxLength": registry.MAX_TEXT,
                       "description": "why (kept in runner.requests)" if action.audited else
                       "why (logged; this action writes no runner.requests row)"}
    props["dry_run"] = {"type": "boolean", "default": False,
                        "description": "answer the impact (what the action would touch), change nothing"}
    return {"type": "object", "properties": props, "required": sorted(required)}


def _action_operation(action: registry.Action, path_params: tuple[str, ...]) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": f"action_{action.name}" + ("_short" if path_params else ""),
        "summary": action.title,
        "description": (f"The action `{action.name}` (CLI: `runner {action.command}`)"
                        + (", audited in runner.requests" if action.audited else ", not audited")
                        + ". An operator's credential is needed. With `dry_run` the answer is the "
                          "impact, nothing written."),
        "tags": ["actions"],
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": action_body(action, path_params)}}},
        "responses": {
            "200": {"description": "done (or its impact, with dry_run)", "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/ActionResult"}}}},
            **{code: _error(code) for code in ERROR_STATUSES},
        },
    }
    if path_params:
        op["parameters"] = [{"name": name, "in": "path", "required": True, "schema": {"type": "integer"},
                             "description": "the backfill plan's id"} for name in path_params]
    return op


def _read_operation(name: str) -> dict[str, Any]:
    params = [{"name": n, "in": where, "required": required, "schema": schema, "description": text,
               **({"style": "form", "explode": True} if schema.get("type") == "array" else {})}
              for n, where, schema, required, text in READ_QUERY[name]]
    op: dict[str, Any] = {
        "operationId": f"read_{name}",
        "summary": READ_SUMMARY[name],
        "tags": ["reads"],
        "responses": {
            "200": {"description": "the data of the console's page, as JSON",
                    **({"headers": LEDGER_HEADERS} if name not in ("whoami", "openapi") else {}),
                    "content": {"application/json": {"schema": {"type": "object"}}}},
            **{code: _error(code) for code in ("400", "401", "404", "421", "429", "503")
               if code != "404" or any(p[1] == "path" for p in READ_QUERY[name])},
        },
    }
    if name == "whoami":
        op["responses"]["200"]["content"]["application/json"]["schema"] = {
            "$ref": "#/components/schemas/WhoAmI"}
    if params:
        op["parameters"] = params
    return op


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document (a JSON-able dict; the same for every console of this code)."""
    paths: dict[str, dict[str, Any]] = {}
    for path, name in API_READS:
        paths.setdefault(_openapi_path(path), {})["get"] = _read_operation(name)
    for name in registry.names():
        paths.setdefault(f"/api/actions/{name}", {})["post"] = _action_operation(registry.get(name), ())
    for path, name in ACTION_ROUTES:
        in_path = tuple(part[1:-1].split(":")[0] for part in path.split("/") if part.startswith("{"))
        paths.setdefault(_openapi_path(path), {})["post"] = _action_operation(registry.get(name), in_path)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "runner web JSON API",
            "version": __version__,
            "description": "The JSON API of `runner web`, the operator console: the same reads as "
                           "its pages and the same audited actions as the CLI.",
        },
        "security": [{"bearer": []}, {"proxy": []}],
        "tags": [{"name": "reads", "description": "GET: a viewer's credential (or --open-reads)"},
                 {"name": "actions", "description": "POST application/json: an operator's credential"}],
        "paths": {path: paths[path] for path in sorted(paths)},
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "a token of RUNNER_WEB_TOKEN, RUNNER_WEB_VIEWER_TOKEN or "
                                          "--token-file"},
                "proxy": {"type": "apiKey", "in": "header", "name": "X-Forwarded-User",
                          "description": "the header named by --trust-proxy-header (any name), set "
                                         "by a trusted reverse proxy; only on --unix-socket"},
            },
            "schemas": {
                "Error": {"type": "object", "required": ["error"],
                          "properties": {"error": {"type": "string", "description": "one line"}}},
                "WhoAmI": {"type": "object", "required": ["name", "role", "who", "actions"], "properties": {
                    "name": {"type": "string"},
                    "role": {"type": "string", "enum": ["viewer", "operator"]},
                    "who": {"type": "string", "description": "as audited in runner.requests"},
                    "actions": {"type": "boolean", "description": "whether this credential may act"}}},
                "ActionResult": {
                    "type": "object", "required": ["dry_run", "action"],
                    "properties": {
                        "dry_run": {"type": "boolean"},
                        "action": {"type": "string", "enum": list(registry.names())},
                        "impact": {"type": "object", "description": "with dry_run: what the action "
                                   "would touch, and refusal (a line) when it may not proceed"},
                        "request": {"type": ["object", "null"], "description": "the runner.requests "
                                    "row written (null when nothing changed or the action is not audited)"},
                    },
                    "additionalProperties": True,
                },
            },
        },
    }


def _openapi_path(path: str) -> str:
    """A Starlette path (``{plan_id:int}``) as OpenAPI writes it (``{plan_id}``)."""
    return "/".join("{" + part[1:-1].split(":")[0] + "}" if part.startswith("{") else part
                    for part in path.split("/"))
