-- runner.job_schedules_stamp_v1(): every history row is stamped when it is written, whoever
-- writes it: its fingerprint, the instant it was recorded (the transaction's now()), and what
-- explains it. The writer never chooses any of the three (a value it gives is overwritten):
--   * runner.sync_schedule_v1 (the only writer a runner has, SECURITY DEFINER as the schema
--     owner) hands its explanation over in the transaction-local setting
--     runner.history_explanation ('first sync', 'sync', 're-asserted ...'); it is taken only
--     when the writing role is the schema owner (a member of it: a superuser too), so no
--     other role can name its row's explanation;
--   * any other INSERT (a DBA, a migration, a runner of revision 0002_objects or earlier,
--     which appended with a plain INSERT where the worker role still had that privilege):
--     'append' when the row is in force from now on (valid_from at or after now()) and is the
--     job's definition in runner.jobs, or is the job's first row at its track_from; else
--     'schema owner' when the writing role is the schema owner; else NULL.
-- runner.check_v1 (history_unexplained) reports a NULL explanation, and any row dated before
-- it was recorded that is not a job's first row nor a re-assertion within its 60 s: so a row
-- back-dated into the past hides no missed slot from the audit, whoever wrote it, a superuser
-- included (issue 28, point 1: a worker login dating "every 100 years" a second after
-- track_from hid 48 missed slots; since then the worker role has no INSERT on the table).
CREATE OR REPLACE FUNCTION runner.job_schedules_stamp_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    owner_oid oid := (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'runner');
    given text := nullif(pg_catalog.current_setting('runner.history_explanation', true), '');
BEGIN
    NEW.fingerprint := runner.schedule_fingerprint_v1(NEW.schedule_kind, NEW.cron, NEW.every_interval,
                                                      NEW.timezone, NEW.partitions, NEW.dynamic_partitions);
    NEW.recorded_at := pg_catalog.now();
    IF given IS NOT NULL AND pg_catalog.pg_has_role(current_user, owner_oid, 'MEMBER') THEN
        NEW.explained_by := given;
    ELSIF EXISTS (SELECT 1 FROM runner.jobs j
                  WHERE j.job_name = NEW.job_name AND j.retired_at IS NULL
                    AND ((NEW.valid_from >= pg_catalog.now()
                          AND (j.schedule_kind, j.cron, j.every_interval, j.timezone, j.partitions,
                               j.dynamic_partitions)
                              IS NOT DISTINCT FROM
                              (NEW.schedule_kind, NEW.cron, NEW.every_interval, NEW.timezone,
                               NEW.partitions, NEW.dynamic_partitions))
                         OR (NEW.valid_from = j.track_from
                             AND NOT EXISTS (SELECT 1 FROM runner.job_schedules s
                                             WHERE s.job_name = NEW.job_name)))) THEN
        NEW.explained_by := 'append';
    ELSIF pg_catalog.pg_has_role(current_user, owner_oid, 'MEMBER') THEN
        NEW.explained_by := 'schema owner';
    ELSE
        NEW.explained_by := NULL;
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER job_schedules_stamp BEFORE INSERT ON runner.job_schedules
    FOR EACH ROW EXECUTE FUNCTION runner.job_schedules_stamp_v1();
