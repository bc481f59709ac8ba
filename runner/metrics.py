"""Prometheus metrics of one runner process (``runner start --metrics-port P``).

The endpoint has no authentication: it listens on ``--metrics-host`` (default 127.0.0.1, this
machine only); a scraper on another machine needs the address it should be reachable on
(or 0.0.0.0 / :: for every address, behind a firewall).

Labels are bounded: ``job`` and ``status`` (and ``trigger``, six values) — never a slot, a
run id or a partition, whose number grows without bound.

| metric | type | labels |
|---|---|---|
| runner_runs_started_total | counter | job, trigger |
| runner_runs_completed_total | counter | job, status (succeeded failed dead timed_out released refused) |
| runner_run_duration_seconds | histogram | job |
| runner_schedule_lag_seconds | histogram | job (attempt start minus slot instant, schedule trigger) |
| runner_claim_conflicts_total | counter | job |
| runner_takeovers_total | counter | job |
| runner_last_success_timestamp_seconds | gauge | job |
| runner_inflight_runs | gauge | |
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.started = Counter("runner_runs_started", "Attempts started", ["job", "trigger"], registry=r)
        self.completed = Counter("runner_runs_completed", "Attempts ended, by outcome", ["job", "status"],
                                 registry=r)
        self.duration = Histogram("runner_run_duration_seconds", "Handler duration", ["job"], registry=r)
        self.lag = Histogram("runner_schedule_lag_seconds", "Attempt start minus slot instant", ["job"],
                             buckets=_LAG_BUCKETS, registry=r)
        self.conflicts = Counter("runner_claim_conflicts", "Slots another process had claimed", ["job"],
                                 registry=r)
        self.takeovers = Counter("runner_takeovers", "Runs taken over from a lost owner", ["job"], registry=r)
        self.last_success = Gauge("runner_last_success_timestamp_seconds", "Last recorded success",
                                  ["job"], registry=r)
        self.duty_failures = Counter("runner_duty_failures", "Loop duties that failed (retried)", ["duty"],
                                     registry=r)
        self.inflight = Gauge("runner_inflight_runs", "Runs claimed and not yet finished", registry=r)
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}

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
