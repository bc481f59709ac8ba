"""Structured log events: one call per event, readable as text, one JSON object per line
with ``--log-format json``.

``event(log, "job_claimed", job=..., slot=..., run_id=...)`` logs the message
``job_claimed job=... slot=...`` and carries the fields as record attributes, which the JSON
formatter writes as keys. Event names (stable, scripts may match on them): job_claimed,
job_claim_skipped, attempt_started, attempt_succeeded, attempt_failed, attempt_timed_out,
outcome_refused, run_recovered, run_released, owner_ended, misfire_decision,
runner_started, runner_stopped, privileged_login (a warning: `runner start` connected as a
superuser or as the owner of the runner schema).
"""

from __future__ import annotations

import json
import logging
from datetime import date, datetime
from typing import Any

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def event(log: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    if not log.isEnabledFor(level):
        return
    text = " ".join(f"{k}={_text(v)}" for k, v in fields.items() if v is not None)
    log.log(level, "%s %s", name, text, extra={"event": name, "fields": fields})


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
        return json.dumps(out, ensure_ascii=False)
