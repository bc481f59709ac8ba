-- Revision 0016_health: the Jobs page in one pass of the gap scan, and runner.instances pruned.
--
-- runner.job_health's body becomes runner.job_health_v1(only_job) (sql/views/job_health.sql,
-- applied after this file): it runs the gap scan once for every job (or the one job) where the
-- view ran it once per job, and adds the column `missing` (the job's rows in the gap scan, from
-- the same pass). Every other column and its meaning stay. runner.missing_slots_v1 keeps its
-- signature and its rows (sql/views/missing_slots.sql, also applied after this file: a job's
-- holes read by its key, retired spans looked up only for a job ever retired), so runners of
-- 0015 read the same views and call the same scan.
--
-- runner.instances is pruned by the retention duty (runner.prune_instances_v1,
-- sql/functions/prune_instances_v1.sql): rows whose heartbeat is older than
-- runner.instance_retention (7 days unless set). What job_not_in_code needs of them is kept
-- here first: the newest heartbeat of a deleted runner whose code had the job. Expand-only:
-- a runner of 0015 never reads or writes the column.
ALTER TABLE runner.jobs ADD COLUMN in_code_at timestamptz;
COMMENT ON COLUMN runner.jobs.in_code_at IS
    'the newest heartbeat of a runner, since pruned from runner.instances, whose code defined the job';
