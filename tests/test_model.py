"""Model-based tests of the loop: a hypothesis state machine drives real ``runner start``
processes (tests/apps/model_app.py) against a real database through random sequences of time
passing, outages (every runner frozen with SIGSTOP, every runner stopped, or the database
refusing connections), restarts, ``kill -9``, pauses and resumes through the CLI, schedule,
partition and misfire-policy changes (a restart with a rewritten control file), dynamic
partition changes and handler behaviour changes (read live: failures, ``Permanent``, slow
handlers, one-shot crashes that kill the process), and lost lock sessions
(``pg_terminate_backend``); and the operator's actions through the CLI: backfills (with
``--force``, overlapping one another, reaching past now, then paused, resumed or cancelled),
reruns, approvals and skips, pauses, retirement and unretirement of a job removed from the
code and put back, retention (``runner prune`` with an archive table, the job's retention
shortened for that pass) and lane limits; and a rollout of a second code version of a job
(another schedule) runner by runner, the old version maybe restarted midway (each runner has
its own control file: its code version).

After every step the test waits until the runners have settled (a condition on the ledger:
every runner up and registered on a live lock session, no running attempt without its lock
holder), then ``runner check --json`` must report no violation, and the model's own checks
hold: no attempt recorded succeeded whose handler did not return, no handler run twice for
one attempt (fence) or without an attempt row, no new attempt of a paused job, no handler
started before its slot's instant, no effect key sent twice (each run sends one, with a
truthful check, so a second send is the ledger forgetting a confirmed key). At the end of each example it also checks, from the schedule history the model applied,
that every expected slot x partition is accounted for (succeeded, skipped, coalesced, dead,
awaiting_approval or cancelled; or pruned, as the archive table says) or listed in
``runner.missing_slots``, outside the job's retired spans, and that no run of the live schedule
exists for a slot the schedule history does not expect.

Tiers (``RUNNER_MODEL_TIER``): ``ci`` (default: seed ``CI_SEED``, 3 examples of up to 15 steps,
about 80 s) and ``long`` (``RUNNER_MODEL_EXAMPLES`` x ``RUNNER_MODEL_STEPS``, 40 x 30 by
default, seed ``RUNNER_MODEL_SEED`` or a random one that is printed). A failing example
writes its step log and the runners' logs under the test's tmp directory (the assertion
message says where); with ``RUNNER_MODEL_KEEP=1`` its database is kept too.

The CI tier's examples: Hypothesis's first is always its simplest (one runner, the first rule,
``prune``, every step), the other two are drawn from the seed. Seed 82 was chosen because those
two take, between them, 20 of the 23 kinds of step: a rollout, backfills cancelled and paused,
a forced rerun, approve and skip of held runs, retire and unretire, pauses, lane limits,
prune, schedule, partition and misfire changes, a redeploy after a downtime, kill -9 of both
runners, lost lock sessions, every runner frozen past the lease, one-shot crashes, slow and
permanent handlers. Left to the long tier: one runner frozen alone, every runner stopped,
the database refusing connections. (Before: ``derandomize`` and 4 examples, ~140 s, and
in a measured run none of the four took a rollout.) The steps a seed gives depend on Hypothesis's version and on
the rules: after changing either, read the examples' steps.txt and choose the seed again.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg import sql

from tests.conftest import OWN_IDENTITY, url_for
from tests.support import RunnerProcess, eventually, rows, run_cli, scalar

pytestmark = pytest.mark.slow

APP = "tests/apps/model_app.py:app"
JOBS = ("m-static", "m-dynamic", "m-single")
MODES = ("ok", "raise", "permanent", "slow")
EVERY = ("1s", "2s", "3s")
STATIC_PARTITIONS = (["a", "b"], ["a", "b", "c"], ["b"], ["c", "d"])
DYNAMIC_PARTITIONS: tuple[list[str] | str, ...] = (
    ["t1", "t2"], ["t1", "t2", "t3"], ["t3"], ["t2", "t4", "t5"], [], "raise")
MISFIRE = ("coalesce", "skip", "replay", "manual")
RUNNER_ARGS = ("--poll-interval", "0.2", "--grace", "1")
GRACE_SECONDS = 2.0  # the jobs' grace (tests/apps/model_app.py, COMMON): a start's on-time window
SETTLED = ("succeeded", "skipped", "coalesced", "dead", "awaiting_approval", "cancelled")

TIER = os.environ.get("RUNNER_MODEL_TIER", "ci")
CI_SEED = 82  # see the module docstring: which steps its examples take

MODEL_SCHEMA = """
CREATE SCHEMA model;
CREATE TABLE model.executions (
    id bigserial PRIMARY KEY, job_name text NOT NULL, schedule_slot timestamptz NOT NULL,
    partition_key text NOT NULL, fence bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL,
    phase text NOT NULL, mode text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
"""

LOCK_HELD = """
EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
          AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database())
          AND l.classid = ((a.lock_key >> 32) & 4294967295)::oid
          AND l.objid = (a.lock_key & 4294967295)::oid)"""

ORPHANS = f"SELECT a.id FROM runner.attempts a WHERE a.status = 'running' AND NOT {LOCK_HELD}"

REGISTERED = """
SELECT count(*) FROM runner.instances i
WHERE i.pid = %s AND i.stopped_at IS NULL AND i.heartbeat_at > now() - interval '6 seconds'
  AND EXISTS (SELECT 1 FROM pg_stat_activity s WHERE s.pid = i.backend_pid)"""

SUCCESS_WITHOUT_RETURN = """
SELECT r.id, r.job_name, r.schedule_slot, r.partition_key, a.fence, a.trigger
FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id
WHERE a.status = 'succeeded'
  AND NOT EXISTS (SELECT 1 FROM model.executions e
                  WHERE e.job_name = r.job_name AND e.schedule_slot = r.schedule_slot
                    AND e.partition_key = r.partition_key AND e.fence = a.fence
                    AND e.phase = 'returned')"""

EXECUTIONS_WITHOUT_ATTEMPT = """
SELECT e.job_name, e.schedule_slot, e.partition_key, e.fence, count(*) AS began
FROM model.executions e
WHERE e.phase = 'began'
GROUP BY e.job_name, e.schedule_slot, e.partition_key, e.fence
HAVING count(*) > 1
    OR NOT EXISTS (SELECT 1 FROM runner.job_runs r JOIN runner.attempts a ON a.run_id = r.id
                   WHERE r.job_name = e.job_name AND r.schedule_slot = e.schedule_slot
                     AND r.partition_key = e.partition_key AND a.fence = e.fence)"""

BEFORE_SLOT = """
SELECT e.job_name, e.schedule_slot, e.partition_key, e.fence, e.at
FROM model.executions e
WHERE e.phase = 'began' AND e.at < e.schedule_slot"""

# A key sent again, but for the one repeat runner/worker/effects.py does not promise away ("What is
# not"): a stale owner whose `sent` mark landed before a takeover and whose send reached the
# outside world after the next owner's attempt had started (frozen between the two, say); the
# next owner's check, truthful, could not see a send still in flight. Any other repeat (a
# second send after a confirmation, after a send the check saw, or by the same fence) is a
# defect.
SENT_TWICE = """
WITH s AS (
    SELECT e.mode AS effect_key, e.fence, e.at,
           row_number() OVER (PARTITION BY e.mode ORDER BY e.at, e.id) AS nth
    FROM model.executions e
    WHERE e.phase = 'sent'
)
SELECT s.effect_key, count(*) AS repeats
FROM s
WHERE s.nth > 1
  AND NOT EXISTS (SELECT 1 FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id
                  WHERE r.idempotency_key || ':model' = s.effect_key
                    AND a.fence > s.fence AND a.started_at < s.at)
