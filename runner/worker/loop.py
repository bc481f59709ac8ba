"""One runner process: its parts, composed, and the loop that runs their duties.

One ``Worker`` per ``runner start`` process (or ``app.running()``). It owns no state of its
own beyond the stop and wake events: each part owns its state, in runner/worker/:

* ``session.LockSession``: the *lock connection* (the loop thread's; every run this process
  wins is locked by ``pg_try_advisory_lock`` in the claim statement itself, on the session
  that holds it for the run's whole attempt), its reconnection, and the database clock;
* ``claims.ClaimPath``: due slots -> claims -> one claim statement -> the runs won, started;
  shares of slots among the runners serving a job, and stealing the rest;
* ``budget.Capacity`` and ``budget.InFlight``: the lanes served (runner/worker/lanes.py), each
  lane's cap, and the runs in flight per lane, counted by the loop thread and the completer
  behind one lock;
* ``executor.Executor``: each lane's handler threads and ``ctx.db`` pool, its event loop for
  ``async def`` handlers (runner/aio.py), the control pool, timeouts; ``attempts.Attempts``:
  the attempts running here and the advisory-lock holds they own;
* ``completer.Completer``: one thread with its own connection, recording finished attempts
  in batches and releasing their locks;
* one module per maintenance duty, each with one shape (runner/worker/duties.py ``Maintenance``: a
  config checked when made, ``run_once()``): ``misfires`` (late slots, decided by their
  job's policy), ``takeover`` (runs whose owner is gone), ``retries`` (due retries and queued
  runs), ``backfill_lane`` (backfill plans), ``beats`` (heartbeats).

Beside the loop, each on a thread and connection of its own (runner/worker/duties.py
``on_own_connection``): the gap scan's watermarks (runner/worker/gapscan.py), the backfill pause
conditions (runner/worker/conditions.py: untrusted SQL, never on the lock connection), hung
owners' sessions ended (runner/worker/orphans.py ``end_hung``: a read of the whole lock table,
never holding up a claim) and retention (runner/actions/retention.py). So a process holds at
most ``S + max(2, workers // 4) + 6``
connections, S the sum of its lanes' slots, however many runs it executes.

Each tick runs the duties (runner/worker/duties.py) in a fixed order written down in
``Worker._make_duties``: timeouts, fan-out, steal, claims, misfire, then every poll interval
requeue_waiting, shares, takeover and retries, then backfill plans, beats and the clock. The
order is also the lanes' priority (realtime > correction > manual > bulk): live slots first,
then queued runs lane by lane, each within its own handler slots here and its fleet budget,
then plans; only the jobs of served lanes are fanned out. Each duty has its own cadence and
error boundary: one that raises is logged, counted (``runner_duty_failures_total{duty}``) and
retried with backoff while the others go on; only a lost lock session goes up to the loop,
which reconnects. A job an operator retired starts nothing after its retirement instant: the
claim statements skip its later slots, retries and reruns (read at every claim, so a live
runner stops within a poll interval).

The loop sleeps until the next slot of any job, the nearest handler deadline or duty, or the
poll interval, whichever is sooner, and wakes at once when a handler finishes while work is
waiting.

Shutdown (SIGTERM/SIGINT): stop claiming, tell running handlers (``ctx.stopping``: a handler
that checkpoints stops at its next checkpoint and its run is *handed off*, recorded at once
for another runner to resume, runner/worker/checkpoints.py), wait up to ``grace`` seconds for running
handlers, then *release* the runs still running: each goes back to ``pending`` (trigger ``recovery``,
the attempt not counted against ``max_attempts``) and its lock is dropped, so another process
starts it at once.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from datetime import datetime
from uuid import uuid4

import psycopg

from runner import __version__
from runner.actions import copies, retention
from runner.events import event
from runner.model.jobs import JobDef, JobSource
from runner.store import ledger, pooler
from runner.store.ledger import ClaimedRun, Owner
from runner.worker import conditions, gapscan, history, orphans
from runner.worker.attempts import Attempts
from runner.worker.backfill_lane import LANE_YIELD as LANE_YIELD
from runner.worker.backfill_lane import BackfillLane
from runner.worker.beats import Beats, InstanceBeat
from runner.worker.budget import Capacity
from runner.worker.claims import PREPARE_AHEAD as PREPARE_AHEAD
from runner.worker.claims import ClaimPath
from runner.worker.completer import Completer
from runner.worker.config import LoopConfig as LoopConfig
from runner.worker.config import connect as connect
from runner.worker.config import first_line
from runner.worker.duties import Duties, Duty, Maintenance, on_own_connection
from runner.worker.executor import LOCK_BUSY as LOCK_BUSY
from runner.worker.executor import LOCK_BUSY_DELAY as LOCK_BUSY_DELAY
from runner.worker.executor import LOCK_BUSY_RELEASES as LOCK_BUSY_RELEASES
from runner.worker.executor import Executor
from runner.worker.metrics import Metrics
from runner.worker.misfires import Misfires
from runner.worker.retries import DueRuns
from runner.worker.session import LockSession
from runner.worker.takeover import Takeover

log = logging.getLogger("runner.loop")

CLOCK_EVERY = 60.0  # seconds between measures of the database clock's offset


# The garbage collector's thresholds of a `runner start` process (``own_process_gc``).
GC_THRESHOLDS = (50_000, 20, 10)


def own_process_gc() -> None:
    """Tune the cyclic garbage collector of a process that is only a runner (`runner start`,
    after ``Worker.start``; never a runner inside an application, whose collector is the
    application's). Issue 32's profile of a 10,000-run instant (py-spy, scripts/bench/wide_profile.py)
    found a third of the loop thread's samples in the collector: every 700 new containers
    (claims, runs, their dicts) a young collection, and the full ones traversing every object
    the imports and the start made. Those are frozen (never traversed again: they live as long
    as the process), and a young collection waits for 50,000 new containers."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class Worker:
    """One runner process: its parts (module docstring), their duties, and the loop."""

    def __init__(self, app: JobSource, url: str, config: LoopConfig | None = None,
                 namespace: int = 21077, metrics: Metrics | None = None) -> None:
        self.app = app
        self.metrics = metrics or Metrics()
        self.url = url
        self.config = config or LoopConfig()
        self.jobs: dict[str, JobDef] = app.jobs
        self.metrics.declare(self.jobs)  # counters at 0 for every job: rules see the first event
        self.owner = Owner.here(uuid4(), namespace)
        self.stats = {"claimed": 0, "conflicts": 0, "succeeded": 0, "failed": 0, "stale": 0,
                      "recovered": 0, "timed_out": 0, "released": 0, "stolen": 0}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._poll_soon = False  # a catch-up run ended: start the next one without waiting
        config, jobs, owner, stats = self.config, self.jobs, self.owner, self.stats
        self.session = LockSession(url, owner, self._stop, self._wake)
        self.capacity = Capacity(config, jobs)
        self.attempts = Attempts()
        self.completer = Completer(url, config, owner, self.session, self.attempts,
                                   self.capacity.inflight, self.metrics, stats, self._stop, self._wake,
                                   self._recorded)
        self.executor = Executor(url, config, jobs, owner, self.session, self.capacity, self.attempts,
                                 self.completer.put, self.metrics, stats, self._wake)
        start = self.executor.start
        self.misfires = Misfires(config, jobs, self.session, lambda: self.duties["retries"].soon())
        self.claims = ClaimPath(config, owner, self.session, self.capacity, self.misfires, start,
                                self.metrics, stats)
        waiting = self.claims.claims_waiting
        self.takeover = Takeover(config, jobs, owner, self.session, self.capacity, start,
                                 self.metrics, stats)
        self.retries = DueRuns(config, jobs, owner, self.session, self.capacity, start, waiting)
        self.lane = BackfillLane(config, jobs, owner, self.session, self.capacity, start, waiting,
                                 self.claims.slot_within)
        self.beats = Beats(jobs, owner, self.session, self.attempts)
        self.instance_beat = InstanceBeat(config, owner, self.session)
        # a ledger copied from another database or cluster: the source's work held until an
        # operator adopts it (runner/actions/copies.py)
        self.copy = copies.Hold(self.session.conn, self._adopted)
        self.duties = self._make_duties()

    @property
    def live(self) -> dict[str, JobDef]:
        """The jobs whose live slots this process claims (their lane is served here)."""
        return self.capacity.live

    # -- life cycle -------------------------------------------------------------------

    def start(self) -> None:
        """Connect, register this process, sync job definitions, and set up the schedule."""
        conn = self.session.open()
        try:
            self.capacity.resolve(conn)
        except BaseException:
            self.session.abandon()
            raise
        self.copy.check()  # a copy: say it now; the duties of copies.HELD_DUTIES wait for adoption
        # the schedule history is appended only if no live runner runs the definition it
        # holds (runner/worker/history.py); each job's definition is recorded with this instance
        definitions: dict[str, ledger.Definition] = {}
        tracked = ledger.sync_jobs(conn, list(self.jobs.values()),
                                   retention_default=self.config.retention_default,
                                   instance=self.owner.instance, definitions=definitions,
                                   fresh_for=3 * self.config.instance_heartbeat)
        history.report(definitions)
        # registered as serving only the jobs whose live slots it claims: a slot's shares are
        # split among the processes that claim it
        ledger.register_instance(conn, self.owner, __version__, list(self.live), definitions,
                                 dict(self.capacity.served.slots))
        self.claims.refresh_shares()
        self.session.measure_offset()
        self.executor.open(self.capacity.served.lanes)
        self.completer.start()
        # beside the loop, each on a thread and connection of its own (runner/worker/duties.py)
        url, stop, failed = self.url, self._stop, self._duty_failed
        advancer = gapscan.Advancer(stop, target=self.config.watermark_target,
                                    max_budget=self.config.watermark_max_probes)
        on_own_connection("gapscan", lambda: connect(url), advancer, stop,
                          self.config.watermark_interval, on_failure=failed)
        # hung owners' sessions ended (and squatters reported): a read of the server's whole
        # lock table, never on the lock session (runner/worker/orphans.py), bounded
        on_own_connection("hung_owners", lambda: orphans.connect_bounded(connect(url)),
                          lambda conn: self.copy.guard(lambda: self.takeover.end_hung(conn))(),
                          stop, self.config.poll_interval, on_failure=failed)
        on_own_connection("retention", lambda: connect(url),
                          retention.pass_of(self.owner.namespace, self.config.prune_batch),
                          stop, self.config.prune_interval, on_failure=failed)
        # backfill pause conditions: untrusted SQL, never on the lock session
        on_own_connection("conditions", lambda: conditions.connect(url),
                          conditions.pass_of(self.owner.namespace, list(self.jobs),
                                             self.config.prometheus_url, self.config.condition_url),
                          stop, conditions.POLL, first_now=True, on_failure=failed)
        # late ranges a runner left open (stopped or killed midway): resumed first, each with
        # the ruling it was given (runner.misfire_ranges)
        self.misfires.resume(conn, list(self.live.values()))
        self.claims.begin(tracked, ledger.schedules_since(conn, list(self.jobs)),
                          ledger.owed_since(conn, list(self.jobs)), self.now())
        served = self.capacity.served
        event(log, "runner_started", pid=self.owner.pid, jobs=len(self.jobs),
              workers=self.config.workers, instance=str(self.owner.instance),
              lanes=",".join(f"{lane}={n}" for lane, n in served.slots.items())
              + ("" if not served.every else " (every lane)"))

    def run(self) -> None:
        """Run until ``stop()``; then shut down (see module docstring)."""
        if not self.session.opened:
            self.start()
        try:
            while not self._stop.is_set():
                try:
                    delay = self.tick()
                except psycopg.OperationalError as exc:
                    if self.session.alive():
                        log.exception("database error in the loop (the session is alive); "
                                      "continuing in 1 s")
                        self._wake.wait(1.0)
                        continue
                    log.warning("database connection lost (%s); reconnecting", first_line(exc))
                    try:
                        self.session.reconnect(self.attempts)
                    except pooler.PoolerRefused as refused:
                        # the URL now leads to a transaction pool (runner/store/pooler.py): no lock
                        # would hold there; the process stops (runs released, as at shutdown)
                        log.error("%s; stopping", refused)
                        raise
                    continue
                except Exception:
                    log.exception("unexpected error in the loop; continuing in 1 s")
                    delay = 1.0
                if delay > 0:
                    self._wake.wait(delay)
                    self._wake.clear()
        finally:
            self.shutdown()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def shutdown(self) -> None:
        """Stop claiming; give running handlers ``grace`` seconds; release what still runs;
        record outcomes; release locks; deregister."""
        self._stop.set()
        deadline = time.monotonic() + self.config.grace
        self.executor.hand_off_all()  # checkpointing handlers stop at their next checkpoint
        while self.attempts and time.monotonic() < deadline:
            self._wake.wait(min(0.05, max(deadline - time.monotonic(), 0.0)))
            self._wake.clear()
            self.executor.enforce_timeouts()
            self.beats.while_stopping(self.duties["beats"])
        self.executor.release_all()
        self.executor.stop_handlers()
        self.completer.finish()
        self.session.close()
        self.executor.close_pools()
        event(log, "runner_stopped", pid=self.owner.pid, **self.stats)

    # -- the tick ---------------------------------------------------------------------

    def now(self) -> datetime:
        """The database clock, estimated locally."""
        return self.session.now()

    def _make_duties(self) -> Duties:
        """The tick's duties, in the order they see the ledger (runner/worker/duties.py: each has its
        own cadence and error boundary; a failing duty is retried, the others go on):

        1. ``timeouts``: give up handlers past their timeout, so their capacity is known;
        2. ``fan_out``: due slots become claims (slots past grace become late ranges);
        3. ``steal``: other runners' shares of a slot whose time is up;
        4. ``claims``: on-time claims, before anything else touches the ledger this tick;
        5. ``misfire``: late ranges decided after this tick's claims (a range is fixed when it
           is handed over, so on-time claims cannot hide late slots);
        6. every poll interval: ``requeue_waiting`` (overlap=wait rows back in line),
           ``shares`` (who serves which share), ``takeover`` (dead and hung owners of the
           served lanes) before ``retries`` (due retries and queued runs: catch-up and reruns
           in correction, approvals in manual, lane by lane under each lane's per-process
           slots and fleet budget), so recovery takes capacity first;
        7. ``lane``: backfill plans (bulk, or the plan's lane), last (runner/worker/backfill_lane.py).
        Lanes (runner/worker/lanes.py): each served lane has its own handler slots, so these duties
        order the claims (realtime > correction > manual > bulk) without one lane taking
        another's threads; while live claims wait here, no other lane claims anything;
        While the ledger is a copy not yet adopted (runner/actions/copies.py), the misfire, takeover,
        retries and lane duties do nothing: the source's work waits for an operator;
        8. ``beats``, ``instance_beat``, ``copy`` (while held, the ledger's identity read again
           every few seconds), ``history`` (every instance heartbeat), ``clock``:
           liveness, this runner's schedule definitions re-asserted in the history
           (runner/worker/history.py), the database clock's offset;
        9. ``prepare``: while idle, the claims of slots due within PREPARE_AHEAD.
        """
        poll = self.config.poll_interval
        claims = self.claims

        def held(service: Maintenance) -> Duty:
            # nothing while the ledger is an unadopted copy (runner/actions/copies.py)
            assert service.name in copies.HELD_DUTIES, service.name
            return Duty(service.name, self.copy.guard(service.run_once), service.every)

        return Duties([
            Duty("timeouts", self.executor.enforce_timeouts),
            Duty("fan_out", claims.fan_out),
            Duty("steal", claims.steal),
            Duty("claims", claims.claim_free),
            held(self.misfires),
            Duty("requeue_waiting", claims.requeue_waiting, every=poll),
            Duty("shares", claims.refresh_shares, every=poll),
            held(self.takeover),
            held(self.retries),
            held(self.lane),
            Duty.of(self.beats),
            Duty.of(self.instance_beat),
            Duty.of(self.copy),
            # this runner's schedule definitions back in the history once no live runner runs
            # the one it holds (runner/worker/history.py)
            Duty("history", self._reassert_history, every=self.config.instance_heartbeat),
            Duty("clock", self.session.measure_offset, every=CLOCK_EVERY),
            Duty("prepare", claims.prepare),
        ], self.session.alive, on_failure=self._duty_failed, retry_after=poll)

    def _reassert_history(self) -> None:
        history.run_once(self.session.conn(), self.owner, self.jobs, 3 * self.config.instance_heartbeat)

    def _adopted(self) -> None:
        """The copy was adopted (runner db adopt): the held duties go on at the next tick."""
        for name in copies.HELD_DUTIES:
            self.duties[name].soon()
        self._wake.set()

    def _duty_failed(self, name: str) -> None:
        self.metrics.of(self.metrics.duty_failures, name).inc()

    def _recorded(self, runs: list[ClaimedRun]) -> None:
        """The completer recorded these runs (on its thread): a backfill run among them makes
        the lane due; a catch-up run, the retries duty (replays run back to back, not one per
        poll interval)."""
        self.lane.ended(runs)
        if any(run.trigger == "catch_up" for run in runs):
            self._poll_soon = True

    def tick(self) -> float:
        """One pass over the duties that are due (``_make_duties``: their order and why).
        Returns how long the loop may sleep."""
        if self._poll_soon:  # a catch-up run ended, or misfire decisions queued runs
            self._poll_soon = False
            self.duties["retries"].soon()
        self.duties.run_due()
        return self._sleep_for(self.now())

    def _sleep_for(self, now: datetime) -> float:
        if self.claims.ready():
            return 0.0
        mono = time.monotonic()
        nearest = self.duties.next_due()
        delay = max((nearest if nearest is not None else mono + 1.0) - mono, 0.0)
        deadline = self.attempts.nearest_deadline()
        if deadline is not None:
            delay = min(delay, max(deadline - time.monotonic(), 0.0))
        wake = self.claims.next_wake(now)
        if wake is not None:
            delay = min(delay, wake)
        return max(delay, 0.0005)
