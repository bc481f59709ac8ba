"""Structured log events: one call per event, readable as text, one JSON object per line
with ``--log-format json``.

``event(log, "job_claimed", job=..., slot=..., run_id=...)`` logs the message
``job_claimed job=... slot=...`` and carries the fields as record attributes, which the JSON
formatter writes as keys.

One record is one line, whatever user text it carries (an exception message from a
partitions callable, a pause reason, a partition key): ``TextFormatter`` shows control,
separator and bidi characters as escapes (runner/printable.py) and indents the lines of a
traceback, so no line that is not a record starts like one; ``JsonFormatter`` writes one
JSON object per line with C1 controls and U+2028/U+2029 escaped as well (JSON itself
escapes only the C0 controls). An application that runs its runner in-process should give
its log handlers one of these two formatters for the same guarantee.

Event names (stable, scripts may match on them): job_claimed,
job_claim_skipped, attempt_started, attempt_succeeded, attempt_failed, attempt_timed_out,
outcome_refused, run_recovered, run_released, attempt_handed_off, owner_ended, misfire_decision,
lock_squatter, runner_started, runner_stopped, privileged_login (a
warning: `runner start` connected as a superuser or as the owner of the runner schema).
"""

from __future__ import annotations

import json
import logging
import re
from datetime import date, datetime
from typing import Any

from runner.printable import printable

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def event(log: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    if not log.isEnabledFor(level):
        return
    text = " ".join(f"{k}={_text(v)}" for k, v in fields.items() if v is not None)
    log.log(level, "%s %s", name, text, extra={"event": name, "fields": fields})


class TextFormatter(logging.Formatter):
    """``ts LEVEL logger: message``, one line per record; a traceback follows on lines
    indented by two spaces (never mistaken for a record of their own)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return "\n".join("  " + printable(line) for line in super().formatException(ei).split("\n"))

    def formatStack(self, stack_info: str) -> str:
        return "\n".join("  " + printable(line) for line in stack_info.split("\n"))


# what json.dumps(ensure_ascii=False) leaves raw but a terminal or a line reader acts on
_JSON_RAW = re.compile("[\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _text(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str):
        plain = value and value.isprintable() and " " not in value and "=" not in value
        return value if plain else repr(value)
    return str(value)


def _json(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    return str(value)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, event, message, and the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None),
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                out.setdefault(key, _json(value))
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in ("event", "fields") and key not in out:
                out[key] = _json(value)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return _JSON_RAW.sub(_json_escape, json.dumps(out, ensure_ascii=False))
