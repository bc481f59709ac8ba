-- runner.run_stages: multi-stage completion, per run (for example generated, then delivered).
--
-- One row per run and stage, for the effects that carry a stage (runner.effects.stage);
-- effects without a stage are in runner.effects only. position orders a run's stages by when
-- each was first planned or sent. A stage of several effects (say, delivered to three
-- recipients) shows its least settled status: unknown, then sent, failed, planned; it is
-- confirmed only when every one of its effects is, and confirmed_at is then the last
-- confirmation.
--
--   SELECT stage, status, effects, confirmed FROM runner.run_stages
--   WHERE run_id = 42 ORDER BY position;
CREATE OR REPLACE VIEW runner.run_stages AS
SELECT r.id AS run_id,
       r.job_name,
       r.schedule_slot,
       r.partition_key,
       r.status AS run_status,
       row_number() OVER (PARTITION BY r.id ORDER BY min(e.created_at), e.stage) AS position,
       e.stage,
       CASE WHEN bool_or(e.status = 'unknown') THEN 'unknown'
            WHEN bool_or(e.status = 'sent') THEN 'sent'
            WHEN bool_or(e.status = 'failed') THEN 'failed'
            WHEN bool_or(e.status = 'planned') THEN 'planned'
            ELSE 'confirmed'
       END AS status,
       count(*) AS effects,
       count(*) FILTER (WHERE e.status = 'confirmed') AS confirmed,
       sum(e.send_count) AS sends,
       min(e.created_at) AS first_at,
       CASE WHEN bool_and(e.status = 'confirmed') THEN max(e.confirmed_at) END AS confirmed_at,
       max(e.updated_at) AS updated_at
FROM runner.effects e
JOIN runner.job_runs r ON r.id = e.run_id
WHERE e.stage IS NOT NULL
GROUP BY r.id, e.stage;
