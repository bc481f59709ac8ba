-- runner.requests_append_only(): a trigger on runner.requests. Append-only for everyone but the
-- table's owner (the role that runs the migrations, e.g. for retention) and superusers:
-- UPDATE, DELETE and TRUNCATE are refused even if a role was granted them by mistake.
-- sql/roles.sql grants none of them in the first place.

CREATE OR REPLACE FUNCTION runner.requests_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT pg_has_role(current_user,
                       (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = TG_RELID),
                       'MEMBER') THEN
        RAISE EXCEPTION 'runner.requests is append-only: % refused for role %', TG_OP, current_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER requests_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON runner.requests FOR EACH STATEMENT EXECUTE FUNCTION runner.requests_append_only();
