-- 0012_pauseevery, down
ALTER TABLE runner.backfills DROP COLUMN IF EXISTS pause_every;
