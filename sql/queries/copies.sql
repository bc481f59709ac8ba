-- Named statements of a copied ledger's adoption (runner/copies.py).

-- name: adopt_impact
-- runner.ledger_copy_v1's row and what adopting would let the runners go on with: plans not
-- finished, runs queued or failed, runs running, and the instance rows adopting would stop
-- (not stopped, their lock session not connected to this database).
SELECT c.*,
       (SELECT count(*) FROM runner.backfills b WHERE b.status IN ('planned', 'running')) AS plans_running,
       (SELECT count(*) FROM runner.job_runs r WHERE r.status IN ('pending', 'failed')) AS runs_queued,
       (SELECT count(*) FROM runner.job_runs r WHERE r.status = 'running') AS runs_running,
       (SELECT count(*) FROM runner.instances i
        WHERE i.stopped_at IS NULL
          AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                          WHERE a.pid = i.backend_pid AND a.datname = current_database())) AS instances
FROM runner.ledger_copy_v1() c

-- name: adopt
-- runner.adopt_ledger_v1: the identity recorded, the source's instances stopped, the request row.
SELECT f.request_id, f.instances_stopped
FROM runner.adopt_ledger_v1(%(who)s, %(reason)s) AS f
