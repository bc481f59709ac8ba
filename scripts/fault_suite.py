#!/usr/bin/env python3
"""Fault-injection suite: N real ``runner start`` processes under seeded random faults, then
the guarantees checked in SQL.

    python scripts/fault_suite.py --processes 4 --duration 120 --seed 1 [--pg-restart] [--json]

What it does, in order:

1. A database: ``--database-url``, or a scratch database created on the server named by the
   ``PG*`` variables (default 127.0.0.1), migrated with ``runner.migrate.upgrade`` and dropped
   at the end (kept with ``--keep``). The suite's tables go in the schema ``fault``.
2. N processes of ``runner start --app scripts/fault_app.py:app --poll-interval 0.2 --grace 1``
   (two jobs every second over ``--partitions`` partitions, see scripts/fault_app.py).
3. For ``--duration`` seconds, faults at seeded random times (mean gap ``--fault-interval``):
   ``kill -9`` of a runner (restarted after a random delay), ``SIGSTOP`` for longer than the
   jobs' lease then ``SIGCONT``, ``pg_terminate_backend`` of a random share of the runners'
   sessions, with ``--pg-restart`` a restart of the PostgreSQL cluster
   (``pg_ctlcluster --skip-systemctl-redirect VERSION NAME restart``; only when asked: a shared
   server's other users lose their sessions too), and crash points inside the runner: some
   processes run with ``RUNNER_CRASH_POINT`` (after_claim, after_handler, before_completion;
   rotating at each restart) and ``RUNNER_CRASH_RATE`` (``--crash-rate``), so they exit
   abruptly at those points now and then and are restarted.
4. Then no more faults: stopped runners are continued, crash-prone ones restarted without a
   crash point, and the suite waits (``--quiesce-timeout``) until every expected slot x
   partition of the tracked range has a settled run and nothing at or before the range's end
   is running, pending or waiting for a retry. Every runner is stopped with SIGTERM.
5. The invariants, in SQL (scripts/fault_suite.sql): exactly one succeeded run per expected
   slot x partition, each of the two sink rows once per run of the ``ctx.db`` job (the first
   committed by a checkpoint, the second with the success), no sink row under a fence that
   did not own the run then (a stale owner's write), every effect key of a succeeded run confirmed, sends beyond
   one per key only where a check said "not delivered", nothing left running, and no missing
   slot (``runner.missing_slots`` when the view exists, else slots from ``runner.schedule``);
   and the ledger audit (``runner check``, runner/actions/audit.py) finds no violation at all.

The tracked range is the slots after the first runner registered, up to the end of the fault
phase. The fault *plan* (times, kinds, targets' indices, delays) is a pure function of
``--seed``; what the faults hit depends on timing, so two runs with one seed inject the same
faults but not at the same runs. Exit code 0 when every invariant holds, 1 otherwise, 2 for
usage errors. Figures print as a table, or as JSON with ``--json``.

One run of the suite can never lose slots by design: a fault never leaves no live,
crash-free runner (kills and stops spare the last one), because slots due while *every*
runner is down are not claimed on time (they are the misfire policy's, a separate matter).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
APP = f"{ROOT / 'scripts' / 'fault_app.py'}:app"
JOBS = ["fault-ledger", "fault-notify"]
SINK_JOB = "fault-ledger"
LEASE_SECONDS = 3.0  # scripts/fault_app.py: LEASE
CRASH_POINTS = ("after_claim", "after_handler", "before_completion")
NAMESPACE = int(os.environ.get("RUNNER_LOCK_NAMESPACE", "21077"))
FAULT_WEIGHTS = {"kill -9": 3, "SIGSTOP": 2, "connection kill": 3, "pg restart": 1}


def named_sql(path: Path) -> dict[str, str]:
    """The ``-- name: x`` blocks of a SQL file (the same layout as sql/queries/)."""
    parts = re.split(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", path.read_text(encoding="utf-8"),
                     flags=re.MULTILINE)
    return {name: body.strip().rstrip(";") for name, body in zip(parts[1::2], parts[2::2], strict=True)}


Q = named_sql(Path(__file__).with_name("fault_suite.sql"))


# -- configuration ------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    seed: int = 1
    processes: int = 4
    duration: float = 60.0
    partitions: int = 3
    database_url: str | None = None
    keep: bool = False
    json: bool = False
    pg_restart: bool = False
    pg_cluster: str | None = None  # VERSION/NAME; default: the server's major version, "main"
    fault_interval: float = 4.0
    crash_rate: float = 0.02
    workers: int = 4
    quiesce_timeout: float = 120.0
    timeout_rate: float = 0.1
    max_work: float = 1.5
    async_handlers: bool = False  # --async: scripts/fault_app.py's async def handlers
    log_dir: str | None = None
    log_level: str = "INFO"


def parse_args(argv: list[str] | None = None) -> Config:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1, help="seed of the fault plan and the handlers' choices")
    p.add_argument("--processes", type=int, default=4, help="runner start processes (at least 2)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of fault injection")
    p.add_argument("--partitions", type=int, default=3, help="partitions of each job")
    p.add_argument("--database-url", help="a migrated database to use (default: a scratch database)")
    p.add_argument("--keep", action="store_true", help="keep the scratch database and the logs")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--pg-restart", action="store_true",
                   help="also restart the PostgreSQL cluster mid-run (every session on it is cut)")
    p.add_argument("--pg-cluster", help="VERSION/NAME for pg_ctlcluster (default: server's major/main)")
    p.add_argument("--fault-interval", type=float, default=4.0, help="mean seconds between faults")
    p.add_argument("--crash-rate", type=float, default=0.02,
                   help="RUNNER_CRASH_RATE of the crash-prone processes (0 disables crash points)")
    p.add_argument("--workers", type=int, default=4, help="handler threads per runner process")
    p.add_argument("--quiesce-timeout", type=float, default=120.0,
                   help="seconds to wait for every slot to settle after the faults")
    p.add_argument("--timeout-rate", type=float, default=0.1, help="share of sends that time out")
    p.add_argument("--max-work", type=float, default=1.5, help="longest usual handler work, seconds")
    p.add_argument("--async", dest="async_handlers", action="store_true",
                   help="async def handlers (scripts/fault_app.py: FAULT_ASYNC), on the runners' event loop")
    p.add_argument("--log-dir", help="where the runners' logs go (default: a temporary folder)")
    p.add_argument("--log-level", default="INFO", help="the runners' --log-level")
    a = p.parse_args(argv)
    if a.processes < 2:
        p.error("--processes must be at least 2: a fault never takes the last runner down")
    if a.duration <= 0 or a.partitions < 1 or a.fault_interval <= 0 or a.workers < 1:
        p.error("--duration, --partitions, --fault-interval and --workers must be positive")
    if not 0 <= a.crash_rate <= 1 or not 0 <= a.timeout_rate <= 1:
        p.error("--crash-rate and --timeout-rate are shares between 0 and 1")
    return Config(**{k: v for k, v in vars(a).items()})


# -- the fault plan -----------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    at: float  # seconds into the fault phase
    kind: str
    target: int  # index of the process (kill -9, SIGSTOP): the next eligible one from here
    pause: float  # kill -9: seconds before the restart; SIGSTOP: seconds stopped
    share: float  # connection kill: share of the runners' sessions ended
    salt: int


def plan_faults(cfg: Config) -> list[Fault]:
    """The faults of one run: a pure function of the configuration (and so of the seed)."""
    rng = random.Random(cfg.seed)
    kinds = [k for k in FAULT_WEIGHTS if cfg.pg_restart or k != "pg restart"]
    weights = [FAULT_WEIGHTS[k] for k in kinds]
    faults: list[Fault] = []
    t = 0.0
    last_restart = -1e9
    while True:
        t += rng.expovariate(1.0 / cfg.fault_interval)
        if t >= cfg.duration:
            return faults
        kind = rng.choices(kinds, weights)[0]
        target = rng.randrange(cfg.processes)
        if kind == "kill -9":
            pause = rng.uniform(0.2, 3.0)
        elif kind == "SIGSTOP":
            pause = LEASE_SECONDS + rng.uniform(1.0, 3.0)  # past the lease: the others take over
        else:
            pause = 0.0
        share = 1.0 if rng.random() < 0.4 else rng.uniform(0.2, 0.8)
        salt = rng.randrange(1 << 30)
        if kind == "pg restart":
            if t - last_restart < 30.0:  # let the fleet recover between restarts
                kind = "connection kill"
            else:
                last_restart = t
        faults.append(Fault(t, kind, target, pause, share, salt))


# -- the runner processes -----------------------------------------------------------------


@dataclass
class Proc:
    """One runner slot of the fleet: a process that is killed and started again."""

    index: int
    crash_prone: bool
    popen: subprocess.Popen[bytes] | None = None
    generation: int = 0
    stopped: bool = False
    expected_exit: bool = False
    crash_point: str | None = None
    pids: list[int] = field(default_factory=list)
    log_paths: list[Path] = field(default_factory=list)

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def live(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def healthy(self) -> bool:
        return self.live() and not self.stopped


class Fleet:
    def __init__(self, cfg: Config, url: str, log_dir: Path) -> None:
        self.cfg = cfg
        self.url = url
        self.log_dir = log_dir
        # processes 0 and 1 (0 alone with two processes) never crash on their own: with the
        # "never the last one" rule for kills and stops, a live crash-free runner always remains
        crash_free = 2 if cfg.processes >= 3 else 1
        self.procs = [Proc(i, crash_prone=i >= crash_free and cfg.crash_rate > 0)
                      for i in range(cfg.processes)]
        self.crash_points_enabled = True

    def start(self, p: Proc) -> None:
        p.generation += 1
        env = {**os.environ, "RUNNER_DATABASE_URL": self.url, "FAULT_SEED": str(self.cfg.seed),
               "FAULT_PARTITIONS": str(self.cfg.partitions), "FAULT_TIMEOUT_RATE": str(self.cfg.timeout_rate),
               "FAULT_MAX_WORK": str(self.cfg.max_work),
               "FAULT_ASYNC": "1" if self.cfg.async_handlers else "0"}
        env.pop("RUNNER_CRASH_POINT", None)
        p.crash_point = None
        if p.crash_prone and self.crash_points_enabled:
            p.crash_point = CRASH_POINTS[(p.index + p.generation) % len(CRASH_POINTS)]
            env["RUNNER_CRASH_POINT"] = p.crash_point
            env["RUNNER_CRASH_RATE"] = str(self.cfg.crash_rate)
        log_path = self.log_dir / f"runner-{p.index}-{p.generation}.log"
        with open(log_path, "wb") as log:
            p.popen = subprocess.Popen(
                [sys.executable, "-m", "runner", "start", "--app", APP, "--poll-interval", "0.2",
                 "--grace", "1", "--workers", str(self.cfg.workers), "--log-level", self.cfg.log_level],
                env=env, cwd=self.log_dir, stdout=log, stderr=subprocess.STDOUT)
        p.stopped = False
        p.expected_exit = False
        p.pids.append(p.popen.pid)
        p.log_paths.append(log_path)

    def others_safe(self, target: Proc) -> bool:
        """Whether a live, unstopped, crash-free runner remains if ``target`` goes down."""
        return any(q is not target and not q.crash_prone and q.healthy() for q in self.procs)

    def pick(self, index: int) -> Proc | None:
        n = len(self.procs)
        for k in range(n):
            p = self.procs[(index + k) % n]
            if p.healthy() and self.others_safe(p):
                return p
        return None

    def terminate_all(self, timeout: float = 30.0) -> dict[int, int | None]:
        for p in self.procs:
            if p.popen is not None and p.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    if p.stopped:
                        os.kill(p.pid, signal.SIGCONT)
                        p.stopped = False
                    p.expected_exit = True
                    p.popen.send_signal(signal.SIGTERM)
        codes: dict[int, int | None] = {}
        deadline = time.monotonic() + timeout
        for p in self.procs:
            if p.popen is None:
                continue
            try:
                codes[p.index] = p.popen.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait()
                codes[p.index] = None
        return codes

    def kill_all(self) -> None:
        for p in self.procs:
            if p.popen is not None and p.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)
                    p.popen.kill()
                p.popen.wait()


# -- the database -------------------------------------------------------------------------


def connect(url: str, attempts: float = 30.0) -> psycopg.Connection[Any]:
    """The suite's own session, retried while the server restarts."""
    deadline = time.monotonic() + attempts
    while True:
        try:
            return psycopg.connect(url, autocommit=True, application_name="fault-suite")
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # the server is restarting: try again shortly


