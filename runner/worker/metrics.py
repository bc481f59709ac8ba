"""Prometheus metrics of one runner process (``runner start --metrics-port P``).

The endpoint has no authentication: it listens on ``--metrics-host`` (default 127.0.0.1, this
machine only); a scraper on another machine needs the address it should be reachable on
(or 0.0.0.0 / :: for every address, behind a firewall).

The job is labelled ``job_name``, never ``job``: Prometheus sets ``job`` (and ``instance``) on
every series it scrapes, so a ``job`` label of ours would arrive renamed ``exported_job``.

Labels are bounded — never a slot, a run id, a partition or an error text, whose number
grows without bound:

* ``job_name``: the jobs the application defines (for the ledger-read metrics, the jobs the
  ledger knows: retired jobs included, as many as were ever defined);
* ``trigger``: six values (schedule catch_up retry recovery manual backfill);
* ``status``: the attempt outcomes of ``STATUSES`` (seven values);
* ``duty``: the loop's duty names (a dozen, fixed in runner/worker/loop.py);
* ``plan``: at most ``MAX_PLANS`` backfill plans at a time (below), with ``cause`` (five
  values) and the plan ``status`` (six values).

An *attempt* is one execution of a run (a run is one job x slot x partition; a retry or a
takeover is a new attempt of the same run): the counters count attempts, and say so.

**From the ledger** (``LedgerCollector``, on a process started with ``--metrics-port``): the
job and backfill figures are read when scraped (at most once a second, whatever the scrape
rate, on a connection of their own with a 2 s statement timeout), so every process reports
the same fleet-wide values: aggregate them with ``max by (...)``, not ``sum``; the live lag
of a running plan is the process's own. A plan's id grows without bound over the months, so
only the plans not finished and those finished in the last ``FINISHED_KEEP`` seconds (10
minutes: long enough for a scrape to see the end) are reported, at most ``MAX_PLANS`` of
them, newest first; a finished plan's series then disappear from the endpoint by themselves
(there is nothing to remove). ``runner_ledger_metrics_up`` is 0 when the ledger could not be
read for a scrape: then none of the ledger-read metrics is reported.

Every metric, its type, labels and help: docs/reference/metrics.md, generated from this
module (scripts/gen_reference.py).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from runner.model.schedule import Schedule
from runner.sqlfiles import queries
from runner.store import ledger

log = logging.getLogger("runner.metrics")
Q = queries("metrics")

_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# a handler's duration, from a few milliseconds to hours: the slow-run alert compares
# quantiles of it, which a histogram can only tell within its buckets
_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600,
                     7200, 14400, 21600)
LIVE_WINDOW = 60.0  # seconds of live start lag kept for runner_backfill_live_lag_seconds
FINISHED_KEEP = 600.0  # seconds a finished plan stays on the endpoint
MAX_PLANS = 50
MIN_INTERVAL = 1.0  # seconds between two ledger reads of the collector
SUCCESS_WINDOW = 1000  # runs of a job looked at, newest first, for its last success
# an attempt's outcomes
STATUSES = ("succeeded", "failed", "dead", "timed_out", "released", "handed_off", "refused")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.started = Counter("runner_attempts_started", "Attempts started (a retry or a takeover is "
                               "another attempt of the same run)", ["job_name", "trigger"], registry=r)
        self.completed = Counter("runner_attempts_completed", "Attempts ended, by outcome",
                                 ["job_name", "status"], registry=r)
        self.duration = Histogram("runner_run_duration_seconds", "Handler duration of one attempt",
                                  ["job_name"], buckets=_DURATION_BUCKETS, registry=r)
        self.lag = Histogram("runner_schedule_lag_seconds", "Attempt start minus slot instant", ["job_name"],
                             buckets=_LAG_BUCKETS, registry=r)
        self.conflicts = Counter("runner_claim_conflicts", "Slots another process had claimed", ["job_name"],
                                 registry=r)
        self.takeovers = Counter("runner_takeovers", "Attempts abandoned by a lost owner, taken over here",
                                 ["job_name"], registry=r)
        self.last_success = Gauge("runner_last_success_timestamp_seconds", "Last recorded success",
                                  ["job_name"], registry=r)
        self.duty_failures = Counter("runner_duty_failures", "Loop duties that failed (retried)", ["duty"],
                                     registry=r)
        self.inflight = Gauge("runner_inflight_runs", "Runs claimed and not yet finished", registry=r)
        # fenced checkpoints (issue 33, runner/worker/checkpoints.py)
        self.checkpoints = Counter("runner_checkpoints",
                                   "Checkpoints committed by handlers (ctx.checkpoint)", ["job_name"],
                                   registry=r)
        self.handoffs = Counter("runner_handoffs", "Attempts handed off at a checkpoint because their "
                                "runner was shutting down (resumed by another runner)", ["job_name"],
                                registry=r)
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self._live: collections.deque[tuple[float, float]] = collections.deque(maxlen=20_000)
        self._live_lock = threading.Lock()

    def declare(self, job_names: Iterable[str]) -> None:
        """Start every job's counters at 0, so a rule's ``increase()`` sees the first event
        (a counter series born at 1 shows no increase)."""
        for name in job_names:
            for status in STATUSES:
                self.of(self.completed, name, status)
            self.of(self.takeovers, name)
            self.of(self.conflicts, name)
            self.of(self.checkpoints, name)
            self.of(self.handoffs, name)

    def observe_lag(self, job: str, seconds: float, trigger: str) -> None:
        """A claimed run's start lag: the histogram, and for live slots (trigger schedule)
        the recent window behind runner_backfill_live_lag_seconds."""
        self.observe_lags([(job, seconds, trigger)])

    def observe_lags(self, lags: Iterable[tuple[str, float, str]]) -> None:
        """``observe_lag`` for a claim's runs at once (job, seconds, trigger): each job's
        histogram child looked up once, the live window's lock and clock taken once."""
        live: list[float] = []
        histogram: Any = None
        last = None
        for job, seconds, trigger in lags:
            if job != last:
                histogram, last = self.of(self.lag, job), job
            histogram.observe(seconds)
            if trigger == "schedule":
                live.append(seconds)
        if live:
            mono = time.monotonic()
            with self._live_lock:
                self._live.extend((mono, seconds) for seconds in live)

    def live_lag_p99(self) -> float | None:
        """The p99 start lag of this process's live slots claimed in the last LIVE_WINDOW
        seconds; None when there were none."""
        since = time.monotonic() - LIVE_WINDOW
        with self._live_lock:
            while self._live and self._live[0][0] < since:
                self._live.popleft()
            values = sorted(v for _, v in self._live)
        if not values:
            return None
        return values[min(len(values) - 1, int(0.99 * len(values)))]

    def watch_ledger(self, open_conn: Callable[[], psycopg.Connection[Any]],
                     schedules: Mapping[str, Schedule] | None = None) -> LedgerCollector:
        """Report the ledger's figures (read at scrape time: the backfill plans, and for the
        jobs of ``schedules`` the slot after their last success, the resent effects) on this
        registry."""
        collector = LedgerCollector(open_conn, self.live_lag_p99, schedules=schedules)
        self.registry.register(collector)
        return collector

    def of(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once: the loop touches these for every run,
        and the labels are bounded (see the module docstring), so the cache is too."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        start_http_server(port, addr=addr, registry=self.registry)


class LedgerCollector(Collector):
    """The metrics read from the ledger when scraped (see the module docstring): backfill
    plans, the slot after each job's last success, resent effects. Its own connection; a
    failure yields runner_ledger_metrics_up 0 and opens the connection again at the next
    scrape."""

    def __init__(self, open_conn: Callable[[], psycopg.Connection[Any]],
                 live_lag: Callable[[], float | None] = lambda: None, keep: float = FINISHED_KEEP,
                 limit: int = MAX_PLANS, min_interval: float = MIN_INTERVAL,
                 schedules: Mapping[str, Schedule] | None = None) -> None:
        self._open = open_conn
        self._live_lag = live_lag
        self._schedules = dict(schedules or {})
        self._jobs: tuple[dict[str, datetime], dict[str, int], dict[str, int]] = ({}, {}, {})
        self.keep, self.limit, self.min_interval = keep, limit, min_interval
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        self._read_at = -float("inf")
        self._rows: list[dict[str, Any]] | None = None

    def describe(self) -> list[Metric]:
        return []  # no ledger read when registered

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def read(self) -> list[dict[str, Any]] | None:
        """The plans' rows (cached for min_interval seconds); None when the ledger failed."""
        with self._lock:
            if time.monotonic() - self._read_at < self.min_interval:
                return self._rows
            try:
                if self._conn is None or self._conn.closed or self._conn.broken:
                    self._conn = self._open()
                    # a short read: JIT compilation (which large row estimates trigger)
                    # would cost more than the query
                    self._conn.execute("SET statement_timeout = '2s'")
                    self._conn.execute("SET jit = off")
                self._rows = ledger.dict_rows(self._conn, Q["backfill_metrics"], {
                    "keep": self.keep, "limit": self.limit, "window": LIVE_WINDOW, "now": None})
                newest = ledger.dict_rows(self._conn, Q["newest_succeeded_slots"],
                                          {"job_names": sorted(self._schedules), "window": SUCCESS_WINDOW})
                resent = ledger.dict_rows(self._conn, Q["resent_effects"], {})
                dead = ledger.dict_rows(self._conn, Q["dead_runs"], {})
                self._jobs = ({r["job_name"]: self._due_after(r) for r in newest
                               if r["newest_success"] is not None or r["no_success_since"] is not None},
                              {r["job_name"]: int(r["resent"]) for r in resent},
                              {r["job_name"]: int(r["dead"]) for r in dead})
            except psycopg.Error as exc:
                log.warning("ledger metrics: %s: %s", type(exc).__name__, str(exc).strip()[:200])
                if self._conn is not None:
                    self._conn.close()
                self._conn, self._rows = None, None
            self._read_at = time.monotonic()
            return self._rows

    def _due_after(self, row: dict[str, Any]) -> datetime:
        """The slot due after the job's last success (or its oldest slot looked at, when
        none of them succeeded)."""
        if row["newest_success"] is None:
            return row["no_success_since"]  # type: ignore[no-any-return]
        return self._schedules[row["job_name"]].next_after(row["newest_success"])

    def collect(self) -> Iterator[Metric]:
        plans = self.read()
        up = GaugeMetricFamily("runner_ledger_metrics_up", "Whether the ledger could be read for the "
                               "ledger-read metrics of this scrape")
        up.add_metric([], 0.0 if plans is None else 1.0)
        yield up
        if plans is None:
            return
        newest, resent, dead = self._jobs
        due = GaugeMetricFamily("runner_slot_after_last_success_timestamp_seconds", "The slot after the "
                                "newest succeeded slot of the job (any partition), as a Unix time",
                                labels=["job_name"])
        for job_name, slot in sorted(newest.items()):
            due.add_metric([job_name], slot.timestamp())
        yield due
        effects = GaugeMetricFamily("runner_effects_resent", "Side effects sent more than once, now in "
                                    "the ledger", labels=["job_name"])
        for job_name, count in sorted(resent.items()):
            effects.add_metric([job_name], float(count))
        yield effects
        dead_runs = GaugeMetricFamily("runner_runs_dead", "Dead runs now (no attempt left, until an "
                                      "operator reruns, skips or cancels them)", labels=["job_name"])
        for job_name in sorted(set(dead) | set(self._schedules)):
            dead_runs.add_metric([job_name], float(dead.get(job_name, 0)))
        yield dead_runs
        names = ["plan", "job_name"]

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=[*names, *extra])

        expected = gauge("runner_backfill_expected_runs", "Runs of the plan (slot x partitions)")
        remaining = gauge("runner_backfill_remaining_runs", "Runs of the plan pending, running or "
                          "waiting for a retry")
        rate = gauge("runner_backfill_runs_per_second", "Runs of the plan finished per second over "
                     "the last minute")
        eta = gauge("runner_backfill_eta_seconds", "Estimated seconds left: remaining runs / rate")
        failures = gauge("runner_backfill_failures", "Runs of the plan failed or dead now")
        pauses = CounterMetricFamily("runner_backfill_pauses", "Times the plan paused, by cause",
                                     labels=[*names, "cause"])
        paused = gauge("runner_backfill_paused", "1 while the plan is paused, by cause", ("cause",))
        status = gauge("runner_backfill_status", "1 for the plan's status", ("status",))
        verified = gauge("runner_backfill_verified", "1 when the plan's verification passed, 0 when "
                         "it failed")
        live = gauge("runner_backfill_live_lag_seconds", "This process's p99 start lag of live slots "
                     "in the last minute, while the plan runs")
        live_p99 = self._live_lag()
        for p in plans:
            labels = [str(p["id"]), p["job_name"]]
            expected.add_metric(labels, float(p["expected_runs"]))
            remaining.add_metric(labels, float(p["remaining"]))
            failures.add_metric(labels, float(p["failures"]))
            per_second = float(p["finished_recently"]) / max(1.0, min(LIVE_WINDOW, float(p["age_seconds"])))
            rate.add_metric(labels, per_second)
            if p["remaining"] == 0:
                eta.add_metric(labels, 0.0)
            elif per_second > 0 and p["status"] == "running":
                eta.add_metric(labels, p["remaining"] / per_second)
            for cause, times in sorted((p["pauses"] or {}).items()):
                pauses.add_metric([*labels, cause], float(times))
            if p["status"] == "paused":
                paused.add_metric([*labels, p["pause_cause"] or "other"], 1.0)
            status.add_metric([*labels, p["status"]], 1.0)
            if p["verify_status"] in ("passed", "failed", "error"):
                verified.add_metric(labels, 1.0 if p["verify_status"] == "passed" else 0.0)
            if p["status"] == "running" and live_p99 is not None:
                live.add_metric(labels, live_p99)
        yield from (expected, remaining, rate, eta, failures, pauses, paused, status, verified, live)
