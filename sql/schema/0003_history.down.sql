-- 0003_history, down: what it added goes, with the trigger that writes its columns (a live
-- object); every live object is applied again at the next upgrade (their checksums go).
DROP TRIGGER IF EXISTS job_schedules_stamp ON runner.job_schedules;
DROP FUNCTION IF EXISTS runner.job_schedules_stamp_v1();
DROP TABLE runner.effect_keys;
ALTER TABLE runner.instances DROP COLUMN definitions;
ALTER TABLE runner.job_schedules DROP COLUMN explained_by, DROP COLUMN recorded_at, DROP COLUMN fingerprint;
DELETE FROM runner.sql_objects;
