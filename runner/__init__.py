"""runner: a PostgreSQL-native scheduled-job runner that proves every slot ran once.

The public names only (the guarantees: docs/explanation/guarantees.md). Also public: ``app.running(...)``
(the runner inside the application, an ``InProcessRunner``) and the module ``runner.testing``
(``run_once``, ``fresh_database``; the pytest fixture in ``runner.pytest_plugin``).
"""

from __future__ import annotations

__version__ = "0.1.0"

from runner.context import AsyncJobContext, JobContext
from runner.errors import (
    AttemptTimedOut,
    HandlerReturnedAwaitable,
    JobDefinitionError,
    LostOwnership,
    Permanent,
    UnresolvedEffect,
)
from runner.model.app import Backoff, Runner
from runner.model.tiers import MisfireTiers, Tier, tiers
from runner.worker.checkpoints import CheckpointError, HandedOff
from runner.worker.inprocess import InProcessRunner

__all__ = [
    "AsyncJobContext",
    "AttemptTimedOut",
    "Backoff",
    "CheckpointError",
    "HandedOff",
    "HandlerReturnedAwaitable",
    "InProcessRunner",
    "JobContext",
    "JobDefinitionError",
    "LostOwnership",
    "MisfireTiers",
    "Permanent",
    "Runner",
    "Tier",
    "UnresolvedEffect",
    "__version__",
    "tiers",
]
