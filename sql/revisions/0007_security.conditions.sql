-- Revision 0007_security, the pause condition's part (runner/conditions.py): who may call
-- runner.pause_condition_v1 (sql/functions/pause_condition_v1.sql, applied just before).
-- Not PUBLIC: sql/roles.sql grants it to the worker and operator roles, and makes the
-- condition role its owner.
REVOKE ALL ON FUNCTION runner.pause_condition_v1(text) FROM PUBLIC;
