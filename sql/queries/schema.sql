-- Named statements that describe the runner schema from the catalogs, normalised so that the
-- description is the same on PostgreSQL 14 and newer (runner/migrate.py: describe_schema).

-- name: columns
SELECT c.relname AS table_name,
       CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' WHEN 'm' THEN 'matview' ELSE c.relkind::text END AS kind,
       a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull,
       pg_get_expr(d.adbin, d.adrelid) AS default_expr, a.attidentity
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
WHERE n.nspname = 'runner' AND c.relkind IN ('r', 'v', 'm')
ORDER BY c.relname, a.attnum

-- name: constraints
SELECT cl.relname AS table_name, co.conname, pg_get_constraintdef(co.oid) AS definition
FROM pg_constraint co
JOIN pg_class cl ON cl.oid = co.conrelid
JOIN pg_namespace n ON n.oid = cl.relnamespace
WHERE n.nspname = 'runner' AND co.contype <> 'n'
ORDER BY cl.relname, co.conname

-- name: indexes
SELECT tablename, indexname, indexdef
FROM pg_indexes
WHERE schemaname = 'runner'
ORDER BY tablename, indexname

-- name: storage
-- tables with storage parameters (autovacuum settings of the hot tables, revision 0015_scale)
SELECT c.relname, array_to_string(array(SELECT o FROM unnest(c.reloptions) o ORDER BY o), ', ')
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'runner' AND c.relkind = 'r' AND c.reloptions IS NOT NULL
ORDER BY c.relname

-- name: functions
SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS args,
       pg_get_function_result(p.oid) AS result, l.lanname, p.provolatile, p.proparallel,
       p.proisstrict, p.prosrc
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_language l ON l.oid = p.prolang
WHERE n.nspname = 'runner'
ORDER BY p.proname, args

-- name: login_privileges
-- Whether the session's role is a superuser, and whether it is (a member of) the owner of the
-- runner schema: `runner start` warns about both (the owner bypasses the audit's append-only
-- trigger and the role checks; a superuser bypasses everything).
SELECT r.rolname AS role_name, r.rolsuper AS superuser,
       pg_has_role(current_user, n.nspowner, 'MEMBER') AS owner,
       pg_get_userbyid(n.nspowner) AS owner_name
FROM pg_catalog.pg_roles r
CROSS JOIN pg_catalog.pg_namespace n
WHERE r.rolname = current_user AND n.nspname = 'runner'