GROUP BY s.effect_key"""

ARCHIVE = "model.pruned"

STARTED_WHILE_PAUSED = """
SELECT r.id, r.job_name, r.schedule_slot, r.partition_key, a.fence, a.trigger, a.started_at
FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id
WHERE r.job_name = %s AND a.trigger <> 'recovery'
  AND a.started_at > %s::timestamptz + interval '1 second'
  AND (%s::timestamptz IS NULL OR a.started_at < %s::timestamptz)"""


def _every_seconds(every: str) -> int:
    assert every.endswith("s")
    return int(every[:-1])


class Runners:
    """The runner processes of one example, and the supervisor that restarts the ones whose
    handler killed them."""

    def __init__(self, url: str, directory: Path, controls: list[Path]) -> None:
        self.url = url
        self.dir = directory
        self.controls = controls  # each runner's control file: its code version (tests/apps/model_app.py)
        self.procs: list[RunnerProcess | None] = [None, None]
        self.starts = itertools.count()
        self.exits: list[tuple[int, int, str]] = []  # (runner, exit code, log) of unexpected exits
        self.crash_exits = 0
        self.frozen = False
        self.args: tuple[str, ...] = RUNNER_ARGS

    def start(self, i: int) -> None:
        assert self.procs[i] is None
        n = next(self.starts)
        self.procs[i] = RunnerProcess(APP, self.url, *self.args, env={"MODEL_CONTROL": str(self.controls[i])},
                                      log=self.dir / f"runner-{i}-{n}.log")

    def live(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p is not None]

    def pid(self, i: int) -> int:
        proc = self.procs[i]
        assert proc is not None
        return proc.proc.pid

    def stop(self, i: int) -> None:
        proc = self.procs[i]
        assert proc is not None
        # a SIGTERM before `runner start` installed its handler (while Python imports, about a
        # second under load) kills it by the signal's default action (-15): stop a runner once
        # it has registered (its handler is installed before its instance row), or exited
        with contextlib.suppress(AssertionError):
            eventually(lambda: proc.proc.poll() is not None
                       or scalar(self.url, "SELECT count(*) FROM runner.instances WHERE pid = %s",
                                 (proc.proc.pid,)) > 0, timeout=30, interval=0.05)
        code = proc.terminate(timeout=60)
        self.procs[i] = None
        self._judge(i, code, proc, expected=(0,))

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        assert proc is not None
        proc.kill()
        self.procs[i] = None

    def signal_all(self, signum: int) -> None:
        for i in self.live():
            proc = self.procs[i]
            assert proc is not None
            if proc.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # (it may end between the two)
                    os.kill(proc.proc.pid, signum)
        self.frozen = signum == signal.SIGSTOP

    def supervise(self) -> None:
        """Restart the runners that exited on their own (a handler's os._exit)."""
        for i in self.live():
            proc = self.procs[i]
            assert proc is not None
            code = proc.proc.poll()
            if code is not None:
                proc.kill()
                self.procs[i] = None
                self._judge(i, code, proc, expected=())
                self.start(i)

    def _judge(self, i: int, code: int, proc: RunnerProcess, expected: tuple[int, ...]) -> None:
        if code == 3:  # a handler's one-shot crash (tests/apps/model_app.py)
            self.crash_exits += 1
        elif code not in expected:
            self.exits.append((i, code, proc.output()[-3000:]))

    def registered(self) -> bool:
        # a runner that a handler's one-shot crash ended meanwhile is started again (long tier
        # seed 1752116937, example 10: the new version's first runner crashed on its first
        # claim during a rollout, and the rollout waited a minute for it to register)
        self.supervise()
        return all(scalar(self.url, REGISTERED, (self.pid(i),)) == 1 for i in self.live())

    def shutdown(self) -> None:
        if self.frozen:
            self.signal_all(signal.SIGCONT)
        for i in self.live():
            proc = self.procs[i]
            assert proc is not None
            proc.kill()
            self.procs[i] = None


class LoopModel(RuleBasedStateMachine):
    """One example: a fresh database, one or two runners, and the model of what was done."""

    template: str = ""  # set by the test: the migrated template database
    pool: Any = None  # set by the test: the clone pool, which makes and drops each example's database
    workdir: Path = Path()
    stats: ClassVar[dict[str, int]] = {}
    counter = itertools.count()

    def __init__(self) -> None:
        super().__init__()
        self.n = next(self.counter)
        self.stats["examples"] = self.stats.get("examples", 0) + 1
        self.dbname = f"runner_model_{os.getpid()}_{self.n}"
        self.pool.create(self.dbname, self.template)
        self.url = url_for(self.dbname)
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(OWN_IDENTITY)  # a clone of the template, not a copy to adopt (conftest)
            conn.execute(MODEL_SCHEMA)
        self.dir = self.workdir / f"example-{self.n}"
        self.dir.mkdir(parents=True)
        self.control_paths = [self.dir / "control-0.json", self.dir / "control-1.json"]
        self.control: dict[str, Any] = {
            "jobs": {
                "m-static": {"every": "1s", "partitions": ["a", "b"], "misfire": "coalesce"},
                "m-dynamic": {"every": "1s", "misfire": "skip"},
                "m-single": {"every": "2s", "overlap": "skip", "misfire": "replay"},
            },
            "dynamic_partitions": ["t1", "t2"],
            "behaviour": {job: {"mode": "ok", "crashes": 0} for job in JOBS},
        }
        self._write_control()
        self.t0 = time.monotonic()
        self.log: list[str] = []
        self.paused: dict[str, datetime] = {}  # job -> when the pause was written
        self.pauses: list[tuple[str, datetime, datetime | None]] = []
        self.retirements: list[tuple[str, datetime, datetime]] = []  # job, retire asked, unretire done
        self.failed = False
        self.runners = Runners(self.url, self.dir, self.control_paths)
        # (job, from, until): spans where two code versions of a job ran at once (a rollout):
        # each ran its own schedule, so runs there need not be of the history's slots
        self.mixed: list[tuple[str, datetime, datetime]] = []
        # rollouts during which a runner crashed: (job, began, ended, old, new) in the form of
        # self.history's entries; there the history may flip back to the old version and forward
        self.crashed_rollouts: list[tuple[str, datetime, datetime, tuple[int, Any], tuple[int, Any]]] = []
        self.history: dict[str, list[tuple[int, list[str] | None]]] = {
            job: [(_every_seconds(cfg["every"]), cfg.get("partitions"))]
            for job, cfg in self.control["jobs"].items()}

    @initialize(count=st.integers(1, 2), overlap=st.sampled_from(["skip", "wait", "allow"]),
                workers=st.sampled_from(["4", "1"]))
    def first_runners(self, count: int, overlap: str, workers: str) -> None:
        """One or two runners; with one handler thread each (and two runs in flight at most),
        a slow handler overloads them (late slots go to the misfire policy)."""
        self.control["jobs"]["m-single"]["overlap"] = overlap
        self._write_control()
        self.runners.args = (*RUNNER_ARGS, "--workers", workers)
        for i in range(count):
            self.runners.start(i)
        self._note(f"start {count} runner(s) of {workers} worker(s); m-single overlap={overlap}")

    # -- bookkeeping ------------------------------------------------------------------

    def _write_control(self, versions: dict[int, dict[str, Any]] | None = None) -> None:
        """Every runner's control file: the same, or with ``versions`` (runner -> its jobs'
        definitions) for a rollout's mixed period; behaviour and dynamic partitions are
        always the same in both (read live)."""
        for i, path in enumerate(self.control_paths):
            data = dict(self.control)
            if versions and i in versions:
                data["jobs"] = versions[i]
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data))
            tmp.replace(path)  # atomic: a handler never reads half a file

    def _note(self, what: str) -> None:
        self.log.append(f"{time.monotonic() - self.t0:7.2f}s {what}")
        self.stats["steps"] = self.stats.get("steps", 0) + 1

    def _db_now(self) -> datetime:
        value = scalar(self.url, "SELECT now()")
        assert isinstance(value, datetime)
        return value

    def _restart_all(self) -> None:
        """A new configuration: every runner stopped, then started (no two versions at once)."""
        live = self.runners.live()
        for i in live:
            self.runners.stop(i)
        for i in live:
            self.runners.start(i)
        self._applied()

    def _applied(self) -> None:
        """The schedules now in force, as the model expects runner.job_schedules to say."""
        for job in JOBS:
            cfg = self.control["jobs"][job]
            seen = (_every_seconds(cfg["every"]), cfg.get("partitions"))
            if self.history[job][-1] != seen:
                self.history[job].append(seen)

    def _fail(self, title: str, detail: str) -> None:
        self.failed = True
        report = self.dir / "FAILURE.txt"
        logs = []
        for path in sorted(self.dir.glob("runner-*.log")):
            text = path.read_text()
            logs.append(f"== {path.name} (last 4000 chars)\n{text[-4000:]}")
        report.write_text(f"{title}\n{detail}\n\n== steps\n" + "\n".join(self.log) + "\n\n"
                          + "\n".join(logs))
        raise AssertionError(f"{title} (example {self.n}, report {report}):\n{detail[:4000]}\n"
                             "steps:\n" + "\n".join(self.log))

    # -- steps ------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.0, 3.0]))
    def time_passes(self, seconds: float) -> None:
        self._note(f"time passes {seconds}s")
        time.sleep(seconds)  # the step itself is time passing

    @rule(i=st.integers(0, 1))
    def restart(self, i: int) -> None:
        if self.runners.procs[i] is None:
            self._note(f"start runner {i}")
            self.runners.start(i)
            return
        self._note(f"restart runner {i} (SIGTERM, start)")
        self.runners.stop(i)
        self.runners.start(i)

    @precondition(lambda self: len(self.runners.live()) == 2)
    @rule(i=st.integers(0, 1))
    def stop_one(self, i: int) -> None:
        self._note(f"stop runner {i}")
        self.runners.stop(i)

    @precondition(lambda self: self.runners.live())
    @rule(i=st.integers(0, 1), restart_after=st.sampled_from([0.0, 1.0, 4.0]))
    def kill_9(self, i: int, restart_after: float) -> None:
        live = self.runners.live()
        i = live[i % len(live)]
        self._note(f"kill -9 runner {i}, start again after {restart_after}s")
        self.runners.kill(i)
        time.sleep(restart_after)  # the downtime itself
        self.runners.start(i)

    @rule(kind=st.sampled_from(["freeze", "stop", "database"]), seconds=st.sampled_from([3.0, 5.0, 8.0]))
    def outage(self, kind: str, seconds: float) -> None:
        """Longer than the jobs' grace (2 s): the slots due meanwhile are late."""
        self._note(f"outage: {kind} for {seconds}s")
        if kind == "freeze":
            self.runners.signal_all(signal.SIGSTOP)
            time.sleep(seconds)  # the outage itself
            self.runners.signal_all(signal.SIGCONT)
        elif kind == "stop":
            live = self.runners.live()
            for i in live:
                self.runners.stop(i)
            time.sleep(seconds)
            for i in live:
                self.runners.start(i)
        else:
            name = sql.Identifier(self.dbname)
            with psycopg.connect(url_for("postgres"), autocommit=True) as conn:
                conn.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(name))
                try:
                    conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                 " WHERE datname = %s AND pid <> pg_backend_pid()", (self.dbname,))
                    time.sleep(seconds)
                finally:
                    conn.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS true").format(name))

    @precondition(lambda self: len(self.runners.live()) == 2)
    @rule(i=st.integers(0, 1), seconds=st.sampled_from([2.0, 5.0]))
    def freeze_one(self, i: int, seconds: float) -> None:
        """One runner hangs (SIGSTOP) while the other lives: past the lease (3 s), the other
        ends its lock session and takes its runs over; then it wakes up."""
        self._note(f"freeze runner {i} for {seconds}s")
        pid = self.runners.pid(i)
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:  # a handler's crash ended it meanwhile: the supervisor restarts it
            return
        try:
            time.sleep(seconds)  # the hang itself
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    @precondition(lambda self: self.runners.live())
    @rule(i=st.integers(0, 1))
    def lose_session(self, i: int) -> None:
        live = self.runners.live()
        i = live[i % len(live)]
        pid = self.runners.pid(i)
        ended = scalar(self.url, "SELECT count(pg_terminate_backend(backend_pid)) FROM runner.instances"
                                 " WHERE pid = %s AND stopped_at IS NULL AND backend_pid IS NOT NULL", (pid,))
        self._note(f"lose the lock session of runner {i} ({ended} ended)")

    @rule(job=st.sampled_from(JOBS))
    def pause_or_resume(self, job: str) -> None:
        if job in self.paused:
            before = self._db_now()
            done = run_cli("resume", job, "--reason", "model resume", "--yes", url=self.url)
            assert done.returncode == 0, done.stderr
            self.pauses.append((job, self.paused.pop(job), before))
            self._note(f"resume {job}")
        else:
            done = run_cli("pause", job, "--reason", "model pause", "--yes", url=self.url)
            assert done.returncode == 0, done.stderr
            self.paused[job] = self._db_now()
            self._note(f"pause {job}")

    @rule(job=st.sampled_from(JOBS), every=st.sampled_from(EVERY))
    def change_schedule(self, job: str, every: str) -> None:
        self._note(f"schedule of {job}: every {every} (restart all)")
        self.control["jobs"][job]["every"] = every
        self._write_control()
        self._restart_all()

    @rule(partitions=st.sampled_from(STATIC_PARTITIONS))
    def change_static_partitions(self, partitions: list[str]) -> None:
        self._note(f"static partitions of m-static: {partitions} (restart all)")
        self.control["jobs"]["m-static"]["partitions"] = partitions
        self._write_control()
        self._restart_all()

    @rule(job=st.sampled_from(JOBS), policy=st.sampled_from(MISFIRE))
    def change_misfire(self, job: str, policy: str) -> None:
        self._note(f"misfire of {job}: {policy} (restart all)")
        self.control["jobs"][job]["misfire"] = policy
        self._write_control()
        self._restart_all()

    @rule(job=st.sampled_from(JOBS), every=st.sampled_from(EVERY),
          partitions=st.sampled_from(STATIC_PARTITIONS), seconds=st.sampled_from([3.0, 6.0]))
    def redeploy_after_downtime(self, job: str, every: str, partitions: list[str], seconds: float) -> None:
        """Every runner stopped; the schedule changes while they are down; they start again
        (the downtime's late slots: before the change, the old schedule's)."""
        self._note(f"redeploy after {seconds}s down: {job} every {every}"
                   + (f", partitions {partitions}" if job == "m-static" else ""))
        live = self.runners.live()
        for i in live:
            self.runners.stop(i)
        self.control["jobs"][job]["every"] = every
        if job == "m-static":
            self.control["jobs"][job]["partitions"] = partitions
        self._write_control()
        time.sleep(seconds)  # the downtime itself
        for i in live or [0]:
            self.runners.start(i)
        self._applied()

    @rule(every=st.sampled_from(EVERY), restart_old=st.booleans(), old_last=st.booleans())
    def rollout(self, every: str, restart_old: bool, old_last: bool) -> None:
        """A deploy of a second code version of m-single (another schedule) runner by runner:
        runner 0 restarts on the new version while runner 1 still runs the old one; a
        supervisor may restart the old one midway (its start must not rewrite the history
        while the new one runs: issue 26, defect 2); then runner 1 moves to the new version.
        With ``old_last`` runner 1 is stopped first, so the new version runs alone for a
        while before its second process starts. Once only the new version runs, the history
        must end with its schedule (the history duty re-asserts it)."""
        job = "m-single"
        old = self.control["jobs"][job]["every"]
        if every == old:
            every = EVERY[(EVERY.index(old) + 1) % len(EVERY)]
        self._note(f"rollout of {job}: every {old} -> {every}"
                   + (", the old version restarted midway" if restart_old else "")
                   + (", the old version stopped before the new one's second start" if old_last else ""))
        for i in (0, 1):
            if i not in self.runners.live():
                self.runners.start(i)
        # (a runner stopped before it registered dies of the signal: wait for both first)
        eventually(self.runners.registered, timeout=60, message="both runners registered")
        crashes_before = self.runners.crash_exits
        new_jobs = json.loads(json.dumps(self.control["jobs"]))
        new_jobs[job]["every"] = every
        old_jobs = self.control["jobs"]
        self._write_control({0: new_jobs, 1: old_jobs})
        # (a starting runner claims the slots of its own schedule due within its grace before
        # it started, its on-time window (runner/worker/claims.py, begin): long tier seed
        # 3690660704 ran 17:54:49 of every 1s, the rollout having begun at 17:54:49.5; seed
        # 267526912 example 9 ran 21:31:05 of every 1s from a start at 21:31:06.96, grace 2 s;
        # tests/test_history.py::test_a_new_version_started_mid_interval_runs_only_its_on_time_window)
        began = self._db_now() - timedelta(seconds=max(_every_seconds(every), GRACE_SECONDS)) \
            - timedelta(milliseconds=100)
        self.runners.stop(0)
        self.runners.start(0)
        eventually(self.runners.registered, timeout=60, message="both versions registered")
        time.sleep(1.0)  # the mixed period itself: both versions run
        if restart_old:
            self.runners.stop(1)
            self.runners.start(1)
            eventually(self.runners.registered, timeout=60, message="the old version registered again")
            time.sleep(1.0)
        self.control["jobs"] = new_jobs
        self._write_control()
        self.runners.stop(1)
        if old_last:
            time.sleep(1.0)  # the new version alone
        self.runners.start(1)
        eventually(self.runners.registered, timeout=60, message="the new version everywhere")
        # the history may be re-asserted up to one history-duty interval after the old
        # version's last runner stopped, dated from then: until it is, slots are judged by
        # the old schedule while the new one ran its own
        try:
            eventually(lambda: scalar(self.url, "SELECT every_interval FROM runner.job_schedules"
                                                " WHERE job_name = %s ORDER BY valid_from DESC LIMIT 1",
                                      (job,)) == timedelta(seconds=_every_seconds(every)),
                       timeout=60, interval=0.2, message="the history ends with the new version")
        except AssertionError as exc:
            history = rows(self.url, "SELECT valid_from, every_interval, explained_by FROM runner.job_schedules"
                                     " WHERE job_name = %s ORDER BY valid_from", (job,))
            self._fail("a rollout left the history on the old version", f"{exc}; history {history}")
        ended = self._db_now()
        self.mixed.append((job, began, ended))
        if self.runners.crash_exits > crashes_before:
            # A handler's one-shot crash ended a runner during the rollout. If it was the new
            # version's only live runner, the old one re-asserted its definition meanwhile (or
            # synced it at its restart): no live runner ran the new one, so the history truly
            # says the old schedule was in force, until the new one's runner came back and
            # re-asserted it (long tier seed 3577141639, example 6: the history ran 2 s | 1 s |
            # 2 s | 1 s). runner/worker/history.py: a definition is written only when no live
            # runner holds the current one, so without a crash no flip is accepted.
            self.crashed_rollouts.append((job, began, ended, (_every_seconds(old), old_jobs[job].get("partitions")),
                                          (_every_seconds(every), new_jobs[job].get("partitions"))))
        self._applied()

    @rule(action=st.sampled_from(["approve", "skip"]), job=st.sampled_from(JOBS))
    def decide_held_runs(self, action: str, job: str) -> None:
        """An operator approves, or skips, every run of a job awaiting approval."""
        done = run_cli(action, job, "--from", "2000-01-01T00:00:00+00:00", "--to", "2100-01-01T00:00:00+00:00",
                       "--reason", f"model {action}", "--yes", url=self.url)
        self._note(f"{action} the held runs of {job}: exit {done.returncode} {done.stdout.strip()[-80:]}"
                   f"{done.stderr.strip()[-120:]}")
        if done.returncode not in (0, 1) or (done.returncode == 1 and len(done.stderr.strip().splitlines()) != 1):
            self._fail(f"runner {action} failed", done.stdout + done.stderr)

    @rule(pick=st.integers(0, 10**6), force=st.booleans())
    def rerun(self, pick: int, force: bool) -> None:
        """An operator reruns one run (with --force: even one that succeeded)."""
        total = scalar(self.url, "SELECT count(*) FROM runner.job_runs")
        if not total:
            return
        job, slot, key = rows(self.url, "SELECT job_name, schedule_slot, partition_key FROM runner.job_runs"
                                        " ORDER BY id OFFSET %s LIMIT 1", (pick % total,))[0]
        args = ["rerun", job, "--slot", slot.isoformat(), "--partition", key, "--reason", "model rerun", "--yes"]
        done = run_cli(*args, *(["--force"] if force else []), url=self.url)
        self._note(f"rerun {job} {slot.astimezone(UTC):%H:%M:%S} {key!r}{' --force' if force else ''}:"
                   f" exit {done.returncode} {done.stderr.strip()[-120:]}")
        if done.returncode not in (0, 1) or (done.returncode == 1 and len(done.stderr.strip().splitlines()) != 1):
            self._fail("runner rerun failed", done.stdout + done.stderr)

    @rule(partitions=st.sampled_from(DYNAMIC_PARTITIONS))
    def change_dynamic_partitions(self, partitions: list[str] | str) -> None:
        self._note(f"dynamic partitions of m-dynamic: {partitions} (live)")
        self.control["dynamic_partitions"] = partitions
        self._write_control()

    @rule(job=st.sampled_from(JOBS), mode=st.sampled_from(MODES), seconds=st.sampled_from([1.0, 4.0]))
    def handler_behaviour(self, job: str, mode: str, seconds: float) -> None:
        self._note(f"handler of {job}: {mode}" + (f" {seconds}s" if mode == "slow" else "") + " (live)")
        self.control["behaviour"][job].update({"mode": mode, "seconds": seconds})
        self._write_control()

    @rule(job=st.sampled_from(JOBS), n=st.integers(1, 3))
    def crash(self, job: str, n: int) -> None:
        self._note(f"handler of {job}: {n} one-shot crash(es) (os._exit)")
        self.control["behaviour"][job]["crashes"] += n
        self._write_control()

    # -- operator actions ------------------------------------------------------------

    def _operator(self, what: str, *args: str, app: bool = False) -> Any:
        """One CLI action: exit 0, or 1 with one line (a refusal); anything else fails. With
        ``app``, the command reads the jobs' code (--app, as of the control file)."""
        if app:
            done = run_cli(*args, "--app", APP, url=self.url, env={"MODEL_CONTROL": str(self.control_paths[0])})
        else:
            done = run_cli(*args, url=self.url)
        self._note(f"{what}: exit {done.returncode} {done.stdout.strip()[-100:]} {done.stderr.strip()[-160:]}")
        if done.returncode not in (0, 1) or (done.returncode == 1 and len(done.stderr.strip().splitlines()) != 1):
            self._fail(f"{what} failed", done.stdout + done.stderr)
        return done

    @rule(job=st.sampled_from(JOBS), back=st.sampled_from([4, 12, 30]), ahead=st.sampled_from([0, 0, 8]),
          force=st.booleans(), then=st.sampled_from(["run", "run", "pause", "pause_resume", "cancel"]))
    def backfill(self, job: str, back: int, ahead: int, force: bool, then: str) -> None:
        """An operator backfills a range of the job (some reach past now: refused or clamped,
        never run early), then maybe pauses, resumes or cancels the plan at once."""
        now = self._db_now()
        start, end = now - timedelta(seconds=back), now + timedelta(seconds=ahead)
        done = self._operator(f"backfill {job} [-{back}s, +{ahead}s){' --force' if force else ''}",
                              "backfill", "create", job, "--from", start.isoformat(), "--to", end.isoformat(),
                              "--reason", "model backfill", "--yes", "--json", *(["--force"] if force else []),
                              app=True)
        if done.returncode != 0 or then == "run":
            return
        plan = str(json.loads(done.stdout)["backfill"]["id"])
        for action in {"pause": ["pause"], "pause_resume": ["pause", "resume"], "cancel": ["cancel"]}[then]:
            self._operator(f"backfill {action} {plan}", "backfill", action, plan, "--reason", f"model {action}",
                           "--yes")

    @precondition(lambda self: scalar(self.url, "SELECT count(*) FROM runner.backfills") > 0)
    @rule(pick=st.integers(0, 10**6), action=st.sampled_from(["pause", "resume", "cancel"]))
    def backfill_action(self, pick: int, action: str) -> None:
        """An operator pauses, resumes or cancels one of the plans (any state: refusals are one line)."""
        plans = [r[0] for r in rows(self.url, "SELECT id FROM runner.backfills ORDER BY id")]
        plan = str(plans[pick % len(plans)])
        self._operator(f"backfill {action} {plan}", "backfill", action, plan, "--reason", f"model {action}", "--yes")

    @rule(job=st.sampled_from(JOBS), seconds=st.sampled_from([1.0, 3.0]))
    def retire_and_unretire(self, job: str, seconds: float) -> None:
        """The job is removed from the code (every runner restarted without it) and retired;
        some time later it is unretired and put back (restarted with it). The slots between
        are never expected, and no misfire decision, run or alert is made for them."""
        self.control["jobs"][job]["absent"] = True
        self._write_control()
        self._restart_all()
        before = self._db_now()
        self._operator(f"retire {job}", "retire", job, "--reason", "model retire", "--yes")
        time.sleep(seconds)  # the job stays retired this long
        self._operator(f"unretire {job}", "unretire", job, "--reason", "model unretire", "--yes")
        after = self._db_now()
        self.retirements.append((job, before, after))
        self.control["jobs"][job]["absent"] = False
        self._write_control()
        self._restart_all()

    @rule()
    def prune(self) -> None:
        """Retention: every job's retention shortened to seconds for one `runner prune` pass
        (the stored policy it reads; at least an hour in code), every pruned run archived in
        model.pruned; the policy put back at once."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("UPDATE runner.jobs SET options = jsonb_set(options, '{retention}',"
                         " '{\"succeeded_seconds\": 2, \"failed_seconds\": 4}')")
            try:
                self._operator("prune (retention 2 s / 4 s)", "prune", "--archive-table", ARCHIVE, "--json")
            finally:
                conn.execute("UPDATE runner.jobs SET options = options - 'retention'")

    @rule(lane=st.sampled_from(["realtime", "correction", "bulk"]), concurrency=st.sampled_from(["1", "2", "none"]),
          rate=st.sampled_from(["none", "2", "20"]))
    def lane_limits(self, lane: str, concurrency: str, rate: str) -> None:
        self._operator(f"lane {lane}: concurrency {concurrency}, rate {rate}", "lane", "set", lane,
                       "--concurrency", concurrency, "--rate", rate, "--reason", "model lanes")

    # -- after every step ---------------------------------------------------------------

    def _settled(self) -> bool:
        self.runners.supervise()
        return self.runners.registered() and not rows(self.url, ORPHANS)

    @invariant()
    def ledger_is_sound(self) -> None:
        try:
            eventually(self._settled, timeout=60, interval=0.1, message="the runners settle")
        except AssertionError as exc:
            orphans = rows(self.url, ORPHANS + " LIMIT 10")
            self._fail("the runners did not settle within 60 s", f"{exc}; orphaned attempts {orphans}")
        self._audit()

    def _audit(self) -> None:
        if self.runners.exits:
            i, code, out = self.runners.exits[0]
            self._fail(f"runner {i} exited with code {code}", out)
        checked = run_cli("check", "--json", url=self.url)
        self.stats["checks"] = self.stats.get("checks", 0) + 1
        if checked.returncode != 0:
            found = checked.stdout or checked.stderr
            time.sleep(3)  # a second look, to tell a lasting violation from a passing one
            again = run_cli("check", "--json", url=self.url)
            self._fail("runner check found violations",
                       f"first look:\n{found}\nthree seconds later (exit {again.returncode}):\n"
                       f"{again.stdout or again.stderr}")
        unreturned = rows(self.url, SUCCESS_WITHOUT_RETURN)
        if unreturned:
            self._fail("an attempt recorded succeeded whose handler never returned", repr(unreturned))
        doubled = rows(self.url, EXECUTIONS_WITHOUT_ATTEMPT)
        if doubled:
            self._fail("a handler ran twice for one attempt, or without an attempt row", repr(doubled))
        early = rows(self.url, BEFORE_SLOT)
        if early:
            self._fail("a handler started before its slot's instant", repr(early[:10]))
        twice = rows(self.url, SENT_TWICE)
        if twice:
            self._fail("an effect key was sent twice", repr(twice[:10]))
        for job, since in self.paused.items():
            started = rows(self.url, STARTED_WHILE_PAUSED, (job, since, None, None))
            if started:
                self._fail(f"new attempts of paused job {job}", repr(started))
        for job, since, until in self.pauses:
            started = rows(self.url, STARTED_WHILE_PAUSED, (job, since, until, until))
            if started:
                self._fail(f"new attempts of job {job} while it was paused", repr(started))

    def teardown(self) -> None:
        try:
            if not self.failed:
                self._final_checks()
        finally:
            (self.dir / "steps.txt").write_text("\n".join(self.log) + "\n")
            self.stats["crash_exits"] = self.stats.get("crash_exits", 0) + self.runners.crash_exits
            self.runners.shutdown()
            if not self.failed or not os.environ.get("RUNNER_MODEL_KEEP"):
                self.pool.give_back(self.dbname)  # dropped behind the next example (tests/clonepool.py)

    # -- at the end of an example ---------------------------------------------------------

    def _final_checks(self) -> None:
        """Every expected slot x partition, expanded here from the schedule history, is
        accounted for or listed by the gap scan; no run is of a slot the history does not
        expect; the history is the sequence of schedules the model applied."""
        for behaviour in self.control["behaviour"].values():
            behaviour.update({"mode": "ok", "crashes": 0})
        self._write_control()
        self._note("final: every handler ok")
        self.ledger_is_sound()
        for i in self.runners.live():
            self.runners.stop(i)
        self._note("final: every runner stopped")
        orphans = rows(self.url, ORPHANS)
        if orphans:  # a stopping runner releases what still runs
            self._fail("attempts left running by runners that stopped", repr(orphans))
        self._audit()
        as_of = self._db_now()
        listed = {(r[0], r[1], r[2]) for r in rows(
            self.url, "SELECT job_name, schedule_slot, partition_key FROM runner.missing_slots_v1(%s)",
            (as_of,))}
        runs = {(r[0], r[1], r[2]): (r[3], r[4]) for r in rows(
            self.url, "SELECT job_name, schedule_slot, partition_key, status, trigger FROM runner.job_runs")}
        if scalar(self.url, "SELECT to_regclass(%s) IS NOT NULL", (ARCHIVE,)):
            for job, slot, key, status, trigger in rows(
                    self.url, f"SELECT job_name, schedule_slot, run ->> 'partition_key', status, run ->> 'trigger'"
                              f" FROM {ARCHIVE}"):
                runs.setdefault((job, slot, key), (status, trigger))
        fanouts = {(r[0], r[1]): r[2] for r in rows(
            self.url, "SELECT job_name, schedule_slot, partitions FROM runner.slot_fanouts WHERE error IS NULL")}
        slots_with_runs = {(job, slot) for job, slot, _ in runs}
        problems: list[str] = []
        dynamic_jobs = {r[0] for r in rows(self.url, "SELECT job_name FROM runner.jobs WHERE dynamic_partitions")}
        expected_keys: set[tuple[str, datetime, str]] = set()
        spans: dict[str, list[tuple[datetime, datetime]]] = {}
        for job, before, after in self.retirements:
            recorded = rows(self.url, "SELECT retired_from, retired_until FROM runner.job_retirements"
                                      " WHERE job_name = %s AND retired_from >= %s AND retired_until <= %s",
                            (job, before, after))
            if len(recorded) != 1:
                problems.append(f"{job}: retired between {before} and {after}, the ledger records {recorded}")
        for job in JOBS:
            spans[job] = rows(self.url, "SELECT greatest(lo, '2000-01-01'), least(hi, '2100-01-01')"
                                     " FROM runner.tracked_spans_v1(%s)", (job,))

        def tracked(job: str, slot: datetime) -> bool:
            return any(lo < slot <= hi for lo, hi in spans[job])

        for job in JOBS:
            track_from = scalar(self.url, "SELECT track_from FROM runner.jobs WHERE job_name = %s", (job,))
            history = rows(self.url, "SELECT valid_from, every_interval, partitions, dynamic_partitions"
                                     " FROM runner.job_schedules WHERE job_name = %s ORDER BY valid_from", (job,))
            recorded = _without_crash_flips(job, history, self.crashed_rollouts)
            if recorded != self.history[job]:
                problems.append(f"{job}: schedule history {recorded}, the model applied {self.history[job]}")
            for k, (valid_from, every, partitions, dynamic) in enumerate(history):
                lo = max(valid_from, track_from) if k else track_from
                hi = history[k + 1][0] if k + 1 < len(history) else as_of + timedelta(microseconds=1)
                step = int(every.total_seconds())
                first = -(-int(lo.timestamp() * 1_000_000) // (step * 1_000_000)) * step
                slot = datetime.fromtimestamp(first, UTC)
                while slot < hi:
                    if slot >= lo and tracked(job, slot):
                        if dynamic:
                            keys = fanouts.get((job, slot))
                            if keys is None:
                                if (job, slot) not in slots_with_runs and (job, slot, None) not in listed:
                                    problems.append(f"{job} {slot}: never fanned out, no run, not listed")
                                slot += timedelta(seconds=step)
                                continue
                        else:
                            keys = partitions or [""]
                        for key in keys:
                            expected_keys.add((job, slot, key))
                            run = runs.get((job, slot, key))
                            if (run is None or run[0] not in SETTLED) and (job, slot, key) not in listed:
                                problems.append(f"{job} {slot} {key!r}: {run and run[0]}, not listed")
                    slot += timedelta(seconds=step)
        for (job, slot, key), (status, trigger) in runs.items():
            if slot <= as_of and (job, slot, key) not in expected_keys and trigger not in ("manual", "backfill") \
                    and not (job in dynamic_jobs and (job, slot) not in fanouts) \
                    and not any(j == job and lo <= slot <= hi for j, lo, hi in self.mixed):
                problems.append(f"{job} {slot} {key!r}: a run ({status}, {trigger}) of a slot the schedule"
                                " history does not expect")
        if problems:
            self._fail("the final accounting of expected slots failed",
                       "\n".join(problems[:50]) + f"\n({len(problems)} problems)")


def _without_crash_flips(job: str, history: list[tuple[Any, ...]],
                         crashed: list[tuple[str, datetime, datetime, tuple[int, Any], tuple[int, Any]]]
                         ) -> list[tuple[int, Any]]:
    """The schedule history as (every, partitions) entries, where a flip back to the old
    version and forward again, both dated within a rollout during which a runner crashed, is
    collapsed (new, old, new -> new): only there may the old version have been the only live
    one. Any other flip stays, and the comparison with the model's history fails on it."""
    kept: list[tuple[int, Any]] = []
    inside: list[bool] = []
    for valid_from, every, partitions, *_ in history:
        entry = (int(every.total_seconds()), partitions)
        spans = [(old, new) for j, lo, hi, old, new in crashed if j == job and lo <= valid_from <= hi]
        if spans and len(kept) >= 2 and inside[-1] and any(
                entry == new and kept[-1] == old and kept[-2] == new for old, new in spans):
            kept.pop()
            inside.pop()
            continue
        kept.append(entry)
        inside.append(bool(spans))
    return kept


