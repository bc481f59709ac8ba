-- Named statements of the metrics endpoint (runner/metrics.py): the backfill plans it
-- reports, read at scrape time.

-- name: backfill_metrics
-- The plans not finished and those finished in the last `keep` seconds (newest first, at
-- most `limit`), with their runs remaining (pending, running, failed: waiting for a retry)
-- and failing (failed, dead) — each counted on the replay group's (replay_group_id, status)
-- index, so the cost follows the runs left and failed, not the plan's size — and how many finished
-- in the last `window` seconds (succeeded or dead), on the job's indexes by finish time.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), plans AS (
    SELECT b.*
    FROM runner.backfills b CROSS JOIN clock c
    WHERE b.status IN ('planned', 'running', 'paused')
       OR b.finished_at > c.now - make_interval(secs => %(keep)s)
    ORDER BY b.id DESC
    LIMIT %(limit)s
)
SELECT p.id, p.job_name, p.status, p.expected_runs, p.pause_cause, p.pauses, p.verify_status,
       (SELECT count(*) FROM runner.job_runs r
        WHERE r.replay_group_id = p.replay_group_id
          AND r.status IN ('pending', 'running', 'failed')) AS remaining,
       (SELECT count(*) FROM runner.job_runs r
        WHERE r.replay_group_id = p.replay_group_id AND r.status IN ('failed', 'dead')) AS failures,
       extract(epoch FROM c.now - p.created_at)::float8 AS age_seconds,
       (SELECT count(*) FROM runner.job_runs r
        WHERE r.job_name = p.job_name AND r.status = 'succeeded'
          AND r.finished_at > c.now - make_interval(secs => %(window)s)
          AND r.replay_group_id = p.replay_group_id)
     + (SELECT count(*) FROM runner.job_runs r
        WHERE r.job_name = p.job_name AND r.status = 'dead'
          AND r.finished_at > c.now - make_interval(secs => %(window)s)
          AND r.replay_group_id = p.replay_group_id) AS finished_recently
FROM plans p
CROSS JOIN clock c
ORDER BY p.id DESC

-- name: newest_succeeded_slots
-- Per job of `job_names`, among its newest `window` runs (by slot, on the business key
-- (job_name, schedule_slot, partition_key), walked backwards): the newest slot with a succeeded
-- run (any partition) — the walk stops at it, so the cost follows the runs since the last
-- success — or, when none of them succeeded, the oldest of their slots (no success since at
-- least then; a bounded read for a job that keeps failing). A job with no run has no row.
SELECT j.job_name, s.slot AS newest_success,
       CASE WHEN s.slot IS NULL THEN (
           SELECT min(w.schedule_slot)
           FROM (SELECT r.schedule_slot FROM runner.job_runs r WHERE r.job_name = j.job_name
                 ORDER BY r.schedule_slot DESC LIMIT %(window)s) w
       ) END AS no_success_since
FROM unnest(%(job_names)s::text[]) AS j(job_name)
LEFT JOIN LATERAL (
    SELECT w.schedule_slot AS slot
    FROM (SELECT r.schedule_slot, r.status FROM runner.job_runs r WHERE r.job_name = j.job_name
          ORDER BY r.schedule_slot DESC LIMIT %(window)s) w
    WHERE w.status = 'succeeded'
    LIMIT 1
) s ON true;

-- name: resent_effects
-- Side effects sent more than once, per job (runner.alert_effect_duplicate's rows), on the
-- partial index effects_resent.
SELECT e.job_name, count(*) AS resent
FROM runner.effects e
WHERE e.send_count > 1
GROUP BY e.job_name;

-- name: dead_runs
-- Dead runs now, per job (runner.alert_dead's rows: until an operator reruns, skips or
-- cancels them), on the partial index job_runs_dead.
SELECT r.job_name, count(*) AS dead
FROM runner.job_runs r
WHERE r.status = 'dead'
GROUP BY r.job_name;
