-- 0003_history, down: what it added goes, with what reads it (the trigger that writes its
-- columns; the views that read them, CASCADE): the live objects of the code that downgrades
-- are applied again at its next upgrade (their checksums go).
DROP TRIGGER IF EXISTS job_schedules_stamp ON runner.job_schedules;
DROP FUNCTION IF EXISTS runner.job_schedules_stamp_v1();
DROP TABLE runner.effect_keys CASCADE;
ALTER TABLE runner.instances DROP COLUMN definitions CASCADE;
ALTER TABLE runner.job_schedules DROP COLUMN explained_by CASCADE, DROP COLUMN recorded_at CASCADE,
    DROP COLUMN fingerprint CASCADE;
DELETE FROM runner.sql_objects;
