-- The one place that derives a run's advisory lock key.
--
-- Key scheme (documented in the README): a single bigint key whose top 16 bits are the
-- runner's lock namespace (default 21077, 'RU'; configurable so it cannot collide with an
-- application's own advisory locks) and whose low 48 bits are the run id. Run ids are kept
-- below 2^48 by a check constraint, so two live runs never share a key. Session-level locks
-- taken with one bigint argument are listed in pg_locks as locktype 'advisory', objsubid 1,
-- classid = high 32 bits, objid = low 32 bits.
CREATE OR REPLACE FUNCTION runner.lock_key_v1(namespace integer, run_id bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT ((namespace::bigint & 65535) << 48) | (run_id & 281474976710655) $$;
--
-- Duties that one process at a time performs across the fleet take a transaction- or
-- session-level advisory lock in the two-int form (namespace, k): backfill plans use
-- k = the plan id (positive), the fleet-wide duties a negative k from
-- runner.duty_lock_key_v1 (sql/functions/duty_lock_key_v1.sql). Two-int keys never collide
-- with the one-bigint run keys above.
