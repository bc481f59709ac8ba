-- 0008_watch (issue 30, points 1 and 4). Expand only: nullable columns that older runners
-- leave NULL.
--
-- Why an attempt failed, beyond one line: two columns of runner.attempts, written only by
-- runner.finish_attempts_v1.
--   traceback         the failed attempt's traceback, redacted (runner.settings.redact) and
--                     bounded (runner/attempt.py: TRACEBACK_LIMIT characters, the innermost
--                     frames kept); shown on the console's run page and by `runner runs
--                     --show ID`, never in metrics or the log's one line
--   last_heartbeat    what the handler last reported by ctx.heartbeat() before it failed:
--                     {"at", "processed", "failed", "beats"} (NULL: it never beat)
ALTER TABLE runner.attempts ADD COLUMN IF NOT EXISTS traceback text;
ALTER TABLE runner.attempts ADD COLUMN IF NOT EXISTS last_heartbeat jsonb;
COMMENT ON COLUMN runner.attempts.traceback IS 'the failed attempt''s traceback, redacted and bounded (revision 0008_watch)';
COMMENT ON COLUMN runner.attempts.last_heartbeat IS 'the handler''s last ctx.heartbeat() before the attempt ended: at, processed, failed, beats (revision 0008_watch)';

-- Who is alive (point 1): the lanes a runner process serves and its handler slots in each
-- ({"realtime": 10, "bulk": 2}), recorded when it registers (the console's Runners page).
ALTER TABLE runner.instances ADD COLUMN IF NOT EXISTS lanes jsonb;
COMMENT ON COLUMN runner.instances.lanes IS 'the lanes this runner process serves and its handler slots in each (revision 0008_watch)';
