"""Shares: runners serving the same job claim their own share of each slot first, and the
others' shares only when those are still unclaimed ``steal_after`` seconds later."""

from __future__ import annotations

from contextlib import ExitStack
from datetime import timedelta
from typing import Any
from uuid import uuid4

import psycopg

from runner import JobContext, Runner
from tests.support import eventually, rows, running_worker, scalar

PARTITIONS = [f"t{i:02d}" for i in range(40)]


def running(app: Runner, url: str, **config: Any) -> Any:
    return running_worker(app, url, **{"workers": 8, "instance_heartbeat": 1.0, **config})


def fanout_app(name: str = "fanout") -> Runner:
    app = Runner()

    @app.job(name, every="1s", partitions=PARTITIONS)
    def handler(ctx: JobContext) -> None:
        pass

    return app


def share_of(idempotency_key: str, runners: int) -> int:
    return int(idempotency_key[:8], 16) % runners


def test_each_runner_claims_its_own_share(db_url: str) -> None:
    """Two runners on one job: once both see each other, every run of a slot is owned by the
    runner whose share it is, and none had to be claimed from another's share."""
    with ExitStack() as stack:
        # steal_after is long: any run owned by the other runner would be a share not honoured
        a = stack.enter_context(running(fanout_app(), db_url, steal_after=60.0))
        b = stack.enter_context(running(fanout_app(), db_url, steal_after=60.0))
        eventually(lambda: "fanout" in a.claims.shares and "fanout" in b.claims.shares, message="both see two runners")
        since = scalar(db_url, "SELECT now() + interval '1 second'")
        # three whole slots: counting slots with any success let a slot still finishing at
        # shutdown count as one (112 of 120 runs seen once on a loaded machine)
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM (SELECT schedule_slot FROM runner.job_runs"
                                          " WHERE schedule_slot > %s AND status = 'succeeded'"
                                          " GROUP BY 1 HAVING count(*) = %s) s", (since, len(PARTITIONS))) >= 3,
                   message="three slots after both shared out")
        instances = sorted([a.owner.instance, b.owner.instance])
        assert (a.claims.shares["fanout"], b.claims.shares["fanout"]) == (
            (instances.index(a.owner.instance), 2), (instances.index(b.owner.instance), 2))
        stolen = a.stats["stolen"] + b.stats["stolen"]
    runs = rows(db_url, "SELECT r.schedule_slot, r.idempotency_key, a.owner_instance FROM runner.job_runs r"
                        " JOIN runner.attempts a ON a.run_id = r.id AND a.attempt = 1"
                        " WHERE r.schedule_slot > %s", (since,))
    slots = {slot for slot, _, _ in runs}
    assert len(runs) >= 3 * len(PARTITIONS)
    assert all(sum(1 for s, _, _ in runs if s == slot) == len(PARTITIONS) for slot in slots
               if slot < max(slots))  # the newest slot may be cut by the shutdown
    assert [(key, owner) for _, key, owner in runs if owner != instances[share_of(key, 2)]] == []
    assert {owner for _, _, owner in runs} == set(instances)  # both had a share
    assert stolen == 0


def test_a_silent_runners_share_is_claimed_after_steal_after(db_url: str) -> None:
    """A runner listed as live (fresh heartbeat) that claims nothing: its share of every slot
    is claimed by the other runner steal_after seconds late; nothing is missed. Jobs the silent
    runner does not serve are not shared out at all."""
    silent = uuid4()
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO runner.instances (instance_id, host, pid, lock_namespace, heartbeat_at, jobs)"
                     " VALUES (%s, 'elsewhere', 1, 21077, now() + interval '1 hour', ARRAY['fanout'])",
                     (silent,))
    app = fanout_app()

    @app.job("alone", every="1s")
    def alone(ctx: JobContext) -> None:
        pass

    with running(app, db_url, steal_after=0.3) as worker:
        eventually(lambda: "fanout" in worker.claims.shares, message="the worker sees the silent runner")
        assert "alone" not in worker.claims.shares
        since = scalar(db_url, "SELECT now() + interval '1 second'")
        eventually(lambda: scalar(db_url, "SELECT count(*) FROM runner.job_runs WHERE job_name = 'fanout'"
                                          " AND schedule_slot > %s AND status = 'succeeded'",
                                  (since,)) >= 3 * len(PARTITIONS), timeout=20, message="three whole slots")
        mine = sorted([worker.owner.instance, silent]).index(worker.owner.instance)
        assert worker.claims.shares["fanout"] == (mine, 2)
        assert worker.stats["stolen"] > 0
    runs = rows(db_url, "SELECT r.schedule_slot, r.idempotency_key, a.started_at - r.schedule_slot,"
                        " a.owner_instance FROM runner.job_runs r"
                        " JOIN runner.attempts a ON a.run_id = r.id AND a.attempt = 1"
                        " WHERE r.job_name = 'fanout' AND r.schedule_slot > %s", (since,))
    complete = [slot for slot in {r[0] for r in runs}
                if sum(1 for r in runs if r[0] == slot) == len(PARTITIONS)]
    assert len(complete) >= 3
    assert {r[3] for r in runs} == {worker.owner.instance}
    others = [lag for slot, key, lag, _ in runs if share_of(key, 2) != mine]
    own = [lag for slot, key, lag, _ in runs if share_of(key, 2) == mine]
    assert others and own
    # the silent runner's share waited steal_after; this runner's own share did not
    assert min(others) >= timedelta(seconds=0.29)
    assert sorted(own)[len(own) // 2] < timedelta(seconds=0.3)


def test_a_runner_whose_lock_session_is_gone_has_no_share(db_url: str) -> None:
    """A runner killed outright keeps a fresh-looking heartbeat for a while, but its lock
    session is gone: it is left out of the shares at once, so its share is never late."""
    gone = psycopg.connect(db_url, autocommit=True)
    gone_pid = gone.info.backend_pid
    gone.close()
    eventually(lambda: scalar(db_url, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (gone_pid,)) == 0)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO runner.instances (instance_id, host, pid, backend_pid, lock_namespace,"
                     " heartbeat_at, jobs) VALUES (%s, 'elsewhere', 1, %s, 21077, now() + interval '1 hour',"
                     " ARRAY['fanout'])", (uuid4(), gone_pid))
    with running(fanout_app(), db_url, steal_after=60.0) as worker:
        since = scalar(db_url, "SELECT now() + interval '1 second'")
        whole = ("SELECT count(*) FROM (SELECT schedule_slot FROM runner.job_runs WHERE schedule_slot > %s"
                 " AND status = 'succeeded' GROUP BY 1 HAVING count(*) = %s) s")
        eventually(lambda: scalar(db_url, whole, (since, len(PARTITIONS))) >= 2,
                   timeout=20, message="two whole slots, none waiting 60 s for a dead runner's share")
        assert worker.claims.shares == {}
        assert worker.stats["stolen"] == 0
