-- runner.ledger_copy_v1(): whether this ledger is a copy of another (issue 29, point 6).
--
-- runner.ledger_identity (schema step 0007_identity) records where the ledger lives: the
-- cluster's system identifier and the database's oid (and name, for people). A copy carries
-- its source's row: pg_dump/pg_restore or CREATE DATABASE ... TEMPLATE into another database
-- gives a new database oid (in the same cluster too), a restore into another cluster a new
-- system identifier. Either differing makes a copy; a renamed database (same oid) is not one.
-- Physical copies (a promoted replica, pg_basebackup, a PITR restore) keep both: they are the
-- same ledger as far as this can tell, and a failover must not stop the fleet. pg_upgrade
-- keeps database oids (PostgreSQL 15+) but makes a new cluster: its ledger reads as a copy
-- until adopted.
--
-- One row: copied, the recorded identity and the current one, and a one-line detail. With no
-- recorded row (deleted by hand) the ledger counts as a copy: adopting records it.
-- Runners read it at start and, while it says copied, every few seconds: they then hold the
-- source's work (backfill plans, misfire catch-up, retries and queued runs, takeovers) and do
-- not count the copied instance rows as peers, until runner.adopt_ledger_v1 records the
-- current identity (`runner db adopt --reason R`). runner.alert_copied_ledger shows it.
CREATE OR REPLACE FUNCTION runner.ledger_copy_v1()
RETURNS TABLE (copied boolean, recorded_system_identifier bigint, recorded_database_oid oid,
               recorded_database_name text, recorded_at timestamptz, system_identifier bigint,
               database_oid oid, database_name text, detail text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT (i.system_identifier IS DISTINCT FROM c.system_identifier OR i.database_oid IS DISTINCT FROM d.oid),
       i.system_identifier, i.database_oid, i.database_name, i.recorded_at,
       c.system_identifier, d.oid, d.datname::text,
       CASE
           WHEN i.one IS NULL THEN
               format('this ledger has no recorded identity (runner.ledger_identity is empty): it is '
                      'treated as a copy; runners hold its backfill plans, catch-up, retries and '
                      'takeovers until `runner db adopt --reason R`')
           WHEN i.system_identifier IS DISTINCT FROM c.system_identifier OR i.database_oid IS DISTINCT FROM d.oid THEN
               format('this ledger is a copy: it was recorded in database %s (oid %s) of cluster %s at %s, '
                      'and is now in database %s (oid %s) of cluster %s; runners hold its backfill plans, '
                      'catch-up, retries and takeovers, and the runners it lists are not peers, until '
                      '`runner db adopt --reason R`',
                      i.database_name, i.database_oid, i.system_identifier, i.recorded_at,
                      d.datname, d.oid, c.system_identifier)
       END
FROM pg_control_system() c
JOIN pg_database d ON d.datname = current_database()
LEFT JOIN runner.ledger_identity i ON true
$$;
