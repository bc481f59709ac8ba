-- Revision 0009_web, downgrade: runner.job_health as revision 0004_operators shipped it.
DROP VIEW IF EXISTS runner.job_health;
