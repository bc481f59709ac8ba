"""The registry of misfire policies: one entry per way the misfire duty (runner/worker/misfire.py)
decides a late slot, and the one source of every list of their names.

Each entry says how the policy is named where a user writes it -- ``misfire="..."`` on a job
(``policy``), an action of ``tiers(...)`` (``tier_action``, runner/model/tiers.py), or both --
whether its decisions start runs (``runs``: a job with ``side_effects=True`` checks its
effect log before such a tier applies), and whether a tier with this action alerts the owner
unless told otherwise (``alert``). Adding a policy is one entry here, plus its branch in
``misfire._decide``.

Derived from it: ``app.MISFIRE_POLICIES`` (the single policies), ``tiers.ACTIONS`` and
``tiers.RUNS`` (the tier actions), and ``by_tier_action`` (which policy decides a tier's rows).
SQL keeps one word list of its own, the CHECK constraint on ``runner.misfire_decisions.action``
(sql/schema/0001_baseline.sql); tests/test_expected.py keeps it equal to ``tiers.ACTIONS``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    """One misfire policy. ``policy``: its name in ``misfire="..."`` (None: only a tier's);
    ``tier_action``: its name as a tier's action (None: not a tier action)."""

    name: str
    summary: str
    policy: str | None
    tier_action: str | None
    runs: bool
    alert: bool = False


REGISTRY: dict[str, Policy] = {p.name: p for p in (
    Policy("skip", "each late slot recorded skipped, with the reason", "skip", "skip", runs=False),
    Policy("catch_up", "each late slot runs (trigger catch_up), oldest first, one at a time",
           None, "catch_up", runs=True),
    Policy("coalesce", "one run at the newest late slot covers the range; the others point to it",
           "coalesce", "coalesce", runs=True),
    Policy("backfill", "an audited backfill plan over the range (runner.tier_backfill_v1)",
           None, "backfill", runs=True, alert=True),
    Policy("replay", "the newest late slots run, capped by max_catch_up(_age); the rest held",
           "replay", None, runs=True),
    Policy("manual", "each late slot held awaiting_approval until an operator decides",
           "manual", "approve", runs=False, alert=True),
)}

SINGLE = tuple(p.policy for p in REGISTRY.values() if p.policy is not None)
TIER_ACTIONS = tuple(p.tier_action for p in REGISTRY.values() if p.tier_action is not None)
TIER_RUNS = tuple(p.tier_action for p in REGISTRY.values() if p.tier_action is not None and p.runs)
TIER_ALERTS = tuple(p.tier_action for p in REGISTRY.values() if p.tier_action is not None and p.alert)


def by_tier_action(action: str) -> Policy:
    """The policy that decides the rows of a tier with this action."""
    return next(p for p in REGISTRY.values() if p.tier_action == action)
