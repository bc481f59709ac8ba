-- 0011_resume, down
ALTER TABLE runner.backfills DROP COLUMN IF EXISTS resume;
