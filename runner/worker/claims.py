"""The claim path of one process: due slots -> their claims -> one claim statement -> the runs
won, started.

``fan_out`` turns each served job's due slot into claims (runner/worker/fanout.py: one per
partition), ``claim`` sends up to ``claim_batch`` of them in one statement on the lock
session, whose ``pg_try_advisory_lock`` locks every run won, and hands the runs to the
executor. While idle, ``prepare`` builds the claims of slots due within PREPARE_AHEAD. Past
``backlog_cap`` queued claims, later slots wait unexpanded (memory stays flat). Slots past
their job's grace are never claimed as if on time: they go to the misfire duty
(runner/worker/misfires.py). The claim statement refuses slots the database does not yet
consider due; those go back in line and the clock is pulled back (runner/worker/session.py).

Shares: when several runners serve a job, each slot's rows are shared out among them (the
live runners serving the job, from runner.instances, ordered by instance id; a row's share
is its idempotency key's first 32 bits modulo their number). A runner claims its own share
at once and sets the others' shares aside; ``steal_after`` seconds later (0.5 s), once its
own claims of that slot are sent, it looks whether every partition of that slot has a run,
and if not, claims the rest itself, from the end of the others' shares toward where they
are working. So runners serving the same jobs do not queue behind each other's inserts at
the instant a slot falls due (an insert that meets another session's uncommitted row waits
for that session's commit). A runner killed outright drops out of the shares at the others'
next poll (its lock session is gone from pg_stat_activity); one that hangs or is overloaded
delays its share by ``steal_after`` at least (or until the others' own claims of the slot
are sent), until its heartbeat ages out (``3 x instance_heartbeat`` = 15 s). A share is an
order of claims, never an exclusion: every row is still claimed by one INSERT ... ON CONFLICT
DO NOTHING, and whoever inserts first owns the run.

Stolen rows wait in a queue of their own, claimed after this runner's own claims of the same
slot (an older slot's first, whoever's), STEAL_FIRST at a time first (doubled after each
batch that met no run of the other runner). At a wide slot the other runner is not hung,
only still at work on its share (10,000 runs take longer than ``steal_after``): a batch of
stolen rows that meets runs the other runner made (conflicts) says so, and the rest of those
slots' stolen rows go back aside for another ``steal_after``, then are looked at again by
key. Before, every row still unclaimed at the first look was claimed: two runners splitting
10,000 runs claimed about 3,000 rows the other already had, and waited on the other's
uncommitted inserts and finishes (``Lock:transactionid``) for a third of their claims' time.

Everything here runs on the loop thread; only ``claims_waiting`` and the sleep hints are
read by the other parts, on that thread too.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from runner.errors import error_text
from runner.events import event
from runner.model.jobs import JobDef
from runner.model.schedule import idempotency_keys
from runner.store import ledger
from runner.store.ledger import ClaimedRun, Owner, SlotClaim
from runner.worker import misfire
from runner.worker.budget import Capacity
from runner.worker.config import LoopConfig
from runner.worker.fanout import plan_slot
from runner.worker.metrics import Metrics
from runner.worker.misfires import Misfires
from runner.worker.session import LockSession

log = logging.getLogger("runner.loop")

PREPARE_AHEAD = timedelta(seconds=1)  # claims of a slot are built this long before it is due
STEAL_FIRST = 100  # stolen rows claimed at once first; doubled after each batch without a conflict


@dataclass
class Deferred:
    """Other runners' share of one slot of a job, set aside until ``release`` (monotonic)."""

    release: float
    job_name: str
    slot: datetime
    claims: list[SlotClaim]


