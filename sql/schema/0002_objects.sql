-- 0002_objects: runner.sql_objects, the checksums of the live SQL objects (sql/objects.txt)
-- as `runner db upgrade` applied them, every version kept: the newest row of a file is what
-- the ledger runs now; an older row says that text was applied once (a runner whose files
-- are all recorded may run against this ledger: runner/migrate.py, check_objects).
CREATE TABLE runner.sql_objects (
    name text NOT NULL CHECK (name ~ '^(functions|views)/[a-z0-9_]+\.sql$'),
    checksum text NOT NULL CHECK (checksum ~ '^[0-9a-f]{64}$'),
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (name, checksum)
);
COMMENT ON TABLE runner.sql_objects IS
    'the live SQL objects (sql/objects.txt) by file and checksum, as runner db upgrade applied them; the newest per name is current';
