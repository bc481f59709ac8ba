-- runner.backfill_plans: every backfill plan with its progress, pauses and verification,
-- one row a plan (revision 0013_verify). Plain SQL on the ledger, usable from psql; shown
-- by `runner status` (the plans running, paused, or finished in the last 24 hours).
--
--   expected_runs, done, remaining (pending + running + failed), failures (failed + dead)
--   pause_cause   the cause of the pause the plan is in: max_failures, condition (its
--                 pause_when returned true), condition_error (it failed), operator, other
--   pauses        how often the plan paused, by cause (a JSON object)
--   verify_status passed | failed | error | not_configured, NULL until verified
--   verify_min_passing, verify_passing
--                 for verification kinds (runner/verification.py): how many kinds must
--                 pass, and how many did (NULL for a job's single callable or SQL check)
--   verify_kinds  the kinds' outcomes: [{kind, name, passed, outcome, expected, observed,
--                 detail}] (NULL for a single check)
CREATE OR REPLACE VIEW runner.backfill_plans AS
SELECT b.id, b.job_name, b.status, b.lane, b.range_from, b.range_to, b.expected_runs,
       p.done, p.remaining, p.failures, b.pause_reason, b.pause_cause, b.pauses,
       b.verify_status,
       (b.verify_detail ->> 'min_passing')::int AS verify_min_passing,
       (b.verify_detail ->> 'passing')::int AS verify_passing,
       b.verify_detail -> 'kinds' AS verify_kinds,
       b.verified_at, b.created_at, b.finished_at, b.replay_group_id
FROM runner.backfills b
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE r.status NOT IN ('pending', 'running', 'failed')) AS done,
           count(*) FILTER (WHERE r.status IN ('pending', 'running', 'failed')) AS remaining,
           count(*) FILTER (WHERE r.status IN ('failed', 'dead')) AS failures
    FROM runner.job_runs r
    WHERE r.replay_group_id = b.replay_group_id
) p;
