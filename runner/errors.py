"""Exceptions that are part of the public contract."""

from __future__ import annotations


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