class ClaimPath:
    """Fan-out, shares and claims of one process's live slots (module docstring)."""

    def __init__(self, config: LoopConfig, owner: Owner, session: LockSession, capacity: Capacity,
                 misfires: Misfires, start: Callable[[list[ClaimedRun]], None], metrics: Metrics,
                 stats: dict[str, int]) -> None:
        if config.claim_batch < 1:
            raise ValueError("claim_batch must be >= 1")
        self.config = config
        self.owner = owner
        self.session = session
        self.capacity = capacity
        self.misfires = misfires
        self._start = start
        self.metrics = metrics
        self.stats = stats
        self._backlog_cap = config.backlog_cap
        self._rng = random.Random()
        self.pending: deque[SlotClaim] = deque()
        self.stolen: deque[SlotClaim] = deque()  # others' rows still unclaimed, claimed after ours
        self._steal_batch = STEAL_FIRST
        self._waiting: list[SlotClaim] = []  # overlap='wait' slots, retried every poll
        self.deferred: deque[Deferred] = deque()  # others' shares, in release order
        self.shares: dict[str, tuple[int, int]] = {}  # job -> (this runner's share, runners)
        self._prepared: dict[str, tuple[datetime, list[SlotClaim]]] = {}  # job -> its next slot's claims
        self.next_slot: dict[str, datetime] = {}

    @property
    def live(self) -> dict[str, JobDef]:
        return self.capacity.live

    def begin(self, tracked: dict[str, datetime], since: dict[str, datetime], owed: dict[str, datetime],
              now: datetime) -> None:
        """At start: each live job's first on-time slot (within the job's tracked range, under
        its current schedule: slots due before a redeploy changed it are the earlier
        schedule's; and in its newest owed span, ``owed``: not a slot of a retirement or pause
        that ended just before, runner.expected_spans_v1); whatever was missed before is the
        misfire duty's, decided from the newest complete slot."""
        for job in self.live.values():
            cutoff = misfire.cutoff_for(job, now)
            first = max(cutoff, tracked[job.name] - misfire.EPSILON,
                        since.get(job.name, tracked[job.name]) - misfire.EPSILON,
                        owed.get(job.name, tracked[job.name]) - misfire.EPSILON)
            self.next_slot[job.name] = job.schedule.next_after(first)
            if cutoff >= tracked[job.name]:
                self.misfires.hand(job.name, None, job.schedule.latest_at_or_before(cutoff))

    def _queued(self) -> int:
        """Claims waiting to be sent: this runner's own and the stolen ones (the backlog cap
        bounds them; the others' shares set aside are bounded by ``steal``)."""
        return len(self.pending) + len(self.stolen)

    def claims_waiting(self) -> bool:
        """Whether live claims wait in this process (other lanes then hold back)."""
        return bool(self.pending or self.stolen)

    def ready(self) -> bool:
        """Whether claims wait and there is room to claim them: the loop does not sleep."""
        return bool(self.pending or self.stolen) and self.capacity.free() > 0

    def next_wake(self, now: datetime) -> float | None:
        """Seconds until the next slot or the next release of others' shares (None: none)."""
        delays = []
        next_slot = min(self.next_slot.values(), default=None)
        if next_slot is not None:
            delays.append(max((next_slot - now).total_seconds(), 0.0))
        if self.deferred:
            delays.append(max(self.deferred[0].release - time.monotonic(), 0.0))
        return min(delays, default=None)

    def slot_within(self, seconds: float) -> bool:
        nearest = min(self.next_slot.values(), default=None)
        return nearest is not None and (nearest - self.session.now()).total_seconds() < seconds

    # -- the duties ---------------------------------------------------------------------------

    def fan_out(self) -> None:
        """The ``fan_out`` duty: due slots become claims (slots past grace become late ranges)."""
        now = self.session.now()
        for name, job in self.live.items():
            slot = self.next_slot[name]
            if slot > now:
                continue
            cutoff = misfire.cutoff_for(job, now)
            if slot <= cutoff:  # this process fell behind (stopped, overloaded): late slots
                last = job.schedule.latest_at_or_before(cutoff)
                self.misfires.hand(name, slot, last)
                slot = job.schedule.next_after(last)
            while slot <= now and self._queued() < self._backlog_cap:
                ready = self._prepared.pop(name, None)
                claims = ready[1] if ready is not None and ready[0] == slot else self._slot_claims(job, slot)
                self._share_out(job, slot, claims)
                slot = job.schedule.next_after(slot)
            # past the backlog cap, the slot waits unexpanded (memory stays flat); if it is
            # still waiting past its grace, the misfire duty decides it
            self.next_slot[name] = slot

    def prepare(self) -> None:
        """The ``prepare`` duty: while idle, build the claims of slots due within
        PREPARE_AHEAD, so that at the slot instant the loop only has to send them (1,000 jobs:
        ~15 ms less between the instant and the claim). Jobs with dynamic partitions are
        fanned out at the instant itself."""
        if self.pending:
            return
        horizon = self.session.now() + PREPARE_AHEAD
        for name, job in self.live.items():
            slot = self.next_slot[name]
            if slot <= horizon and not job.dynamic_partitions:
                ready = self._prepared.get(name)
                if ready is None or ready[0] != slot:
                    self._prepared[name] = (slot, self._slot_claims(job, slot))

    def steal(self) -> None:
        """The ``steal`` duty: other runners' shares of a slot whose time is up, looked at once
        this runner's own claims of that slot are sent (stolen rows are claimed after those
        anyway, and the look, one probe a row, would hold up the claims on the same session:
        50,000 rows at a 100,000-run instant)."""
        if not self.deferred or self.deferred[0].release > time.monotonic():
            return
        if self.pending and self.pending[0].slot <= self.deferred[0].slot \
                and sum(len(d.claims) for d in self.deferred) <= self._backlog_cap:
            return  # own claims of that slot (or an older one) still to send
        # (past the backlog cap the shares set aside are looked at anyway: they move to the
        # stolen queue, which the cap bounds)
        self._release_deferred()

    def claim_free(self) -> None:
        """The ``claims`` duty: on-time claims, within the free room of the live lanes."""
        if (self.pending or self.stolen) and self.capacity.free() > 0:
            self.claim(min(self.capacity.free(), self.config.claim_batch))

    def requeue_waiting(self) -> None:
        """The ``requeue_waiting`` duty: overlap=wait rows back in line; late ones become the
        misfire duty's."""
        if self._waiting:
            waiting, self._waiting = self._waiting, []
            self.pending.extend(self.misfires.hand_claims(waiting))

    def refresh_shares(self) -> None:
        """The ``shares`` duty: which share of each job's slots is this runner's, from the live
        runners serving it."""
        fresh_for = 3 * self.config.instance_heartbeat
        serving: dict[str, list[Any]] = {}
        for instance, jobs in ledger.live_instances(self.session.conn(), self.owner.namespace, fresh_for):
            for name in jobs:
                if name in self.live:
                    serving.setdefault(name, []).append(instance)
        self.shares = {name: (ids.index(self.owner.instance), len(ids)) for name, ids in serving.items()
                       if len(ids) > 1 and self.owner.instance in ids}

    # -- claims -------------------------------------------------------------------------------

    def _share_out(self, job: JobDef, slot: datetime, claims: list[SlotClaim]) -> None:
        """This runner's share of a slot's rows goes to the claim queue; the others' shares
        are set aside for ``steal_after`` seconds (module docstring: Shares)."""
        share = self.shares.get(job.name)
        if share is None or not claims:
            self.pending.extend(claims)
            return
        mine, runners = share
        others = []
        for c in claims:
            if int(c.idempotency_key[:8], 16) % runners == mine:
                self.pending.append(c)
            else:
                others.append(c)
        if others:
            self.deferred.append(Deferred(time.monotonic() + self.config.steal_after, job.name, slot,
                                          others))

    def _release_deferred(self) -> None:
        """Others' shares whose time is up: drop the rows that have a run; claim the rest,
        last rows first (the other runner works from the first)."""
        mono = time.monotonic()
        due: list[Deferred] = []
        while self.deferred and self.deferred[0].release <= mono:
            due.append(self.deferred.popleft())
        rows = [c for d in due for c in d.claims]
        try:
            unclaimed = ledger.unclaimed_rows(self.session.conn(), rows)
        except BaseException:
            self.deferred.extendleft(reversed(due))  # nothing is lost: look again on the next pass
            raise
        # by key, not by count: runners that computed different partition lists (a rolling
        # deploy, a time-varying callable) must not take each other's runs for theirs
        stolen = [rows[i] for i in sorted(unclaimed)]
        self.stolen.extend(reversed(stolen))
        self.stats["stolen"] += len(stolen)
        self._steal_batch = STEAL_FIRST

    def _set_aside_stolen(self, batch: list[SlotClaim]) -> None:
        """A batch of stolen rows met runs the other runner made: it is at work on them. The
        stolen rows left of the same slots go back aside for ``steal_after`` (module
        docstring), to be looked at again by key; nothing is dropped."""
        slots = {(c.job_name, c.slot) for c in batch}
        keep: deque[SlotClaim] = deque()
        aside: dict[tuple[str, datetime], list[SlotClaim]] = {}
        for c in self.stolen:
            if (c.job_name, c.slot) in slots:
                aside.setdefault((c.job_name, c.slot), []).append(c)
            else:
                keep.append(c)
        self.stolen = keep
        release = time.monotonic() + self.config.steal_after
        for (job_name, slot), claims in aside.items():
            # back in the order of the others' shares (the look reverses them again)
            self.deferred.append(Deferred(release, job_name, slot, claims[::-1]))

    def _slot_claims(self, job: JobDef, slot: datetime) -> list[SlotClaim]:
        """The claims of one slot, from its fan-out (runner/worker/fanout.py: user callables behind
        their own error boundary, a dynamic job's partitions recorded before any claim)."""
        plan = plan_slot(self.session.conn(), job, slot, self.config.max_partitions)
        if plan.error is not None or plan.window_start is None or plan.window_end is None \
                or plan.business_date is None:
            return []
        keys = plan.partitions
        if len(keys) > 1:
            # start at a random place so that processes claiming the same fan-out without
            # shares (a runner not yet registered) don't collide on every row
            turn = self._rng.randrange(len(keys))
            keys = keys[turn:] + keys[:turn]
        start, end, business_date = plan.window_start, plan.window_end, plan.business_date
        name, overlap, lane = job.name, job.overlap, job.lane
        return [
            SlotClaim(name, slot, key, business_date, start, end, ikey, overlap, lane)
            for key, ikey in zip(keys, idempotency_keys(name, start, end, keys, job.version), strict=True)
        ]

    def claim(self, limit: int) -> int:
        """Claim up to ``limit`` pending slots in one statement (the oldest slot first, this
        runner's own rows of it before the stolen ones); start the runs won."""
        # the oldest slot first; of one slot, this runner's own rows before the stolen ones
        stolen_first = bool(self.stolen) and (not self.pending or self.stolen[0].slot < self.pending[0].slot)
        source = self.stolen if stolen_first else self.pending
        if source is self.stolen:  # small first: the other runner may be at work on them
            limit = min(limit, self._steal_batch)
        batch = [source.popleft() for _ in range(min(limit, len(source)))]
        batch = self.misfires.hand_claims(batch)  # an overloaded runner never claims late slots
        if not batch:
            return 0
        try:
            db_now, runs, waiting = ledger.claim_slots_waiting(self.session.conn(), self.owner, batch)
        except psycopg.Error as exc:
            if not self.session.alive() or len(batch) == 1:
                if self.session.alive():  # this row cannot be stored (e.g. a key too large)
                    cls, msg = error_text(exc)
                    log.error("job %r: slot %s partition %r cannot be claimed (%s: %s); it stays "
                              "without a run (the gap scan shows it)", batch[0].job_name,
                              batch[0].slot.isoformat(), batch[0].partition_key[:100], cls, msg[:300])
                    return 0
                source.extendleft(reversed(batch))  # nothing is lost: claim them later
                raise
            # the session is alive: one row is at fault; claim them one at a time
            won = 0
            for one in batch:
                source.appendleft(one)
                won += self.claim(1)
            return won
        if waiting:  # overlap='wait': an earlier slot still runs; try again on a later pass
            self._waiting.extend(c for c in batch if (c.job_name, c.slot, c.partition_key) in waiting)
        early = [c for c in batch if c.slot > db_now]
        if early:  # our clock ran ahead of the database's: retry those when they are due
            source.extendleft(reversed(early))
            self.session.ahead((early[0].slot - db_now).total_seconds())
        won = len(runs)
        lost = len(batch) - len(early) - won - len(waiting)
        self.stats["claimed"] += won
        self.stats["conflicts"] += lost
        if lost:
            won_keys = {(r.job_name, r.slot, r.partition_key) for r in runs}
            for c in batch:
                key = (c.job_name, c.slot, c.partition_key)
                if c.slot <= db_now and key not in won_keys and key not in waiting:
                    self.metrics.of(self.metrics.conflicts, c.job_name).inc()
                    event(log, "job_claim_skipped", logging.DEBUG, job=c.job_name, slot=c.slot,
                          partition=c.partition_key, reason="another process claimed it")
            if source is self.stolen:  # the other runner is at work on these slots
                self._set_aside_stolen(batch)
        elif source is self.stolen:
            self._steal_batch = min(2 * self._steal_batch, self.config.claim_batch)
        self.metrics.observe_lags([(r.job_name, max((db_now - r.slot).total_seconds(), 0.0), r.trigger)
                                   for r in runs])
        self._start(runs)
        return won
