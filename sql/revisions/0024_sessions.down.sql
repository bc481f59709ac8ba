-- Revision 0024_sessions, downgrade: the trigger and the column go (the functions and the view
-- as 0023 had them are applied before this file, since runner_sessions_v1 reads the column).
DROP TRIGGER IF EXISTS instances_login ON runner.instances;
DROP FUNCTION IF EXISTS runner.instances_login_v1();
ALTER TABLE runner.instances DROP COLUMN IF EXISTS login;
