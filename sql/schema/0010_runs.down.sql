-- 0010_runs, down
DROP INDEX IF EXISTS runner.job_runs_attention_order;
DROP INDEX IF EXISTS runner.job_runs_slot_order;
