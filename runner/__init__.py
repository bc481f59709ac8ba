"""runner: a PostgreSQL-native scheduled-job runner that proves every slot ran once.

The public names only; see README.md for the guarantees.
"""

from __future__ import annotations

__version__ = "0.1.0"

from runner.app import Backoff, Runner  # noqa: E402
from runner.attempt import JobContext  # noqa: E402
from runner.errors import JobDefinitionError, LostOwnership, Permanent  # noqa: E402

__all__ = [
    "Backoff",
    "JobContext",
    "JobDefinitionError",
    "LostOwnership",
    "Permanent",
    "Runner",
    "__version__",
]
