-- 0001_baseline, down: the runner schema empty again but for alembic's version table (alembic
-- removes its row). The live objects go first (views, then functions with their triggers:
-- nothing records that a function reads a table), then the tables.
DO $down$
DECLARE
    object record;
BEGIN
    FOR object IN
        SELECT c.oid::regclass AS name FROM pg_catalog.pg_class c
        WHERE c.relnamespace = 'runner'::regnamespace AND c.relkind IN ('v', 'm')
    LOOP
        EXECUTE format('DROP VIEW IF EXISTS %s CASCADE', object.name);
    END LOOP;
    FOR object IN
        SELECT p.oid::regprocedure AS name FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'runner'::regnamespace
    LOOP
        EXECUTE format('DROP FUNCTION IF EXISTS %s CASCADE', object.name);
    END LOOP;
    FOR object IN
        SELECT c.oid::regclass AS name FROM pg_catalog.pg_class c
        WHERE c.relnamespace = 'runner'::regnamespace AND c.relkind IN ('r', 'p')
          AND c.relname <> 'alembic_version'
    LOOP
        EXECUTE format('DROP TABLE IF EXISTS %s CASCADE', object.name);
    END LOOP;
END
$down$;
