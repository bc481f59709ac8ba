"""What a runner process is told (``LoopConfig``, the options of ``runner start``) and how each
of its parts opens a connection of its own (``connect``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from runner.model.jobs import Retention
from runner.worker.fanout import MAX_PARTITIONS
from runner.worker.gapscan import MAX_BUDGET, TARGET_SECONDS


@dataclass(frozen=True)
class LoopConfig:
    workers: int = 10
    max_inflight: int = 0  # runs claimed and not yet finished; 0 means 2 x workers
    poll_interval: float = 1.0  # seconds between polls for retries, queued runs, takeovers
    claim_batch: int = 1000  # rows per claim statement at most
    finish_batch: int = 500  # outcomes per finish statement at most
    instance_heartbeat: float = 5.0
    grace: float = 30.0  # seconds running handlers get at shutdown before their runs are released
    watermark_interval: float = 60.0  # seconds between advances of the gap-scan watermarks
    watermark_target: float = TARGET_SECONDS  # seconds one call of the advance should take, about
    watermark_max_probes: int = MAX_BUDGET  # slot x partition probes of one call of the advance, at most
    steal_after: float = 0.5  # seconds before other runners' unclaimed shares of a slot are claimed
    max_backlog: int = 0  # claims queued before fan-out of later slots waits; 0: 10 x claim_batch
    max_partitions: int = MAX_PARTITIONS  # per slot; more fails the slot (recorded, alerting)
    prometheus_url: str | None = None  # where backfill pause conditions' Prometheus queries go
    condition_url: str | None = None  # a hot standby of the ledger where SQL pause conditions run
    async_workers: int = 0  # async def handlers running at once (runner/aio.py); 0 means workers
    retention_default: Retention | None = None  # jobs without retention=; None: never pruned
    prune_interval: float = 60.0  # seconds between passes of the retention duty
    prune_batch: int = 1000  # runs pruned per pass at most
    lanes: tuple[str, ...] | None = None  # the lanes this process serves; None: every lane
    lane_slots: tuple[tuple[str, int], ...] = ()  # handler slots per lane (runner/worker/lanes.py)

    @property
    def inflight_cap(self) -> int:
        return self.max_inflight or 2 * self.workers

    @property
    def backlog_cap(self) -> int:
        return self.max_backlog or 10 * self.claim_batch


def connect(url: str, **kw: Any) -> psycopg.Connection[Any]:
    conn = psycopg.connect(url, autocommit=True, application_name="runner", **kw)
    conn.execute("SET TIME ZONE 'UTC'")
    conn.execute("SET jit = off")  # short statements by key: compiling them never pays
    return conn


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
