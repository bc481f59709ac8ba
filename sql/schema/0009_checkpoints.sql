-- 0009_checkpoints (issue 33): fenced checkpoints of long jobs (runner/checkpoints.py).
--
-- job_runs: the run's last committed checkpoint, written only by runner.checkpoint_v1 in the
-- handler's ctx.db transaction while the attempt holds the run's fence: its state (JSON, at
-- most 64 KiB), when, by which fence, its size in bytes and the handler's one-line summary;
-- `checkpoints` counts every checkpoint the run ever committed (never reset: an operator's
-- re-queue from scratch clears the state, not the count).
-- attempts.checkpoints_before: the run's checkpoint count when the attempt took the fence
-- (runner.start_attempts_v1, under the run's row lock); runner check compares it with the
-- run's to find a checkpoint committed by a fence that no longer owned the run.
-- attempts.status may be 'handed_off': a checkpointing handler stopped by a runner's shutdown
-- after a committed checkpoint (the run is released, uncounted, for another runner).
-- All columns are nullable or have a constant default (no table rewrite); the widened check is
-- added NOT VALID and validated after, which does not block writes.
ALTER TABLE runner.job_runs
    ADD COLUMN IF NOT EXISTS checkpoint jsonb,
    ADD COLUMN IF NOT EXISTS checkpoint_at timestamptz,
    ADD COLUMN IF NOT EXISTS checkpoint_fence bigint,
    ADD COLUMN IF NOT EXISTS checkpoint_bytes integer,
    ADD COLUMN IF NOT EXISTS checkpoint_summary text,
    ADD COLUMN IF NOT EXISTS checkpoints integer NOT NULL DEFAULT 0;
ALTER TABLE runner.attempts
    ADD COLUMN IF NOT EXISTS checkpoints_before integer NOT NULL DEFAULT 0;
ALTER TABLE runner.attempts DROP CONSTRAINT IF EXISTS attempts_status_check;
ALTER TABLE runner.attempts ADD CONSTRAINT attempts_status_check CHECK (status = ANY (ARRAY[
    'running', 'succeeded', 'failed', 'dead', 'timed_out', 'abandoned', 'released', 'stale',
    'handed_off'])) NOT VALID;
ALTER TABLE runner.attempts VALIDATE CONSTRAINT attempts_status_check;
