-- runner.end_web_session_v1: logging out of `runner web` (revision 0006_websessions). Records
-- a session as ended: session_hash is the SHA-256 (64 hex digits) of the random id its
-- signed cookie carries, expires_at the cookie's own expiry (at most 31 days ahead). Every
-- console process on this ledger refuses that cookie from then on, whatever its signature.
-- Returns whether the row is new (false: already ended). Deletes, first, up to 1,000 rows of
-- sessions expired over a day ago (their cookies are refused by their expiry: a day of
-- margin for a console clock behind the database's), so the table holds only sessions that
-- could still be presented.
--
-- SECURITY DEFINER with a fixed search_path; EXECUTE for the operator and the readonly role
-- (a console of viewers may use a readonly login), never PUBLIC. It writes nothing of the
-- ledger's history, and ends only a session whose random id the caller knows.
CREATE OR REPLACE FUNCTION runner.end_web_session_v1(session_hash text, user_name text,
                                                     expires_at timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    added integer;
BEGIN
    IF session_hash IS NULL OR session_hash !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION 'a session is named by 64 hex digits (its id''s SHA-256); nothing written';
    END IF;
    IF coalesce(length(user_name), 0) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'a session''s user name has 1 to 200 characters; nothing written';
    END IF;
    IF expires_at IS NULL OR expires_at > now() + interval '31 days' THEN
        RAISE EXCEPTION 'a session expires within 31 days; nothing written';
    END IF;
    DELETE FROM runner.web_sessions_ended e
    WHERE e.ctid = ANY (ARRAY(SELECT x.ctid FROM runner.web_sessions_ended x
                              WHERE x.expires_at < now() - interval '1 day' LIMIT 1000));
    INSERT INTO runner.web_sessions_ended AS e (session_hash, user_name, expires_at)
    VALUES (session_hash, user_name, expires_at)
    ON CONFLICT ON CONSTRAINT web_sessions_ended_pkey DO NOTHING;
    GET DIAGNOSTICS added = ROW_COUNT;
    RETURN added = 1;
END
$$;

REVOKE ALL ON FUNCTION runner.end_web_session_v1(text, text, timestamptz) FROM PUBLIC;
