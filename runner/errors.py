"""Exceptions that are part of the public contract, and how any exception is turned into
text that is safe to store (``error_text``)."""

from __future__ import annotations

from runner.settings import redact

MAX_ERROR_CHARS = 4000


class Permanent(Exception):
    """Raise from a handler for a failure that retrying cannot fix (bad input, auth,
    validation): the run goes straight to ``dead`` and is never retried automatically."""


class JobDefinitionError(ValueError):
    """A job definition is invalid. The message names the job and the field, on one line."""

    def __init__(self, job: str, field: str, message: str) -> None:
        self.job = job
        self.field = field
        super().__init__(f"job {job!r}: {field}: {message}")


class LostOwnership(Exception):
    """The attempt no longer owns its run (a newer fence exists, or the run was finished by
    someone else). Raised by ``ctx.heartbeat()`` so the handler stops; nothing it wrote
    through ``ctx.db`` is committed."""


class UnresolvedEffect(Permanent):
    """A side effect of an earlier attempt is in an unknown state and could not be resolved
    by the handler's check: sending again could repeat it, so the run goes to ``dead`` for a
    human to decide."""


class AttemptTimedOut(Exception):
    """The attempt ran longer than its job's ``timeout``. Raised by ``ctx.heartbeat()`` once
    the runner has given up on the attempt; the handler should stop."""


class LockUnavailable(Exception):
    """The run's advisory lock key is held by a session that is not this attempt's runner
    (an application sharing the lock namespace, or a squatter). The attempt fails and counts
    against ``max_attempts``, so such a run ends ``dead`` rather than retrying forever."""


class HandlerReturnedAwaitable(Permanent):
    """The handler returned work that has not happened yet: a coroutine (it was never
    awaited), another awaitable, a generator or an async generator (their bodies never ran).
    The attempt fails and, since retrying the same handler cannot help, the run goes to
    ``dead``; the coroutine or generator is closed so it can never run half-way later."""


def error_text(exc: BaseException) -> tuple[str, str]:
    """The class and message of an exception, safe to store: never raises, no NUL bytes,
    valid UTF-8, at most MAX_ERROR_CHARS characters, and redacted (runner.settings.redact:
    a database URL's password in the message is not stored, logged or alerted on)."""
    cls = type(exc)
    name = f"{cls.__module__}.{cls.__qualname__}" if cls.__module__ != "builtins" else cls.__qualname__
    try:
        message = str(exc)
    except Exception:
        try:
            message = repr(exc)
        except Exception:
            message = f"<{cls.__qualname__} whose str() raised>"
    if not isinstance(message, str):
        message = f"<{cls.__qualname__} with a non-string message>"
    return _clean(name, 200), _clean(redact(message), MAX_ERROR_CHARS)


def _clean(text: str, limit: int) -> str:
    text = text.replace("\x00", "\\x00")
    text = text.encode("utf-8", errors="replace").decode("utf-8", errors="replace")
    if len(text) > limit:
        text = text[: limit - 20] + f"... [{len(text) - limit + 20} more]"
    return text


class JobRetired(Exception):
    """``runner start`` with a job in its code that an operator retired (runner retire): the
    runner refuses to start until the job is unretired or removed from the code."""
