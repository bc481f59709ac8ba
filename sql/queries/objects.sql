-- The live SQL objects' checksums (runner/sqlfiles.py; sql/schema/0002_objects.sql). Applied
-- through alembic by migrations/env.py, so these take SQLAlchemy's :name parameters.

-- name: current_objects
SELECT DISTINCT ON (name) name, checksum
FROM runner.sql_objects
ORDER BY name, applied_at DESC

-- name: record_object
INSERT INTO runner.sql_objects (name, checksum) VALUES (:name, :checksum)
ON CONFLICT (name, checksum) DO UPDATE SET applied_at = clock_timestamp()

-- name: applied_objects
SELECT name, checksum FROM runner.sql_objects

-- name: version
SELECT version_num FROM runner.alembic_version

-- name: stamp
UPDATE runner.alembic_version SET version_num = :baseline WHERE version_num = :stamped

-- name: offline_lock
SELECT pg_advisory_xact_lock(:namespace, :key)

-- name: offline_lock_timeout
SELECT set_config('lock_timeout', :ms, true)

-- name: drop_empty_schema
-- After a downgrade to base: alembic's version table and the runner schema go, unless
-- something else is still in the schema (then both stay, and say so by staying).
DO $drop$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                   WHERE c.relnamespace = 'runner'::regnamespace AND c.relname NOT LIKE 'alembic_version%')
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'runner'::regnamespace)
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_type t WHERE t.typnamespace = 'runner'::regnamespace
                         AND t.typrelid = 0 AND t.typelem = 0)
       AND NOT EXISTS (SELECT 1 FROM runner.alembic_version) THEN
        DROP TABLE runner.alembic_version;
        DROP SCHEMA runner;
    END IF;
END
$drop$