def _profile() -> settings:
    common: dict[str, Any] = {
        "deadline": None, "database": None, "suppress_health_check": list(HealthCheck),
        "phases": (Phase.explicit, Phase.generate), "print_blob": False,
    }
    if TIER == "long":
        return settings(max_examples=int(os.environ.get("RUNNER_MODEL_EXAMPLES", "40")),
                        stateful_step_count=int(os.environ.get("RUNNER_MODEL_STEPS", "30")), **common)
    return settings(max_examples=3, stateful_step_count=15, **common)


def test_the_loop_against_a_model(postgresql_server: Any, clone_pool: Any, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Random sequences of steps (module docstring); the ledger audit and the model's checks
    after each. CI tier: a fixed seed; RUNNER_MODEL_TIER=long for the longer local tier."""
    from hypothesis import seed

    LoopModel.template = postgresql_server.template_dbname
    LoopModel.pool = clone_pool
    LoopModel.workdir = tmp_path
    LoopModel.stats = {}
    machine: Any = LoopModel
    if TIER == "long":
        chosen = int(os.environ.get("RUNNER_MODEL_SEED") or random.randrange(2**32))
        machine = seed(chosen)(LoopModel)
        with capsys.disabled():
            print(f"\nmodel: long tier, seed {chosen}, work directory {tmp_path}")
    else:
        machine = seed(CI_SEED)(LoopModel)
    started = time.monotonic()
    try:
        run_state_machine_as_test(machine, settings=_profile())
    finally:
        with capsys.disabled():
            print(f"\nmodel: {LoopModel.stats} in {time.monotonic() - started:.0f}s")
