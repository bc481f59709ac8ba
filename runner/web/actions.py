"""The operator's actions from the console: a thin adapter over the registry
(runner/actions/registry.py), which defines each action once for the CLI and the console.

``/actions/NAME`` (a page: the impact, then a form asking for the reason) and
``/api/actions/NAME`` (JSON; ``dry_run`` answers the impact) serve every action of the
registry. ``impact`` is the registry's plan and impact (reads only), ``perform`` its plan
and audited database function, so the same function writes the change and the same
``runner.requests`` row as the CLI, with ``who`` the authenticated user (``web:<name>``) and
the reason the form or the JSON body gave. Parameters come as a flat mapping of strings (a
form) or JSON values (the API), parsed by the registry's one parser: bad input is an
``OperatorError`` with one line, before anything is written. The registry's CLI-only
parameters (a backfill's ``--pause-when``, prune's archive options) are not read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

from runner.actions import registry as registry
from runner.actions.operate import OperatorError
from runner.model.app import Runner
from runner.settings import lock_namespace
from runner.web.auth import User


def titles() -> dict[str, str]:
    return {name: registry.get(name).title for name in registry.names()}


def fields(action: str) -> tuple[str, ...]:
    """The parameters the console reads for ``action`` (none for an unknown action)."""
    try:
        return registry.get(action).web_params
    except OperatorError:
        return ()


def check(action: str) -> str:
    registry.get(action)
    return action


def _namespace(action: str) -> int | None:
    return lock_namespace() if action == "prune" else None


def impact(conn: psycopg.Connection[Any], action: str, params: Mapping[str, Any],
           app: Runner | None = None) -> dict[str, Any]:
    """What the action would touch (reads only), as the CLI shows it before it asks. Has
    ``refusal`` when the action may not proceed."""
    return registry.impact(conn, action, params, app=app, namespace=_namespace(action))


def perform(conn: psycopg.Connection[Any], action: str, params: Mapping[str, Any], user: User,
            reason: str | None, app: Runner | None = None) -> dict[str, Any]:
    """Do the action as ``user`` with ``reason``: the registry's plan and database function,
    so the same runner.requests row as the CLI. Returns its result (with ``request``, None
    when there was nothing to change or the action is not audited)."""
    check(action)
    if not user.can_act:
        raise PermissionError(f"{user.name} is a viewer: actions need an operator")
    return registry.perform(conn, action, params, user.who, reason, app=app, namespace=_namespace(action))