def query(url: str, name: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    for attempt in range(20):
        try:
            with connect(url) as conn:
                cur = conn.execute(Q[name], params)
                return cur.fetchall() if cur.description else []
        except psycopg.OperationalError:
            if attempt == 19:
                raise
            time.sleep(0.5)  # a session cut by the suite's own faults: try again
    raise AssertionError("unreachable")


def one(url: str, name: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    with connect(url) as conn:
        cur = conn.execute(Q[name], params)
        row = cur.fetchone()
        assert row is not None and cur.description is not None
        return {c.name: row[i] for i, c in enumerate(cur.description)}


def url_of(info: psycopg.ConnectionInfo, dbname: str) -> str:
    user = quote(info.user, safe="")
    auth = f"{user}:{quote(info.password, safe='')}" if info.password else user
    host = info.host
    if host.startswith("/"):
        return f"postgresql://{auth}@/{quote(dbname)}?host={quote(host)}&port={info.port}"
    return f"postgresql://{auth}@{host}:{info.port}/{quote(dbname)}"


@contextlib.contextmanager
def database(cfg: Config) -> Iterator[str]:
    """The database to run against: the given one, or a migrated scratch database."""
    if cfg.database_url:
        yield cfg.database_url
        return
    from runner.store import migrate

    server = {"host": os.environ.get("PGHOST", "127.0.0.1"),
              "dbname": os.environ.get("PGDATABASE", "postgres"), "autocommit": True}
    name = f"runner_faults_{os.getpid()}"
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(**server) as admin:
        admin.execute(drop)
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        url = url_of(admin.info, name)
    try:
        migrate.upgrade(url)
        yield url
    finally:
        if cfg.keep:
            print(f"kept the database: {url}", file=sys.stderr)
        else:
            with psycopg.connect(**server) as admin:
                admin.execute(drop)


def pg_cluster(cfg: Config, url: str) -> tuple[str, str]:
    if cfg.pg_cluster:
        version, _, name = cfg.pg_cluster.partition("/")
        return version, name or "main"
    with connect(url) as conn:
        row = conn.execute("SHOW server_version_num").fetchone()
    assert row is not None
    return str(int(row[0]) // 10000), "main"


# -- the run ------------------------------------------------------------------------------


@dataclass
class Record:
    faults: Counter[str] = field(default_factory=Counter)
    skipped: int = 0  # planned faults with no eligible target at their time
    kills: list[tuple[int, datetime]] = field(default_factory=list)  # pid, database clock
    unexpected_exits: list[str] = field(default_factory=list)
    range_start: datetime | None = None
    range_end: datetime | None = None
    quiesced: bool = False
    quiesce_seconds: float = 0.0
    exit_codes: dict[int, int | None] = field(default_factory=dict)
    leaked_locks: list[str] = field(default_factory=list)


class Suite:
    def __init__(self, cfg: Config, url: str, log_dir: Path) -> None:
        self.cfg = cfg
        self.url = url
        self.fleet = Fleet(cfg, url, log_dir)
        self.rec = Record()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0

    def later(self, delay: float, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._timers, (time.monotonic() + delay, self._seq, action))

    def log(self, message: str) -> None:
        if not self.cfg.json:
            print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    # the phases

    def run(self) -> None:
        query(self.url, "setup")
        for p in self.fleet.procs:
            self.fleet.start(p)
        self.wait_for(lambda: self.live_instances() == self.cfg.processes, 60.0, "every runner registered")
        first = query(self.url, "first_instance")[0][0]
        self.rec.range_start = first
        self.log(f"{self.cfg.processes} runners up; faults for {self.cfg.duration:.0f}s")
        self.inject(plan_faults(self.cfg))
        self.rec.range_end = query(self.url, "clock")[0][0]
        self.log("faults over; letting the runners settle")
        self.settle()
        self.rec.exit_codes = self.fleet.terminate_all()

    def live_instances(self) -> int:
        pids = [p.pid for p in self.fleet.procs if p.live()]
        return int(query(self.url, "live_instances", {"pids": pids})[0][0])

    def wait_for(self, check: Callable[[], bool], timeout: float, what: str) -> float:
        start = time.monotonic()
        while not check():
            self.supervise()
            self.run_due_timers()  # restarts of runners that crashed meanwhile
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"not within {timeout:.0f}s: {what}")
            time.sleep(0.2)  # polling a condition
        return time.monotonic() - start

    def inject(self, plan: list[Fault]) -> None:
        begin = time.monotonic()
        end = begin + self.cfg.duration
        for fault in plan:
            self.later(fault.at, lambda f=fault: self.apply(f))
        while time.monotonic() < end:
            self.supervise()
            self.run_due_timers()
            time.sleep(0.05)  # fault timing: the suite's own clock, not a wait for an outcome

    def run_due_timers(self) -> None:
        while self._timers and self._timers[0][0] <= time.monotonic():
            heapq.heappop(self._timers)[2]()

    def apply(self, f: Fault) -> None:
        if f.kind in ("kill -9", "SIGSTOP"):
            p = self.fleet.pick(f.target)
            if p is None:
                self.rec.skipped += 1
                return
            if f.kind == "kill -9":
                killed_at = query(self.url, "clock")[0][0]
                p.expected_exit = True
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
                assert p.popen is not None
                p.popen.wait()
                self.rec.kills.append((p.pid, killed_at))
                self.log(f"kill -9 runner {p.index} (pid {p.pid}); restart in {f.pause:.1f}s")
                self.later(f.pause, lambda: self.fleet.start(p))
            else:
                os.kill(p.pid, signal.SIGSTOP)
                p.stopped = True
                self.log(f"SIGSTOP runner {p.index} (pid {p.pid}) for {f.pause:.1f}s")
                self.later(f.pause, lambda: self.cont(p))
        elif f.kind == "connection kill":
            n = query(self.url, "terminate_runner_backends", {"share": f.share, "salt": f.salt})[0][0]
            self.log(f"pg_terminate_backend: {n} runner session(s) ended (share {f.share:.2f})")
        elif f.kind == "pg restart":
            version, name = pg_cluster(self.cfg, self.url)
            self.log(f"restarting PostgreSQL {version}/{name}")
            subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, name, "restart"],
                           check=True, capture_output=True, timeout=120)
        self.rec.faults[f.kind] += 1

    def cont(self, p: Proc) -> None:
        if p.stopped and p.live():
            os.kill(p.pid, signal.SIGCONT)
        p.stopped = False

    def supervise(self) -> None:
        """Restart runners that exited on their own: a crash point (exit 137) or an error."""
        for p in self.fleet.procs:
            if p.popen is None or p.expected_exit or p.popen.poll() is None:
                continue
            code = p.popen.returncode
            if code == 137 and p.crash_point:
                self.rec.faults[f"crash: {p.crash_point}"] += 1
                self.log(f"runner {p.index} (pid {p.pid}) crashed at {p.crash_point}")
            else:
                tail = p.log_paths[-1].read_text(errors="replace").strip().splitlines()[-3:]
                self.rec.unexpected_exits.append(
                    f"runner {p.index} pid {p.pid} exit {code}: " + " | ".join(tail))
                self.log(f"runner {p.index} (pid {p.pid}) exited with {code}")
            p.expected_exit = True
            self.later(0.5, lambda p=p: self.fleet.start(p))

    def settle(self) -> None:
        # no more faults: pending restarts happen now, stopped runners continue, crash-prone
        # runners come back without a crash point
        self.fleet.crash_points_enabled = False
        for _, _, action in sorted(self._timers):
            action()
        self._timers.clear()
        for p in self.fleet.procs:
            self.cont(p)
            if p.crash_point and p.live():
                p.expected_exit = True
                assert p.popen is not None
                p.popen.send_signal(signal.SIGTERM)
                p.popen.wait(30)
                self.fleet.start(p)
        self.run_due_timers()
        expected = self.expected()

        def settled() -> bool:
            self.run_due_timers()
            state = one(self.url, "expected_state",
                        {**expected, "jobs": JOBS, "range_end": self.rec.range_end})
            return state["never_claimed"] == 0 and state["unsettled"] == 0

        try:
            self.rec.quiesce_seconds = self.wait_for(settled, self.cfg.quiesce_timeout, "every slot settled")
            self.rec.quiesced = True
        except RuntimeError as exc:
            self.log(str(exc))
        # a runner stopped while still starting (before its signal handlers) would die of
        # the SIGTERM itself: let every one register first
        with contextlib.suppress(RuntimeError):
            self.wait_for(lambda: self.live_instances() == self.cfg.processes, 60.0, "every runner registered")
        # while the runners still live: locks they hold for runs long finished
        self.rec.leaked_locks = [f"run {r[0]} ({r[1]}) held by backend {r[2]}" for r in query(
            self.url, "leaked_locks", {"namespace": NAMESPACE, "jobs": JOBS})]

    def expected(self) -> dict[str, Any]:
        """Every slot x partition due in the tracked range, by the runner's own slot arithmetic
        (the app's own job definitions)."""
        from runner.model.loader import load_app

        os.environ["FAULT_PARTITIONS"] = str(self.cfg.partitions)
        app = load_app(APP)
        names: list[str] = []
        slots: list[datetime] = []
        parts: list[str] = []
        assert self.rec.range_start is not None and self.rec.range_end is not None
        for name in JOBS:
            job = app.jobs[name]
            for slot in job.schedule.slots_between(self.rec.range_start, self.rec.range_end):
                for key in job.partitions_for(slot):
                    names.append(name)
                    slots.append(slot)
                    parts.append(key)
        return {"job_names": names, "slots": slots, "partition_keys": parts}

    # the verdict

    def report(self) -> dict[str, Any]:
        expected = self.expected()
        jobs = {"jobs": JOBS, "range_end": self.rec.range_end}
        state = one(self.url, "expected_state", {**expected, **jobs})
        not_succeeded = query(self.url, "not_succeeded", expected)
        use_view = bool(query(self.url, "missing_slots_columns")[0][0])
        if use_view:
            missing = int(query(self.url, "missing_slots_view", {
                "jobs": JOBS, "range_start": self.rec.range_start, "range_end": self.rec.range_end})[0][0])
        else:
            missing = int(state["expected"]) - int(state["succeeded"])
        dup = int(query(self.url, "duplicate_successes", {"jobs": JOBS})[0][0])
        sink = one(self.url, "sink_state", {"job": SINK_JOB})
        eff = one(self.url, "effect_state", {"jobs": JOBS})
        att = one(self.url, "attempt_state", {"jobs": JOBS})
        causes = dict(query(self.url, "failures_by_class", {"jobs": JOBS}))
        violations = self.audit()
        lat = [r[0] for r in query(self.url, "recovery_latency", {
            "pids": [pid for pid, _ in self.rec.kills], "killed_at": [at for _, at in self.rec.kills]})]
        assert self.rec.range_start is not None and self.rec.range_end is not None
        source = "runner.missing_slots" if use_view else "runner.schedule"
        not_ok = sum(1 for c in self.rec.exit_codes.values() if c != 0)
        invariants = {
            "every slot settled (quiesced)": (self.rec.quiesced, True),
            "expected runs not succeeded": (int(state["expected"]) - int(state["succeeded"]), 0),
            f"missing slots ({source})": (missing, 0),
            "duplicate successes": (dup, 0),
            "duplicate sink rows": (int(sink["duplicate_rows"]), 0),
            "sink rows missing for a succeeded run": (int(sink["missing_rows"]), 0),
            "sink rows of a run not succeeded": (int(sink["rows_without_success"]), 0),
            "stale-fence writes landed": (int(sink["stale_rows"]), 0),
            "effect keys of succeeded runs not confirmed": (int(eff["unconfirmed"]), 0),
            "sends beyond one not allowed by a check": (int(eff["unexplained_sends"]), 0),
            "advisory locks held for finished runs": (len(self.rec.leaked_locks), 0),
            "attempts starved of a pool connection (PoolTimeout)": (causes.get("psycopg_pool.PoolTimeout", 0), 0),
            "runs left running": (int(att["runs_left_running"]), 0),
            "attempts left running": (int(att["attempts_left_running"]), 0),
            "runner exits other than 0 at SIGTERM": (not_ok, 0),
            "ledger audit violations (runner check)": (len(violations), 0),
        }
        slots = len(set(zip(expected["job_names"], expected["slots"], strict=True)))
        figures = {
            "processes": self.cfg.processes,
            "seconds of faults": self.cfg.duration,
            "tracked range (UTC)": f"{self.rec.range_start.astimezone(UTC):%Y-%m-%d %H:%M:%S} .. "
                                   f"{self.rec.range_end.astimezone(UTC):%H:%M:%S}",
            "slots (job x slot)": slots,
            "runs expected (slot x partition)": int(state["expected"]),
            "faults injected": dict(sorted(self.rec.faults.items())),
            "planned faults skipped (no safe target)": self.rec.skipped,
            "handler executions": int(att["executions"]),
            "handler executions beyond one per run (allowed)": int(att["extra_executions"]),
            "attempts": int(att["attempts"]),
            "attempts abandoned (taken over)": int(att["abandoned"]),
            "attempts released at shutdown": int(att["released"]),
            "attempts handed off at a checkpoint at shutdown": int(att["handed_off"]),
            "runs resumed from their checkpoint (fault-ledger)": int(sink["resumed_runs"]),
            "attempts failed or timed out (retried)": int(att["failed_attempts"]),
            "stale writes refused (attempts 'stale')": int(att["stale_refused"]),
            "attempts not succeeded, by cause": causes,
            "effect keys confirmed": int(eff["confirmed"]),
            "effects confirmed by a check": int(eff["confirmed_by_check"]),
            "sends beyond one per key (allowed: a check said not delivered)": int(eff["extra_sends"]),
            "dead runs": int(att["dead_runs"]),
            "recovery latency after kill -9 (s) p50/p95/max": _latency(lat),
            "recoveries measured": len(lat),
            "seconds to settle after the faults": round(self.rec.quiesce_seconds, 1),
            "unexpected runner exits": self.rec.unexpected_exits,
            "locks held for finished runs": self.rec.leaked_locks,
            "ledger audit (runner check)": [
                f"{v['invariant']}: run {v['run_id']} attempt {v['attempt_id']} {v['job_name']} "
                f"{v['schedule_slot']} {v['partition_key']!r} {json.dumps(v['detail'], default=str)}"
                for v in violations[:50]],
            "not succeeded, by state": [{"state": s, "n": n, "first": f.isoformat(), "last": la.isoformat()}
                                        for s, n, f, la in not_succeeded],
        }
        return {
            "seed": self.cfg.seed,
            "ok": all(value == want for value, want in invariants.values()),
            "figures": figures,
            "invariants": {k: {"value": v, "required": w, "ok": v == w} for k, (v, w) in invariants.items()},
        }

    def audit(self) -> list[dict[str, Any]]:
        """The ledger audit (``runner check``: runner.check_v1 through runner/actions/audit.py) over the
        whole ledger, once every runner has stopped: any violation fails the run."""
        from runner.actions import audit

        with connect(self.url) as conn:
            return audit.violations(conn)


