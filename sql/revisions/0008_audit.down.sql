-- Revision 0008_audit, downgrade.
DROP VIEW IF EXISTS runner.violations;
DROP FUNCTION IF EXISTS runner.check_v1(timestamptz, timestamptz, interval);
