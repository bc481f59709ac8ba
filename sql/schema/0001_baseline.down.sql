-- 0001_baseline, down: the runner schema empty again but for alembic's version table (alembic
-- removes its row). The live objects go first (views, then functions with their triggers:
-- nothing records that a function reads a table), then the tables. Every name is taken
-- before anything is dropped (a CASCADE takes dependents with it: IF EXISTS skips them).
DO $down$
DECLARE
    views text[] := ARRAY(SELECT format('runner.%I', c.relname) FROM pg_catalog.pg_class c
                          WHERE c.relnamespace = 'runner'::regnamespace AND c.relkind IN ('v', 'm'));
    functions text[] := ARRAY(SELECT format('runner.%I(%s)', p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid))
                              FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'runner'::regnamespace);
    tables text[] := ARRAY(SELECT format('runner.%I', c.relname) FROM pg_catalog.pg_class c
                           WHERE c.relnamespace = 'runner'::regnamespace AND c.relkind IN ('r', 'p')
                             AND c.relname <> 'alembic_version');
    name text;
BEGIN
    FOREACH name IN ARRAY views LOOP
        EXECUTE format('DROP VIEW IF EXISTS %s CASCADE', name);
    END LOOP;
    FOREACH name IN ARRAY functions LOOP
        EXECUTE format('DROP FUNCTION IF EXISTS %s CASCADE', name);
    END LOOP;
    FOREACH name IN ARRAY tables LOOP
        EXECUTE format('DROP TABLE IF EXISTS %s CASCADE', name);
    END LOOP;
END
$down$;
