-- 0009_checkpoints, down: handed_off attempts become released (what a runner of 0005_plans
-- records for a run given back at shutdown), then the columns go.
UPDATE runner.attempts SET status = 'released' WHERE status = 'handed_off';
ALTER TABLE runner.attempts DROP CONSTRAINT IF EXISTS attempts_status_check;
ALTER TABLE runner.attempts ADD CONSTRAINT attempts_status_check CHECK (status = ANY (ARRAY[
    'running', 'succeeded', 'failed', 'dead', 'timed_out', 'abandoned', 'released', 'stale']));
ALTER TABLE runner.attempts DROP COLUMN IF EXISTS checkpoints_before;
ALTER TABLE runner.job_runs
    DROP COLUMN IF EXISTS checkpoint,
    DROP COLUMN IF EXISTS checkpoint_at,
    DROP COLUMN IF EXISTS checkpoint_fence,
    DROP COLUMN IF EXISTS checkpoint_bytes,
    DROP COLUMN IF EXISTS checkpoint_summary,
    DROP COLUMN IF EXISTS checkpoints;
