-- 0007_identity (issue 29, point 6): where this ledger lives. One row, written when this step
-- runs: the cluster's system identifier (pg_control_system()) and the database's oid and name.
-- A ledger restored into another database (pg_dump/pg_restore, CREATE DATABASE ... TEMPLATE:
-- a new database oid) or another cluster (a new system identifier) carries the row of its
-- source, so the two differ there: runner.ledger_copy_v1() says so, runners hold the source's
-- plans, catch-up, retries and takeovers, and runner.alerts shows copied_ledger, until an
-- operator adopts the copy (`runner db adopt --reason R`: runner.adopt_ledger_v1 records the
-- new identity with its runner.requests row). Expand only: nothing older reads it.
CREATE TABLE IF NOT EXISTS runner.ledger_identity (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    system_identifier bigint NOT NULL,
    database_oid oid NOT NULL,
    database_name text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    -- NULL: recorded by this step; else the runner.requests row of the adoption that did
    request_id bigint
);

INSERT INTO runner.ledger_identity (system_identifier, database_oid, database_name)
SELECT c.system_identifier, d.oid, d.datname
FROM pg_control_system() c
JOIN pg_database d ON d.datname = current_database()
ON CONFLICT (one) DO NOTHING;
