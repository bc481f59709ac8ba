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
