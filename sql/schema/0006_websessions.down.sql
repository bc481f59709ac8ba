-- 0006_websessions, down
DROP TABLE IF EXISTS runner.web_sessions_ended;
