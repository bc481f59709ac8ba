-- 0021_prune down: the cursor goes; runner.prune_v1 as 0009_retention shipped it comes back
-- (sql/revisions/0009_retention.prune.sql, applied after this file).
ALTER TABLE runner.gap_watermarks DROP COLUMN IF EXISTS prune_cursor;
