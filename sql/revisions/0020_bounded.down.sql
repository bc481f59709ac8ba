-- 0020_bounded down: the watermark advance as 0009_retention shipped it comes back
-- (sql/revisions/0009_retention.advance_watermarks.sql, applied after this file), and v2 goes.
DROP FUNCTION IF EXISTS runner.advance_watermarks_v2(timestamptz, interval, integer, boolean);
