-- 0008_watch, down
ALTER TABLE runner.attempts DROP COLUMN IF EXISTS last_heartbeat;
ALTER TABLE runner.attempts DROP COLUMN IF EXISTS traceback;
ALTER TABLE runner.instances DROP COLUMN IF EXISTS lanes;
