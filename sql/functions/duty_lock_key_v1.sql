-- runner.duty_lock_key_v1(duty): the second half of the two-int advisory key (namespace, k)
-- of a duty that one process at a time performs across the fleet (see lock_key_v1.sql for the
-- whole key scheme). Negative, so it never meets a backfill plan's key (namespace, plan id):
--   prune    -1   runner.prune_v1 (the retention duty and `runner prune`), transaction lock
--   migrate  -2   `runner db upgrade` (runner/migrate.py), session lock held while migrating;
--                 taken before the schema may exist, so runner/migrate.py holds the same
--                 number (MIGRATE_LOCK_KEY) and a test keeps the two equal
CREATE OR REPLACE FUNCTION runner.duty_lock_key_v1(duty text)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT CASE duty WHEN 'prune' THEN -1 WHEN 'migrate' THEN -2 END $$;
