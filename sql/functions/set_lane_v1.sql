-- runner.set_lane_v1: `runner lane set` in the database (revision 0011_lanes). Creates a
-- lane, or changes a lane's rank (priority, lower first), fleet concurrency or rate, and
-- writes its runner.requests row (action lane_set, before and after) in the caller's
-- transaction, or changes nothing and raises.
--
-- A name is 1 to 40 characters of a-z, 0-9 and _, starting with a letter (the table's
-- check). new_rank NULL keeps the lane's (a new lane gets 25: after manual, before bulk);
-- set_concurrency / set_rate say whether new_concurrency / new_rate are given (NULL then removes
-- the limit). The realtime lane takes no fleet limit: its live slots are claimed at their
-- instant by whichever process is first, and a live slot held back by a fleet-wide unit
-- would be a late slot (bound it per process: runner start --lane-slots). A new rate
-- starts with a full bucket of max(1, rate). Built-in lanes cannot be removed (there is no
-- removal: a lane's runs keep its name in the ledger). SECURITY DEFINER, fixed search_path;
-- EXECUTE for the operator role only.
CREATE OR REPLACE FUNCTION runner.set_lane_v1(
    name text, new_rank integer, new_concurrency integer, set_concurrency boolean,
    new_rate double precision, set_rate boolean, new_description text, who text, reason text,
    as_of timestamptz DEFAULT NULL)
RETURNS TABLE (request_id bigint, lane text, rank integer, concurrency integer,
               rate double precision, created boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    clock constant timestamptz := coalesce(as_of, now());
    was runner.lanes%ROWTYPE;
    now_is runner.lanes%ROWTYPE;
    req bigint;
BEGIN
    PERFORM runner.operator_who_v1(who, reason);
    IF name IS NULL OR name !~ '^[a-z][a-z0-9_]{0,39}$' THEN
        RAISE EXCEPTION 'lane name % is not valid: 1 to 40 of a-z, 0-9 and _, starting with a letter; nothing written',
            coalesce(quote_literal(name), 'NULL');
    END IF;
    IF new_rank IS NOT NULL AND (new_rank < 0 OR new_rank > 1000) THEN
        RAISE EXCEPTION 'rank must be between 0 and 1000 (lower runs first); nothing written';
    END IF;
    IF set_concurrency AND new_concurrency IS NOT NULL AND new_concurrency < 0 THEN
        RAISE EXCEPTION 'concurrency must be 0 or more (0 holds the lane); nothing written';
    END IF;
    IF set_rate AND new_rate IS NOT NULL AND NOT (new_rate > 0 AND new_rate < 'infinity'::float8) THEN
        RAISE EXCEPTION 'rate must be a positive number of starts per second; nothing written';
    END IF;
    IF name = 'realtime' AND ((set_concurrency AND new_concurrency IS NOT NULL)
                              OR (set_rate AND new_rate IS NOT NULL)) THEN
        RAISE EXCEPTION 'the realtime lane takes no fleet limit (a live slot held back would be late): bound it per process with runner start --lane-slots; nothing written';
    END IF;
    SELECT * INTO was FROM runner.lanes l WHERE l.lane = name FOR UPDATE;
    IF FOUND THEN
        UPDATE runner.lanes l
        SET rank = coalesce(new_rank, l.rank),
            concurrency = CASE WHEN set_concurrency THEN new_concurrency ELSE l.concurrency END,
            rate = CASE WHEN set_rate THEN new_rate ELSE l.rate END,
            tokens = CASE WHEN set_rate AND new_rate IS DISTINCT FROM l.rate
                          THEN greatest(coalesce(new_rate, 1.0), 1.0) ELSE l.tokens END,
            tokens_at = CASE WHEN set_rate AND new_rate IS DISTINCT FROM l.rate
                             THEN clock ELSE l.tokens_at END,
            description = coalesce(new_description, l.description),
            updated_at = clock
        WHERE l.lane = name
        RETURNING * INTO now_is;
    ELSE
        INSERT INTO runner.lanes AS l (lane, rank, concurrency, rate, tokens, tokens_at, description, updated_at)
        VALUES (name, coalesce(new_rank, 25),
                CASE WHEN set_concurrency THEN new_concurrency END,
                CASE WHEN set_rate THEN new_rate END,
                greatest(coalesce(CASE WHEN set_rate THEN new_rate END, 1.0), 1.0), clock,
                new_description, clock)
        RETURNING * INTO now_is;
    END IF;
    req := runner.operator_request_v1('lane_set', NULL, who, reason, jsonb_build_object(
        'lanes', jsonb_build_array(jsonb_build_object(
            'lane', now_is.lane,
            'before', CASE WHEN was.lane IS NULL THEN NULL ELSE jsonb_build_object(
                'rank', was.rank, 'concurrency', was.concurrency, 'rate', was.rate) END,
            'after', jsonb_build_object(
                'rank', now_is.rank, 'concurrency', now_is.concurrency, 'rate', now_is.rate)))));
    RETURN QUERY SELECT req, now_is.lane, now_is.rank, now_is.concurrency, now_is.rate, was.lane IS NULL;
END
$$;
REVOKE ALL ON FUNCTION runner.set_lane_v1(text, integer, integer, boolean, double precision, boolean, text, text, text, timestamptz) FROM PUBLIC;
