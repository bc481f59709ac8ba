"""The action registry (runner/actions/registry.py, issue 27 point 3): every operator action defined
once, and both faces offer exactly its actions, so a new action cannot be on one face only;
one parameter parser and one time parser for the CLI, the forms and the API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import typer

from runner import cli
from runner.actions import registry as actions
from runner.web import actions as web_actions

# audited CLI commands that are not operator actions of the registry, each with why
CLI_ONLY = {
    # runs the app's own verification code in the caller's process against the data store
    "backfill verify",
}


def _commands(group: Any, prefix: str = "") -> dict[str, Any]:
    """The leaf commands by path (typer >= 0.24 runs on its own copy of click: duck-typed)."""
    found: dict[str, Any] = {}
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if hasattr(command, "commands"):
            found.update(_commands(command, path + " "))
        else:
            found[path] = command
    return found


def cli_commands() -> dict[str, Any]:
    return _commands(typer.main.get_command(cli.app))


def test_the_cli_and_the_console_offer_exactly_the_registrys_actions() -> None:
    expected = {"rerun", "rerun_many", "pause", "resume", "approve", "skip", "backfill", "backfill_pause", "backfill_resume",
                "backfill_cancel", "retire", "unretire", "lane_set", "prune", "adopt"}
    assert set(actions.names()) == expected
    commands = cli_commands()
    # the CLI: the commands that dispatch through the registry, by the action each serves
    marked = {path: getattr(c.callback, "runner_action", None) for path, c in commands.items()}
    by_action = {action: path for path, action in marked.items() if action is not None}
    assert set(by_action) == expected, "an action on one face only"
    assert len(by_action) == len([a for a in marked.values() if a is not None])  # one command each
    for name in expected:
        assert by_action[name] == actions.get(name).command, name
    # every audited command (it takes --reason) is a registry action, or named in CLI_ONLY
    audited = {path for path, c in commands.items() if any("--reason" in p.opts for p in c.params)}
    assert audited - set(by_action.values()) == CLI_ONLY
    # the console: /actions/NAME and /api/actions/NAME serve the registry (its titles, its fields)
    assert set(web_actions.titles()) == expected
    for name in expected:
        assert web_actions.check(name) == name
        assert set(web_actions.fields(name)) <= {p.name for p in actions.get(name).params}
    with pytest.raises(actions.OperatorError, match="no action 'nope'"):
        web_actions.check("nope")
    assert web_actions.fields("nope") == ()


def test_every_cli_option_of_an_action_is_a_registry_parameter() -> None:
    """The Typer declarations stay hand-written for their help texts, but each option of an
    action command names a parameter of the registry (or is one of the faces' own)."""
    own = {"--reason", "--by", "--yes", "--json", "--database-url", "--app", "--dry-run", "--prometheus-url",
           "--pause-when-prometheus", "--help"}
    commands = cli_commands()
    for name in actions.names():
        action = actions.get(name)
        options = {o for p in commands[action.command].params for o in p.opts if o.startswith("--")}
        declared = {p.option for p in action.params if p.option}
        assert options - own == declared, name


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-01-31T02:00:00+09:00", datetime(2026, 1, 30, 17, tzinfo=UTC)),
    ("2026-01-31T02:00:00Z", datetime(2026, 1, 31, 2, tzinfo=UTC)),
    (" 2026-01-31 02:00+00:00 ", datetime(2026, 1, 31, 2, tzinfo=UTC)),
    ("2026-01-31T02:00:00.5-05:30", datetime(2026, 1, 31, 2, 0, 0, 500000,
                                              tzinfo=timezone(-timedelta(hours=5, minutes=30)))),
])
def test_one_time_parser_takes_iso_8601_with_an_offset(text: str, expected: datetime) -> None:
    assert actions.parse_time(text, "--slot") == expected


