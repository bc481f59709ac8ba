"""The misfire duty: what happens to slots that were not started in time.

A slot is *late* when no run was started for it within its job's ``grace`` after its
instant: every runner was down, or stopped, or too busy. The loop never claims a late slot
as if it were on time; it hands the job a *range* of late slots, ``[first, last]``, fixed
when it is handed over, and ``run_once`` decides the slot × partitions of that range that
have no run, oldest first, in bounded batches, under the job's row lock (so concurrent
runners decide once). Ranges come from:

* a runner's start: from the newest *complete* slot at or before ``now - grace`` (every
  partition it expects has a run; see ``latest_complete_slot``) to the newest slot at or
  before ``now - grace``: the downtime, including a slot whose fan-out a shutdown cut short;
* the loop falling behind (stopped, overloaded, a backlog of claims past grace): exactly the
  slots it did not claim in time;
* ``overlap="wait"`` rows that waited past grace: their slot.

Because a range is fixed, on-time claims made meanwhile (after ``last``) cannot hide late
slots, and every batch of a range decides against the same newest slot.

**A range outlives its runner.** A range that its first pass does not finish gets its row
in runner.misfire_ranges (0004_expected), in that pass's transaction, with its ruling (misfire
tiers: the tier and the lateness); each later pass records where the next one starts, and the
last closes it (a range decided in one transaction, the usual case, writes no row). A runner
stopped or killed midway leaves the row open, and the next runner to start resumes it first,
from there, with the same ruling (``open_ranges``): the rest of the range is neither left
undecided (that runner's own downtime starts at its newest complete slot, past the range)
nor ruled again by the lateness it has by then. Two runners that find the same downtime
share its row and its ruling (the first to write it wins). What is not kept: the unsettled
effects a ``side_effects=True`` ruling read (read again when a range is resumed). Policies:

The policies are registered in runner/model/policies.py (one entry each):

* ``skip``: each late slot × partition is recorded ``skipped``, with the reason.
* ``coalesce`` (the default): one run per partition, at the range's newest slot, whose
  window is widened to start where the oldest late window of that partition started; the
  other late slots are recorded ``coalesced``, pointing (``coalesced_into_slot``) to it. The
  target run is written *before* any row pointing to it, in the same transaction, and a row
  is only coalesced into a run that covers its window: when the newest slot already has a
  run of its own (or the partition does not exist there), the late slot runs on its own
  (trigger ``catch_up``). So a coalesced row never points at nothing.
* ``replay``: each late slot runs (trigger ``catch_up``), oldest first and one at a time per
  job and partition (the next starts as soon as the previous ends), but only the newest
  ``max_catch_up`` slots of the range younger than ``max_catch_up_age``; the rest are held
  as ``awaiting_approval``.
* ``manual``: every late slot is held as ``awaiting_approval`` until an operator approves
  (``runner approve``) or skips (``runner skip``) it.

**Which slots are decided: expected ones.** A range is decided only at the job's *expected*
slots, as one SQL definition gives them (runner.expected_slots_v1 on
runner.expected_spans_v1, sql/functions): the slots of the job's schedule history that are
tracked (at or after ``track_from``), not retired (not between a ``runner retire`` and its
``runner unretire``), not paused (not between a ``runner pause`` and its ``resume``) and due.
This module never re-derives a pause or a retirement itself. So:

* slots that fell due while the job was paused are not late: they are left to the gap scan
  (a backfill or ``runner skip`` decides them), and nothing is decided for a job while it is
  paused;
* slots between a retirement and its end are never decided, whatever the policy (a runner
  started after ``runner unretire`` finds its downtime reaching back before the retirement);
* a misfire tier's *lateness* is the range's outage: the expected time from its oldest slot
  to now, leaving out paused and retired time (a pause is not an outage);
* a range's newest expected slot, where a coalesce runs, and the slots a replay runs are
  fixed on its first pass (again when the loop extends the range).

Partitions come from the slot's fan-out (runner/worker/fanout.py): static ones, or the set a
dynamic job recorded when the slot was first fanned out (computed and recorded here if it
never was). A slot whose fan-out fails is recorded as such and shows in the gap scan.

A replay of a job that declares ``verify=`` is verified like a backfill: its catch-up runs
belong to a plan in runner.backfills (requested by the runner itself, concurrency 1, so one at
a time and oldest first), which the backfill lane executes and, once done, checks with the
job's ``verify`` over the replayed range, recording the outcome on the plan
(``runner backfill show``).

A job with ``misfire=tiers(...)`` (runner/model/tiers.py) has its policy chosen per range, by the
range's lateness (how long the job has been missing -- expected, not paused or retired, time --
since the range's oldest slot when the range is first decided, fixed for the whole range):
``skip``, ``catch_up`` (every slot, as replay runs them), ``coalesce`` and
``approve`` (held, as ``manual``) are decided here as above; ``backfill`` writes no run itself:
it hands the range's slot x partitions that have no run, under the same row lock, to
``runner.tier_backfill_v1``, which creates one audited plan over them (at most
``TIER_PLAN_BATCH`` runs a plan), made paused when the tier's ``pause_when`` holds at that
moment. With ``side_effects=True``, the late slots whose own earlier attempts left effects of
unknown delivery are held for approval slot by slot (``Ruling.held_for``, runner/model/tiers.py
says what concerns a slot), before the tier decides the others. Each decided row also gets
its ``runner.misfire_decisions`` row (tier, action, lateness, reason), in the same
transaction.

Every decision is a run row with its reason in ``status_reason``. Slots outside the ranges
handed over (older gaps) are not decided here: the gap scan (``runner.missing_slots``)
lists them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from runner.events import event
from runner.model import policies
from runner.model.jobs import JobDef
from runner.model.schedule import idempotency_key
from runner.model.tiers import RUNS, Tier
from runner.sqlfiles import queries
from runner.worker import conditions
from runner.worker.fanout import plan_slot

log = logging.getLogger("runner.misfire")
Q = queries("misfire")
BQ = queries("backfill")  # a plan's pause statements: one way to pause a plan

BATCH = 1000
UNSETTLED_LIMIT = 10_000  # runs with effects of unknown delivery read for a side-effects check
TIER_PLAN_BATCH = 100_000  # slot x partitions in one plan of a backfill tier
EPSILON = timedelta(microseconds=1)


@dataclass
class Decisions:
    counts: dict[str, int] = field(default_factory=dict)
    more: bool = False  # late slots of the range remain for the next pass
    paused: bool = False  # the job is paused: nothing decided, try again later
    next_first: datetime | None = None  # where the next pass over the range starts

    @property
    def started(self) -> int:
        return self.counts.get("pending", 0)


@dataclass(frozen=True)
class _Row:
    slot: datetime
    partition: str
    window_start: datetime
    window_end: datetime
    status: str
    reason: str
    coalesced_into: datetime | None = None


@dataclass
class LateRange:
    """Late slots ``[first, last]`` of one job handed to the duty. ``first`` None: from the
    newest complete slot (a runner's start)."""

    first: datetime | None
    last: datetime
    ruling: Ruling | None = None  # misfire tiers: fixed when the range is first decided
    # fixed on the range's first pass: its newest expected slot (where a coalesce runs), and
    # the slots a replay runs
    decided: bool = False
    newest: datetime | None = None
    replayed: set[datetime] = field(default_factory=set)

    # its key in runner.misfire_ranges (the first slot it started at), and whether it has a row
    key: datetime | None = None
    stored: bool = False

    def extend(self, last: datetime) -> None:
        """More late slots after ``last``: the range now ends there (its newest expected slot
        and replayed slots are found again on the next pass; a tier ruling stays)."""
        if last > self.last:
            self.last = last
            self.decided = False
    # a coalesce tier of a job with side effects: the newest slot of the range not held for
    # its own effects (the run that covers the others); fixed with the ruling
    target: datetime | None = None


@dataclass(frozen=True)
class Unsettled:
    """Effects of unknown delivery (``sent``, ``unknown``) left by the attempts of one run of
    the job: its slot and idempotency key, how many, one key for the reason."""

    slot: datetime
    idempotency_key: str
    effects: int
    example: str


@dataclass(frozen=True)
class Ruling:
    """How a job with misfire tiers decides one range: the tier its lateness picked, its
    action, the label of its reasons; with ``side_effects=True`` and a tier that runs slots,
    the job's runs whose effects are of unknown delivery (each late slot they concern is held
    for approval instead: ``held_for``)."""

    tier: Tier
    action: str
    lateness: timedelta
    label: str
    alert: bool
    unsettled: tuple[Unsettled, ...] = ()

    def held_for(self, slot: datetime, keys: Sequence[str]) -> tuple[int, str] | None:
        """Whether a late slot (the idempotency keys of its rows) is held for its own effects:
        (how many effects, one key) when an earlier attempt at that slot, or of a run with
        one of its keys (the same window and partition), left an effect of unknown delivery."""
        mine = [u for u in self.unsettled if u.slot == slot or u.idempotency_key in keys]
        if not mine:
            return None
        return sum(u.effects for u in mine), min(u.example for u in mine)

    def holding(self, count: int, example: str) -> Ruling:
        """The ruling of a slot held for its own effects: action approve, alerted."""
        return Ruling(self.tier, "approve", self.lateness,
                      f"{self.label.split('; side effects')[0]}; side effects not checked for this slot: "
                      f"{count} effect(s) of its earlier attempts of unknown delivery (e.g. {example!r}): "
                      "resolve them, then runner approve", alert=True)


def cutoff_for(job: JobDef, now: datetime) -> datetime:
    """Slots at or before this instant are late (if they have no run)."""
    return now - job.grace - EPSILON


def start_of_downtime(conn: psycopg.Connection[Any], job: JobDef, last: datetime,
                      track_from: datetime) -> datetime | None:
    """The first slot of a starting runner's late range, or None when there is none."""
    expected = len(job.partitions) if isinstance(job.partitions, tuple) else 1
    row = conn.execute(Q["latest_complete_slot"], {
        "job_name": job.name, "cutoff": last, "track_from": track_from,
        "expected": max(expected, 1)}).fetchone()
    assert row is not None
    complete, oldest, groups = row
    if complete is not None:
        after = job.schedule.next_after(complete)
    elif groups:
        after = oldest  # no complete slot among the last 50 with runs: decide from the oldest
    else:
        after = job.schedule.next_after(track_from - EPSILON)
    return after if after <= last else None


def run_once(conn: psycopg.Connection[Any], job: JobDef, now: datetime, late: LateRange,
             batch: int = BATCH, prometheus_url: str | None = None) -> Decisions:
    """Decide up to about ``batch`` late slot × partitions of ``late`` (one transaction);
    advances ``late.first``. ``prometheus_url``: where a backfill tier's Prometheus pause
    condition is asked when its plan is created."""
    sched = job.schedule
    result = Decisions()
    with conn.transaction():
        row = conn.execute(Q["lock_job"], {"job_name": job.name}).fetchone()
        if row is None:
            return result  # not synced yet
        if row[2]:  # paused: nothing is late while a job is paused (the gap scan shows it)
            result.paused = result.more = True
            return result
        # slots before the current schedule's valid_from are judged by the schedule then in
        # force (the gap scan lists them); this code's schedule decides only from there on
        since = max(row[1], row[3] or row[1])
        if late.first is None:
            late.first = start_of_downtime(conn, job, late.last, since)
        elif late.first < since:
            late.first = sched.next_after(since - EPSILON)
        if late.first is None or late.first > late.last:
            _advance(conn, job, late, None)
            return result
        if late.key is None:  # its first pass: the range gets its row, and keeps its ruling there
            _open(conn, job, late, now)
        if not late.decided:  # the range's first pass: what is fixed for the whole range
            late.decided = True
            expected = _expected(conn, job, late.first, late.last, now)
            late.newest = expected[-1] if expected else None
            if job.misfire == "replay":
                late.replayed = _replay_set(job, expected, now)
        if late.newest is None or late.newest < late.first:
            _advance(conn, job, late, None)
            return result  # nothing expected is left in the range (paused, retired)
        policy, label = job.misfire, f"misfire={job.misfire}"
        newest = late.newest  # the slot a coalesced range runs at
        if job.misfire_tiers is not None:
            if late.ruling is None:  # (a range resumed from the ledger whose tier is gone)
                late.ruling = _rule(conn, job, _outage(conn, job, late.first, now))
            if late.target is None and late.ruling.unsettled and late.ruling.action == "coalesce":
                late.target = _coalesce_target(conn, job, late, now)
            policy, label = policies.by_tier_action(late.ruling.action).name, late.ruling.label
            if policy == "backfill":
                batch = max(batch, TIER_PLAN_BATCH)
            if late.ruling.unsettled and late.ruling.action == "coalesce":
                newest = late.target or late.newest
        replayed = late.replayed if policy == "replay" else set()
        # this pass looks at the next `batch` slots of the schedule at most, and decides the
        # expected ones among them (runner.expected_slots_v1) until about `batch` rows
        window_end = late.first
        for _ in range(batch - 1):
            following = sched.next_after(window_end)
            if following > late.last:
                break
            window_end = following
        candidates: list[_Row] = []
        slot: datetime | None = None
        for expected_slot in _expected(conn, job, late.first, window_end, now):
            if len(candidates) >= batch:
                slot = expected_slot
                break
            candidates.extend(_decide(conn, job, expected_slot, newest, replayed, now, policy, label))
        if slot is None:
            slot = sched.next_after(window_end)
        result.more = slot <= late.last
        result.next_first = slot if result.more else None
        late.first = slot
        _advance(conn, job, late, result.next_first)
        rows = _without_runs(conn, job, candidates)
        if late.ruling is not None and late.ruling.unsettled:
            rows = _hold_unsettled(conn, job, rows, late.ruling, now, result)
        if policy == "backfill":
            _tier_plan(conn, job, rows, late.ruling, now, result, prometheus_url)
        else:
            if policy == "coalesce":
                rows = _coalesce(conn, job, rows, newest, now, result, label, late.ruling)
            replays = [r for r in rows if r.status == "pending"]
            group = _replay_plan(conn, job, replays) if replays and job.verify is not None else None
            _record(conn, job, rows, now, result, group, late.ruling)
    if result.counts:
        event(log, "misfire_decision", job=job.name, policy=job.misfire,
              tier=late.ruling.tier.name if late.ruling else None,
              action=late.ruling.action if late.ruling else None,
              **{f"runs_{k}": v for k, v in sorted(result.counts.items())})
    return result


def _open(conn: psycopg.Connection[Any], job: JobDef, late: LateRange, now: datetime) -> None:
    """A range's first pass: its key, and its ruling (misfire tiers): the one of an open row of
    the same range another runner wrote, else ruled by its outage (runner.expected_spans_v1)."""
    assert late.first is not None
    late.key = late.first
    if job.misfire_tiers is None or late.ruling is not None:
        return
    row = conn.execute(Q["range_ruling"], {"job_name": job.name, "first": late.first}).fetchone()
    if row is not None and row[0] is not None:
        late.stored = True
        late.ruling = restore_ruling(conn, job, row[0], row[1], row[2])
    if late.ruling is None:
        late.ruling = _rule(conn, job, _outage(conn, job, late.first, now))


def _advance(conn: psycopg.Connection[Any], job: JobDef, late: LateRange, following: datetime | None) -> None:
    """Where the range's next pass starts (None: it is done). A range that needs another pass
    gets its row (runner.misfire_ranges) with its ruling; a stored one is moved on, or closed."""
    if late.key is None:
        return
    if late.stored:
        conn.execute(Q["advance_range"], {"job_name": job.name, "key": late.key, "next": following})
    elif following is not None:
        ruling = late.ruling
        conn.execute(Q["open_range"], {
            "job_name": job.name, "first": late.key, "last": late.last, "next": following,
            "tier": ruling.tier.name if ruling else None, "action": ruling.action if ruling else None,
            "lateness": ruling.lateness if ruling else None})
        late.stored = True


def open_ranges(conn: psycopg.Connection[Any], jobs: Sequence[JobDef]) -> list[tuple[str, LateRange]]:
    """The open late ranges of these jobs in the ledger (runner.misfire_ranges), each as the
    range to resume: from where its next pass starts, with its ruling (a tier no longer in the
    job's tiers: ruled again). A starting runner hands them to the duty before its downtime."""
    by_name = {j.name: j for j in jobs}
    out = []
    for name, first, last, following, tier, action, lateness in conn.execute(
            Q["open_ranges"], {"job_names": sorted(by_name)}).fetchall():
        job = by_name[name]
        late = LateRange(following if following is not None else first, last, key=first, stored=True)
        if tier is not None and job.misfire_tiers is not None:
            late.ruling = restore_ruling(conn, job, tier, action, lateness)
        out.append((name, late))
    return out


def restore_ruling(conn: psycopg.Connection[Any], job: JobDef, tier: str, action: str,
                   lateness: timedelta) -> Ruling | None:
    """The ruling a range was given (its tier's name and action, its lateness), as
    ``_rule`` made it; None when the job's tiers no longer have that tier."""
    if job.misfire_tiers is None:
        return None
    named = job.misfire_tiers.named(tier)
    if named is None or named[0].action != action:
        return None
    return _rule(conn, job, lateness, named)


def _rule(conn: psycopg.Connection[Any], job: JobDef, lateness: timedelta,
          named: tuple[Tier, str] | None = None) -> Ruling:
    """The tier of a range this late (``named``: the tier it was given, restored). With
    ``side_effects=True`` and a tier that runs slots, the job's runs that left effects of
    unknown delivery are read once (fixed with the ruling): the late slots they concern are
    held for approval, slot by slot (``_hold_unsettled``); every other slot follows the tier."""
    assert job.misfire_tiers is not None
    tier, covers = named or job.misfire_tiers.pick(lateness)
    label = f"misfire tier {covers}, missed for {_human(lateness)}"
    unsettled: tuple[Unsettled, ...] = ()
    if job.misfire_tiers.side_effects and tier.action in RUNS:
        unsettled = tuple(Unsettled(*row) for row in conn.execute(
            Q["unresolved_effects"], {"job_name": job.name, "limit": UNSETTLED_LIMIT}).fetchall())
        label += "; side effects checked (no effect of unknown delivery left by this slot's attempts)"
    return Ruling(tier, tier.action, lateness, label, tier.alert, unsettled)


def _keys(job: JobDef, rows: Sequence[_Row]) -> list[str]:
    return [idempotency_key(job.name, r.window_start, r.window_end, r.partition, job.version) for r in rows]


def _hold_unsettled(conn: psycopg.Connection[Any], job: JobDef, rows: list[_Row], ruling: Ruling,
                    now: datetime, result: Decisions) -> list[_Row]:
    """Rows of the late slots whose own earlier attempts left effects of unknown delivery
    (``Ruling.held_for``), recorded ``awaiting_approval`` (action approve, alerted, the effect
    named in the reason); returns the others, which follow the tier."""
    by_slot: dict[datetime, list[_Row]] = {}
    for r in rows:
        by_slot.setdefault(r.slot, []).append(r)
    kept: list[_Row] = []
    for slot, mine in by_slot.items():
        held = ruling.held_for(slot, _keys(job, mine))
        if held is None:
            kept.extend(mine)
            continue
        holding = ruling.holding(*held)
        late = _human(now - slot)
        _record(conn, job, [_Row(r.slot, r.partition, r.window_start, r.window_end, "awaiting_approval",
                                 f"{holding.label}: late by {late}; held for approval") for r in mine],
                now, result, None, holding)
    return kept


def _expected(conn: psycopg.Connection[Any], job: JobDef, first: datetime, last: datetime,
              now: datetime) -> list[datetime]:
    """The job's expected slots in [first, last], oldest first: runner.expected_slots_v1
    (tracked, not retired, not paused, due), the one definition; never re-derived here."""
    # in UTC, as runner/model/schedule.py gives slots (the session's zone is the caller's: a window
    # callable must see the same datetime either way)
    return [r[0].astimezone(UTC) for r in conn.execute(Q["expected_slots"], {
        "job_name": job.name, "first": first, "last": last, "now": now}).fetchall()]


def _outage(conn: psycopg.Connection[Any], job: JobDef, since: datetime, now: datetime) -> timedelta:
    """How long the job has been missing since ``since``: the expected time (not paused, not
    retired, tracked: runner.expected_spans_v1) between it and now. A tier's lateness."""
    row = conn.execute(Q["outage"], {"job_name": job.name, "since": since, "now": now}).fetchone()
    assert row is not None
    value: timedelta = row[0]
    return value


def _coalesce_target(conn: psycopg.Connection[Any], job: JobDef, late: LateRange,
                     now: datetime) -> datetime | None:
    """The newest expected slot of the range that is not held for its own effects: the
    coalescing run goes there (a held slot cannot cover the others). None: every slot is held."""
    assert late.ruling is not None and late.first is not None
    for slot in reversed(_expected(conn, job, late.first, late.last, now)):
        plan = plan_slot(conn, job, slot)
        if plan.error is None and plan.window_start is not None and plan.window_end is not None:
            keys = [idempotency_key(job.name, plan.window_start, plan.window_end, p, job.version)
                    for p in plan.partitions]
            if late.ruling.held_for(slot, keys) is None:
                return slot
    return None


def _replay_set(job: JobDef, expected: Sequence[datetime], now: datetime) -> set[datetime]:
    """The slots a replay runs: the newest ``max_catch_up`` expected slots of the range younger
    than ``max_catch_up_age``; the others are held for approval."""
    chosen: set[datetime] = set()
    for slot in reversed(expected):
        if len(chosen) >= job.max_catch_up:
            break
        if job.max_catch_up_age is not None and now - slot > job.max_catch_up_age:
            break
        chosen.add(slot)
    return chosen


def _decide(conn: psycopg.Connection[Any], job: JobDef, slot: datetime, newest: datetime,
            replayed: set[datetime], now: datetime, policy: str, label: str) -> list[_Row]:
    plan = plan_slot(conn, job, slot)
    if plan.error is not None or plan.window_start is None or plan.window_end is None:
        return []  # recorded as fanout_failed: the gap scan shows it
    start, end = plan.window_start, plan.window_end
    late = _human(now - slot)
    status: str
    into = None
    if policy == "skip":
        status, reason = "skipped", f"{label}: not started within grace {job.grace}, late by {late}"
    elif policy == "manual":
        status, reason = "awaiting_approval", f"{label}: late by {late}; held for approval"
    elif policy == "coalesce":
        if slot == newest:
            status, reason = "pending", f"{label}: late by {late}; covers the late slots before it"
        else:
            status, into = "coalesced", newest
            reason = f"{label}: late by {late}; covered by the run of slot {newest.isoformat()}"
    elif policy == "catch_up":
        status, reason = "pending", f"{label}: late by {late}; caught up"
    elif policy == "backfill":
        status, reason = "pending", f"{label}: late by {late}; in the tier's backfill plan"
    elif slot in replayed:
        status, reason = "pending", f"{label}: late by {late}; replayed"
    else:
        status = "awaiting_approval"
        beyond = (f"older than max_catch_up_age {job.max_catch_up_age}"
                  if job.max_catch_up_age is not None and now - slot > job.max_catch_up_age
                  else f"beyond max_catch_up={job.max_catch_up}")
        reason = f"{label}: late by {late}, {beyond}; held for approval"
    return [_Row(slot, p, start, end, status, reason, into) for p in plan.partitions]


def _without_runs(conn: psycopg.Connection[Any], job: JobDef, rows: list[_Row]) -> list[_Row]:
    """The rows whose slot × partition has no run yet (one statement)."""
    if not rows:
        return rows
    have = set(conn.execute(Q["runs_at"], {
        "job_name": job.name, "slots": [r.slot for r in rows],
        "partition_keys": [r.partition for r in rows]}).fetchall())
    return [r for r in rows if (r.slot, r.partition) not in have]


def _coalesce(conn: psycopg.Connection[Any], job: JobDef, rows: list[_Row], newest: datetime,
              now: datetime, result: Decisions, label: str = "misfire=coalesce",
              ruling: Ruling | None = None) -> list[_Row]:
    """Write the coalescing runs (at ``newest``) that this batch's coalesced rows need, each
    before any row points at it, with its window widened to the oldest late window of its
    partition; rows with no run to cover them run on their own instead."""
    coalesced = [r for r in rows if r.status == "coalesced"]
    if not coalesced:
        return rows
    oldest: dict[str, datetime] = {}
    for r in coalesced:
        oldest[r.partition] = min(oldest.get(r.partition, r.window_start), r.window_start)
    plan = plan_slot(conn, job, newest)
    targets: list[_Row] = []
    if plan.error is None and plan.window_start is not None and plan.window_end is not None:
        late = _human(now - newest)
        targets = [_Row(newest, p, oldest[p], plan.window_end, "pending",
                        f"{label}: late by {late}; covers the late slots before it")
                   for p in plan.partitions if p in oldest]
        _record(conn, job, targets, now, result, None, ruling)
    covering = dict(conn.execute(Q["coalesce_targets"], {
        "job_name": job.name, "slot": newest, "partition_keys": sorted(oldest)}).fetchall())
    out: list[_Row] = []
    for r in rows:
        if r.status != "coalesced":
            if not (r.slot == newest and r.partition in covering):
                out.append(r)
        elif r.partition in covering and covering[r.partition] <= r.window_start:
            out.append(r)
        else:
            out.append(_Row(r.slot, r.partition, r.window_start, r.window_end, "pending",
                            f"{label}: no run of the newest late slot covers this "
                            "partition's window; runs on its own"))
    return out


def _replay_plan(conn: psycopg.Connection[Any], job: JobDef, replays: list[_Row]) -> Any:
    """A plan for the replayed runs of a job with ``verify``; returns its replay group id."""
    slots = sorted({r.slot for r in replays})
    row = conn.execute(Q["record_replay_plan"], {
        "job_name": job.name, "range_from": slots[0], "range_to": slots[-1] + EPSILON,
        "expected_runs": len(replays),
        "reason": f"verify the {len(slots)} slot(s) replayed after a misfire", "now": None,
    }).fetchone()
    assert row is not None
    return row[0]


def _columns(job: JobDef, rows: list[_Row]) -> dict[str, Any]:
    return {
        "slots": [r.slot for r in rows],
        "partition_keys": [r.partition for r in rows],
        "business_dates": [job.schedule.business_date(r.window_start) for r in rows],
        "window_starts": [r.window_start for r in rows],
        "window_ends": [r.window_end for r in rows],
        "idempotency_keys": [idempotency_key(job.name, r.window_start, r.window_end, r.partition,
                                             job.version) for r in rows],
    }


def _record(conn: psycopg.Connection[Any], job: JobDef, rows: list[_Row], now: datetime,
            result: Decisions, replay_group: Any = None, ruling: Ruling | None = None) -> None:
    if not rows:
        return
    params = {
        "now": None,
        "replay_group_id": replay_group,
        "job_names": [job.name] * len(rows),
        **_columns(job, rows),
        "statuses": [r.status for r in rows],
        "reasons": [r.reason for r in rows],
        "coalesced_into": [r.coalesced_into for r in rows],
        # the tier that decided them (runner.misfire_decisions); None: a single policy
        "tier": ruling.tier.name if ruling else None,
        "tier_action": ruling.action if ruling else None,
        "lateness": ruling.lateness if ruling else None,
        "tier_alert": ruling.alert if ruling else False,
    }
    for status, count in conn.execute(Q["record_decisions"], params).fetchall():
        result.counts[status] = result.counts.get(status, 0) + count


def _tier_plan(conn: psycopg.Connection[Any], job: JobDef, rows: list[_Row], ruling: Ruling | None,
               now: datetime, result: Decisions, prometheus_url: str | None = None) -> None:
    """The plan of a backfill tier over ``rows`` (slot x partitions with no run), through
    runner.tier_backfill_v1: audited like ``runner backfill``, its options from the job's
    stored tier, one plan however many processes decide (it takes the job's row lock too
    and refuses rows that have a run).

    A tier with ``pause_when`` has its condition evaluated before the plan is made (as the
    condition role, on a short connection of its own: conditions.evaluate_apart, as ``runner
    backfill`` does), and a condition true, or failing, then makes the plan *paused* in the
    same transaction, with the cause recorded as every pause records it (pause_reason,
    pause_cause ``condition`` or ``condition_error``, pauses): no process ever sees it running
    and starts a run the condition would have stopped."""
    if not rows:
        return
    assert ruling is not None
    pause = None
    if ruling.tier.pause_when is not None:
        evaluated = conditions.evaluate_apart(conn, ruling.tier.pause_when, prometheus_url)
        if evaluated.error is not None:
            pause = f"pause_when failed when the plan was created: {evaluated.error}"
        elif evaluated.value:
            pause = "pause_when returned true when the plan was created"
    slots = sorted({r.slot for r in rows})
    row = conn.execute(Q["tier_backfill"], {
        "job_name": job.name, "tier": ruling.tier.name, "lateness": ruling.lateness,
        **_columns(job, rows),
        "reason": f"{ruling.label}: {len(slots)} slot(s) from {slots[0].isoformat()} to "
                  f"{slots[-1].isoformat()}",
        "now": None}).fetchone()
    assert row is not None
    if pause is not None:
        conn.execute(BQ["pause_checked"], {"plan_id": row[0], "now": None})
        conn.execute(BQ["pause_plan"], {"plan_id": row[0], "reason": pause[:1000], "now": None})
    result.counts["backfill"] = result.counts.get("backfill", 0) + row[2]
    log.warning("job %r: missed for %s; misfire tier %r created backfill %s (%s run(s), lane %s%s)",
                job.name, _human(ruling.lateness), ruling.tier.name, row[0], row[2], ruling.tier.lane,
                f", paused: {pause}" if pause else "")


def _human(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{delta.total_seconds():.1f}s"
    if seconds < 7200:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
