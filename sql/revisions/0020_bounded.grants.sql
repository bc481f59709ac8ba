-- 0020_bounded: who may call runner.advance_watermarks_v1 may call v2, from the moment the
-- revision is applied: runners of this revision call v2 before a DBA has run sql/roles.sql
-- again (which grants it to the worker role by name).
DO $grants$
DECLARE
    grantee regrole;
BEGIN
    FOR grantee IN
        SELECT a.grantee::regrole
        FROM pg_catalog.pg_proc p
        CROSS JOIN LATERAL aclexplode(p.proacl) AS a
        WHERE p.oid = 'runner.advance_watermarks_v1(timestamptz)'::regprocedure
          AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION runner.advance_watermarks_v2(timestamptz, interval, integer, boolean) TO %s',
                       grantee);
    END LOOP;
END
$grants$;
