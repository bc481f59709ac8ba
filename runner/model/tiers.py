"""Misfire tiers: what happens to a job's missed slots, by how long the job was missing.

A single policy (``misfire="coalesce"``, ...) treats a 2-minute hiccup and a weekend outage
alike. Tiers choose by lateness::

    misfire=tiers(
        ("5m", "catch_up"),                                  # up to 5 minutes: run each slot
        ("1h", "coalesce"),                                  # up to 1 hour: one run covers all
        ("24h", "backfill", {"lane": "correction"}),         # up to 24 hours: a plan, alert
        (None, "approve"),                                   # beyond: held for a person
        side_effects=True,                                   # only once effects are checked
    )

``tiers()`` with no tier gives exactly these four (the defaults to adjust per job).

**What is measured.** The *lateness* of a range of late slots (runner/worker/misfire.py: the
downtime a runner finds at start, or the slots the loop fell behind on) is how long the job
has been missing when the duty first decides it: the *expected* time from the range's oldest
slot to now (runner.expected_spans_v1: tracked, not retired, not paused). A pause is not an
outage: a job paused for an hour, resumed while its runners were down and started 3 minutes
later is 3 minutes late, not an hour; likewise the time it was retired. (Each decided row
also records its ``slot_lateness``: the wall-clock time since its slot.)

One tier decides the whole range (its every slot x partition), so
a 2-hour outage is one backfill, not a backfill, a coalesced run and a few catch-ups side by
side. A tier applies when the lateness is at most its ``up_to`` and more than the previous
tier's: exactly 5 minutes is the first tier above, exactly 1 hour the second. The last tier
has no bound (``None``), so every lateness has a tier.

**Actions.**

* ``skip``: each slot recorded ``skipped``, with the reason.
* ``catch_up``: each slot runs (trigger ``catch_up``), oldest first, one at a time per job
  and partition (as ``misfire="replay"`` runs; the tier's bound is the cap).
* ``coalesce``: one run per partition covers the whole range (as ``misfire="coalesce"``).
* ``backfill``: a backfill plan over the range (runner/actions/backfill.py), created through
  ``runner.tier_backfill_v1`` which calls ``runner.create_backfill_v1``, the function behind
  ``runner backfill``: audited in runner.requests (action ``backfill``, ``who`` the runner's
  tier, ``db_user`` the worker's login), in the tier's ``lane`` (``correction`` unless set;
  ``bulk`` for large historical ones), with its ``concurrency`` (1), ``rate``,
  ``max_failures`` (10) and ``pause_when``. The owner is alerted.
* ``approve``: each slot held ``awaiting_approval``; nothing runs before a person approves
  (``runner approve``, runner/actions/approvals.py) or skips it. The owner is alerted.

``alert`` (a tier option; on by default for ``backfill`` and ``approve``) raises a
``misfire_tier`` row in runner.alerts, with the job's owner, while the tier's work is open:
its plan not finished, or its runs still awaiting approval.

**Side effects.** ``side_effects=True`` (a job that sends mail, calls APIs, pays): before a
tier that would run slots (``catch_up``, ``coalesce``, ``backfill``) applies, the duty checks
the job's effect log (runner/worker/effects.py) *slot by slot*. A late slot is held
``awaiting_approval`` instead (action ``approve``, alerted, the effect named in its reason)
only when its own earlier attempts left an effect of unknown delivery (``sent`` or
``unknown``), i.e. a catch-up of *that* slot could repeat what may already have happened: an
attempt of a run of the job at the same slot (a slot claimed for some partitions before the
outage), or of a run with one of the slot's idempotency keys (the same window and partition,
e.g. several slots sharing a business window). Every other slot follows its tier: one unknown
effect last week no longer holds today's three-minute catch-up. A ``coalesce`` tier runs at
the newest slot of the range that is not held (a held slot cannot cover the others). The
runs with unknown effects are read once, when the range is first ruled (at most
``misfire.UNSETTLED_LIMIT``, newest first), like the tier itself. What it cannot check:
effects a handler sends without ``ctx.effect``, and effects whose run was pruned (their
``run_id`` is NULL: they concern no slot). Holding, not deferring: a held slot has its run
row and reason at once, and ``runner approve`` is the one way forward, as for an ``approve``
tier.

**A backfill tier's pause condition** (``pause_when``) is evaluated when the tier makes its
plan, before any run of it can start: as the condition role, on a short connection of its own
(runner/worker/conditions.py ``evaluate_apart``, as ``runner backfill`` does at creation). True, or
failing, and the plan is made paused in the same transaction that made it, its cause recorded
as every pause records it (``pause_reason`` "pause_when returned true when the plan was
created" or "pause_when failed when the plan was created: ...", ``pause_cause`` ``condition``
or ``condition_error``, ``pauses`` counted): no process ever sees it running. An operator
resumes it (``runner backfill resume``); from then on the condition duty checks it as any
plan's. The loop waits for that one evaluation (its statement timeout is 1 s; a Prometheus
query's 3 s), once per plan.

**The record.** Every slot x partition a tier decides has a row in ``runner.misfire_decisions``
(its run, tier, action, the range's lateness and the slot's own, the reason, the plan), kept
while the run is; ``runner runs`` shows the tier.

The tiers are stored in the job's definition row (``runner.jobs.options -> 'misfire_tiers'``,
durations in seconds), so psql and the alerts see what each job declared.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from runner.model import policies
from runner.model.schedule import ScheduleError, parse_interval

# from the registry of misfire policies (runner/model/policies.py)
ACTIONS = policies.TIER_ACTIONS
RUNS = policies.TIER_RUNS  # actions that start runs (checked for side effects)
_BACKFILL_ONLY = ("lane", "concurrency", "rate", "max_failures", "pause_when")
_OPTIONS = ("name", "alert", *_BACKFILL_ONLY)
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


class TierError(ValueError):
    """An invalid tier list; the message is one line (app.py prefixes the job and field)."""


@dataclass(frozen=True)
class Tier:
    """One tier: ``action`` for ranges late by at most ``up_to`` (None: any lateness)."""

    up_to: timedelta | None
    action: str
    name: str
    alert: bool
    lane: str = "correction"
    concurrency: int = 1
    rate: float | None = None
    max_failures: int | None = 10
    pause_when: str | None = None

    def describe(self, lower: timedelta | None) -> str:
        """``'coalesce' (late 5m-1h)``: the tier and the lateness it covers."""
        if self.up_to is None:
            span = f"over {human(lower)}" if lower else "any"
        else:
            span = f"{human(lower)}-{human(self.up_to)}" if lower else f"up to {human(self.up_to)}"
        return f"{self.name!r} (late {span})"

    def as_options(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name, "action": self.action, "alert": self.alert,
            "up_to_seconds": self.up_to.total_seconds() if self.up_to is not None else None}
        if self.action == "backfill":
            out.update(lane=self.lane, concurrency=self.concurrency, rate=self.rate,
                       max_failures=self.max_failures, pause_when=self.pause_when)
        return out


@dataclass(frozen=True)
class MisfireTiers:
    """The tiers of one job, ordered by ``up_to``; the last has no bound."""

    tiers: tuple[Tier, ...]
    side_effects: bool = False

    def pick(self, lateness: timedelta) -> tuple[Tier, str]:
        """The tier for a range this late, and how it covers it (for the reason)."""
        lower: timedelta | None = None
        for tier in self.tiers:
            if tier.up_to is None or lateness <= tier.up_to:
                return tier, tier.describe(lower)
            lower = tier.up_to
        raise AssertionError("the last tier has no bound")  # validated at registration

    def named(self, name: str) -> tuple[Tier, str] | None:
        """The tier of this name and how it covers lateness (as ``pick`` says it), or None."""
        lower: timedelta | None = None
        for tier in self.tiers:
            if tier.name == name:
                return tier, tier.describe(lower)
            lower = tier.up_to
        return None

    def as_options(self) -> dict[str, Any]:
        return {"side_effects": self.side_effects, "tiers": [t.as_options() for t in self.tiers]}


DEFAULT = (("5m", "catch_up"), ("1h", "coalesce"), ("24h", "backfill"), (None, "approve"))


def tiers(*items: Tier | Sequence[Any] | Mapping[str, Any], side_effects: bool = False) -> MisfireTiers:
    """Misfire tiers for ``@app.job(misfire=...)``. Each item: ``(up_to, action)``,
    ``(up_to, action, {options})``, a dict with ``up_to`` and ``action`` (and options), or a
    ``Tier``. ``up_to``: a duration (``"5m"``, seconds, a timedelta) or None for the last.
    Options: ``name`` (default: the action), ``alert``; for ``backfill``: ``lane``,
    ``concurrency``, ``rate``, ``max_failures``, ``pause_when``. No item: the defaults
    (``DEFAULT``). Raises TierError (one line) when invalid."""
    if not isinstance(side_effects, bool):
        raise TierError(f"side_effects must be True or False, got {side_effects!r}")
    parsed = tuple(_tier(i, item) for i, item in enumerate(items or DEFAULT, 1))
    names: set[str] = set()
    previous: timedelta | None = None
    for i, tier in enumerate(parsed, 1):
        if tier.name in names:
            raise TierError(f"tier {i}: the name {tier.name!r} is used twice")
        names.add(tier.name)
        if tier.up_to is None and i != len(parsed):
            raise TierError(f"tier {i} ({tier.name!r}) has no bound (up_to None) but is not the last")
        if tier.up_to is not None and previous is not None and tier.up_to <= previous:
            raise TierError(f"tier {i} ({tier.name!r}): up_to {human(tier.up_to)} must be more than the "
                            f"previous tier's {human(previous)} (tiers are ordered and do not overlap)")
        previous = tier.up_to if tier.up_to is not None else previous
    if parsed[-1].up_to is not None:
        raise TierError(f"the last tier ({parsed[-1].name!r}) needs up_to None, so that every lateness "
                        f"has a tier (add (None, 'approve') for slots later than {human(parsed[-1].up_to)})")
    return MisfireTiers(parsed, side_effects)


def _tier(i: int, item: Any) -> Tier:
    if isinstance(item, Tier):
        return item
    if isinstance(item, Mapping):
        opts = dict(item)
        if "action" not in opts or "up_to" not in opts:
            raise TierError(f"tier {i}: a dict needs 'up_to' and 'action', got keys {sorted(map(str, opts))}")
        up_to, action = opts.pop("up_to"), opts.pop("action")
    elif isinstance(item, Sequence) and not isinstance(item, str | bytes) and len(item) in (2, 3):
        up_to, action = item[0], item[1]
        if len(item) == 3 and not isinstance(item[2], Mapping):
            raise TierError(f"tier {i}: the third element must be a dict of options, got {item[2]!r}")
        opts = dict(item[2]) if len(item) == 3 else {}
    else:
        raise TierError(f"tier {i}: give (up_to, action), (up_to, action, {{options}}) or a dict, "
                        f"got {item!r}")
    if action not in ACTIONS:
        raise TierError(f"tier {i}: action must be one of {', '.join(ACTIONS)}, got {action!r}")
    unknown = sorted(set(map(str, opts)) - set(_OPTIONS))
    if unknown:
        raise TierError(f"tier {i} ({action}): unknown option(s) {', '.join(unknown)}; "
                        f"known: {', '.join(_OPTIONS)}")
    misplaced = [k for k in _BACKFILL_ONLY if k in opts and action != "backfill"]
    if misplaced:
        raise TierError(f"tier {i} ({action}): {', '.join(misplaced)} only apply to a backfill tier")
    bound = None
    if up_to is not None:
        try:
            bound = parse_interval(up_to, field="up_to")
        except ScheduleError as exc:
            raise TierError(f"tier {i} ({action}): up_to: {exc}") from None
    name = opts.get("name", action)
    if not isinstance(name, str) or not _NAME.match(name):
        raise TierError(f"tier {i}: name must be lowercase letters, digits, - or _ (at most 40), "
                        f"got {name!r}")
    alert = opts.get("alert", action in policies.TIER_ALERTS)
    if not isinstance(alert, bool):
        raise TierError(f"tier {i} ({name}): alert must be True or False, got {alert!r}")
    lane = opts.get("lane", "correction")
    if not isinstance(lane, str) or not _NAME.match(lane):
        raise TierError(f"tier {i} ({name}): lane must be a lane name like 'correction' or 'bulk', "
                        f"got {lane!r}")
    concurrency = opts.get("concurrency", 1)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise TierError(f"tier {i} ({name}): concurrency must be an integer >= 1, got {concurrency!r}")
    rate = opts.get("rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0):
        raise TierError(f"tier {i} ({name}): rate must be a number of runs per second > 0, got {rate!r}")
    max_failures = opts.get("max_failures", 10)
    if max_failures is not None and (isinstance(max_failures, bool) or not isinstance(max_failures, int)
                                     or max_failures < 0):
        raise TierError(f"tier {i} ({name}): max_failures must be an integer >= 0 or None, "
                        f"got {max_failures!r}")
    pause_when = opts.get("pause_when")
    if pause_when is not None and (not isinstance(pause_when, str) or not pause_when.strip()):
        raise TierError(f"tier {i} ({name}): pause_when must be a SQL query returning one boolean")
    return Tier(up_to=bound, action=action, name=name, alert=alert, lane=lane, concurrency=concurrency,
                rate=float(rate) if rate is not None else None, max_failures=max_failures,
                pause_when=pause_when)


def human(delta: timedelta) -> str:
    """``5m``, ``1h``, ``1h30m``, ``2d``: a duration as the tiers are written."""
    seconds = delta.total_seconds()
    if seconds != int(seconds):
        return f"{seconds:g}s"
    s = int(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            parts.append(f"{s // size}{unit}")
            s %= size
    return "".join(parts) or "0s"
