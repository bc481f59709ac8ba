-- Undo revision 0004_operators.

DROP VIEW IF EXISTS runner.alerts;
DROP VIEW IF EXISTS runner.job_health;

DROP INDEX IF EXISTS runner.attempts_abandoned;
DROP INDEX IF EXISTS runner.job_runs_dead;
DROP INDEX IF EXISTS runner.job_runs_succeeded;

DROP TABLE IF EXISTS runner.requests;
DROP FUNCTION IF EXISTS runner.requests_append_only();
