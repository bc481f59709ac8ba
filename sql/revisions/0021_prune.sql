-- 0021_prune (expand only): the retention sweep's per-job cursor. runner.prune_v1 reads a
-- bounded number of a job's runs per pass, from just above this slot up; at the top of the
-- range it starts again from the bottom (NULL). Runners that predate it never read it.
ALTER TABLE runner.gap_watermarks ADD COLUMN IF NOT EXISTS prune_cursor timestamptz;
COMMENT ON COLUMN runner.gap_watermarks.prune_cursor IS
    'runner.prune_v1: the slot at or below which the current sweep has looked at every run (NULL: the sweep starts at the bottom)';
