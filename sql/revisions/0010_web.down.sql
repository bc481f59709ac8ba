-- Revision 0010_web, downgrade: runner.job_health as revision 0009_retention shipped it.
DROP VIEW IF EXISTS runner.job_health;
