-- 0023_settings down: runner.alerts is back as 0016_health shipped it (applied before this
-- file), so nothing calls the function any more.
DROP FUNCTION IF EXISTS runner.interval_setting_v1(text);
