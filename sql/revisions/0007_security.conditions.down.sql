-- Revision 0007_security, downgrade of the pause condition's part.
DROP FUNCTION IF EXISTS runner.pause_condition_v1(text);
