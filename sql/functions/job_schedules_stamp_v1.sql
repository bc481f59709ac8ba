-- runner.job_schedules_stamp_v1(): every history row is stamped when it is written, whoever
-- writes it: its fingerprint and the instant it was recorded, and what explains it.
--   * the schema owner (its SECURITY DEFINER functions, runner.sync_schedule_v1 among them,
--     the migrations, a DBA): the explanation it gives, 'schema owner' when it gives none;
--   * anyone else (a runner of revision 0025 or earlier appends with a plain INSERT, its
--     record_schedule statement): 'append' when the row is in force from now on (valid_from
--     at or after the transaction's now()) and is the job's definition in runner.jobs, or is
--     the job's first row at its track_from; otherwise NULL. So a row back-dated into the
--     past (issue 28, point 1: a worker login dating "every 100 years" a second after
--     track_from hid 48 missed slots) or one that is not the job's synced definition is left
--     unexplained, and runner.check_v1 reports it as history_unexplained.
CREATE OR REPLACE FUNCTION runner.job_schedules_stamp_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    owner_oid oid := (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'runner');
BEGIN
    NEW.fingerprint := runner.schedule_fingerprint_v1(NEW.schedule_kind, NEW.cron, NEW.every_interval,
                                                      NEW.timezone, NEW.partitions, NEW.dynamic_partitions);
    NEW.recorded_at := now();
    IF pg_catalog.pg_has_role(current_user, owner_oid, 'MEMBER') THEN
        NEW.explained_by := coalesce(NEW.explained_by, 'schema owner');
    ELSIF EXISTS (SELECT 1 FROM runner.jobs j
                  WHERE j.job_name = NEW.job_name AND j.retired_at IS NULL
                    AND ((NEW.valid_from >= now()
                          AND (j.schedule_kind, j.cron, j.every_interval, j.timezone, j.partitions,
                               j.dynamic_partitions)
                              IS NOT DISTINCT FROM
                              (NEW.schedule_kind, NEW.cron, NEW.every_interval, NEW.timezone,
                               NEW.partitions, NEW.dynamic_partitions))
                         OR (NEW.valid_from = j.track_from
                             AND NOT EXISTS (SELECT 1 FROM runner.job_schedules s
                                             WHERE s.job_name = NEW.job_name)))) THEN
        NEW.explained_by := 'append';
    ELSE
        NEW.explained_by := NULL;
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER job_schedules_stamp BEFORE INSERT ON runner.job_schedules
    FOR EACH ROW EXECUTE FUNCTION runner.job_schedules_stamp_v1();

