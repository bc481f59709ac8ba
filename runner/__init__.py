"""runner: a PostgreSQL-native scheduled-job runner that proves every slot ran once.

The public names only; see README.md for the guarantees.
"""

from __future__ import annotations

__version__ = "0.1.0"

from runner.app import Backoff, Runner
from runner.context import AsyncJobContext, JobContext
from runner.errors import (
    AttemptTimedOut,
    HandlerReturnedAwaitable,
    JobDefinitionError,
    LostOwnership,
    Permanent,
    UnresolvedEffect,
)

__all__ = [
    "AsyncJobContext",
    "AttemptTimedOut",
    "Backoff",
    "HandlerReturnedAwaitable",
    "JobContext",
    "JobDefinitionError",
    "LostOwnership",
    "Permanent",
    "Runner",
    "UnresolvedEffect",
    "__version__",
]