def _latency(values: list[float]) -> str:
    if not values:
        return "-"
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return f"{statistics.median(values):.2f} / {p95:.2f} / {max(values):.2f}"


def print_table(result: dict[str, Any]) -> None:
    rows: list[tuple[str, str]] = []
    for key, value in result["figures"].items():
        if isinstance(value, dict):
            total = sum(value.values())
            rows.append((key, f"{total} (" + ", ".join(f"{k}: {n}" for k, n in value.items()) + ")"))
        elif isinstance(value, list):
            if value:
                rows.append((key, "; ".join(str(v) for v in value)))
        else:
            rows.append((key, str(value)))
    for key, inv in result["invariants"].items():
        verdict = "ok" if inv["ok"] else f"FAILED (must be {inv['required']})"
        rows.append((key, f"{inv['value']} {verdict}"))
    width = max(len(k) for k, _ in rows)
    print(f"| {'figure':<{width}} | value |")
    print(f"|{'-' * (width + 2)}|-------|")
    for key, value in rows:
        print(f"| {key:<{width}} | {value} |")
    print(f"\nseed {result['seed']}: {'all invariants hold' if result['ok'] else 'INVARIANTS FAILED'}")


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    log_dir = Path(cfg.log_dir) if cfg.log_dir else Path(tempfile.mkdtemp(prefix="runner-faults-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] | None = None
    with database(cfg) as url:
        suite = Suite(cfg, url, log_dir)
        try:
            suite.run()
            result = suite.report()
        finally:
            suite.fleet.kill_all()
    assert result is not None
    result["logs"] = str(log_dir)
    if cfg.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print_table(result)
    if result["ok"] and not cfg.keep and not cfg.log_dir:
        shutil.rmtree(log_dir, ignore_errors=True)
    elif not cfg.json:
        print(f"runner logs: {log_dir}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