def test_the_time_parser_refuses_with_the_clis_lines() -> None:
    with pytest.raises(actions.ParamError) as bad:
        actions.parse_time("yesterday", "--since")
    assert str(bad.value) == ("--since must be an ISO 8601 time like 2026-01-31T02:00:00+09:00, "
                              "got 'yesterday'")
    with pytest.raises(actions.ParamError) as naive:
        actions.parse_time("2026-01-31T02:00:00", "slot")
    assert str(naive.value) == "slot needs a UTC offset (e.g. +00:00 or Z), got '2026-01-31T02:00:00'"
    assert actions.parse_time(None, "x") is None


def test_one_parser_reads_strings_and_json_alike() -> None:
    form = actions.parse("backfill", {"job": "j", "from": "2026-01-01T00:00:00+00:00",
                                      "to": "2026-01-02T00:00:00Z", "partitions": "a, b\nc",
                                      "concurrency": "2", "rate": "0.5", "force": "on", "max_failures": ""})
    body = actions.parse("backfill", {"job": "j", "from": "2026-01-01T00:00:00+00:00",
                                      "to": "2026-01-02T00:00:00Z", "partitions": ["a", "b", "c"],
                                      "concurrency": 2, "rate": 0.5, "force": True})
    assert form == body
    assert form["partitions"] == ("a", "b", "c") and form["max_failures"] == 10 and form["lane"] == "bulk"
    assert form["pause_when"] is None  # the CLI only
    assert actions.parse("backfill", {**body, "pause_when": "SELECT true"})["pause_when"] is None
    assert actions.parse("backfill", {"job": "j", "from": "2026-01-01T00:00:00+00:00", "to":
                                      "2026-01-02T00:00:00Z", "pause_when": "SELECT true"},
                         cli=True)["pause_when"] == "SELECT true"
    lane = actions.parse("lane_set", {"lane": "bulk", "concurrency": "none", "rate": "2.5"})
    assert lane["concurrency"] == actions.Limit(None, True) and lane["rate"] == actions.Limit(2.5, True)
    assert actions.parse("lane_set", {"lane": "bulk"})["rate"] == actions.Limit(None, False)


@pytest.mark.parametrize(("name", "raw", "cli_face", "line"), [
    ("rerun", {"job": "j"}, False, "slot is required"),
    ("rerun", {"job": "j"}, True, "--slot is required"),
    ("rerun", {"job": "j", "slot": "soon"}, True,
     "--slot must be an ISO 8601 time like 2026-01-31T02:00:00+09:00, got 'soon'"),
    ("rerun", {"job": ["j"], "slot": "2026-01-01T00:00:00Z"}, False, "job must be a string"),
    ("rerun", {"job": "j" * 10_001, "slot": "2026-01-01T00:00:00Z"}, False,
     "job is longer than 10000 characters"),
    ("backfill_resume", {"plan_id": "7", "max_failures": "lots"}, False,
     "max_failures must be a number, got 'lots'"),
    ("backfill_resume", {"plan_id": True}, False, "plan_id must be a number, got True"),
    ("backfill", {"job": "j", "from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z",
                  "concurrency": 0}, False, "concurrency must be at least 1, got 0"),
    ("lane_set", {"lane": "x", "concurrency": "many"}, True, "--concurrency must be a number or none, got 'many'"),
    ("lane_set", {"lane": "x", "rank": "1001"}, False, "rank must be between 0 and 1000, got '1001'"),
    ("prune", {"batch": 10_001}, False, "batch must be between 1 and 10000, got 10001"),
])
def test_bad_parameters_are_one_line(name: str, raw: dict[str, Any], cli_face: bool, line: str) -> None:
    with pytest.raises(actions.ParamError) as bad:
        actions.parse(name, raw, cli=cli_face)
    assert str(bad.value) == line


def test_a_reason_is_text_not_empty_and_bounded() -> None:
    assert actions.checked_reason("  why  ") == "why"
    for value, line in [("  ", "reason must not be empty"), (None, "reason must not be empty"),
                        (["x"], "reason must be a string"),
                        ("x" * 10_001, "reason is longer than 10000 characters")]:
        with pytest.raises(actions.ParamError) as bad:
            actions.checked_reason(value)
        assert str(bad.value) == line
