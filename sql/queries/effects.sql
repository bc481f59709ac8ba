-- Named statements of the effect log (runner/effects.py). Every statement runs on its own,
-- in autocommit: an effect changed the world whether or not the handler's ctx.db
-- transaction commits. Writes that may lead to a send (plan_effect, mark_sent) are
-- fence-checked against the run and hold its row FOR SHARE for their instant, so they are
-- serialised with a takeover or an outcome: either the 'sent' mark commits before the fence
-- moves (and the next owner sees it), or the stale owner sees the new fence and sends
-- nothing. Writes that record what happened after a send (record_outcome, confirm_checked)
-- are facts about the outside world and are compare-and-set on the send they describe
-- instead.

-- name: get_effect
-- The key's row; a key confirmed by a run that retention pruned (runner.effect_keys, revision
-- 0026_history) reads as confirmed, with no result (only the key is kept), whatever else says.
SELECT 'confirmed' AS status, 1 AS send_count, NULL::jsonb AS result, NULL::bigint AS run_id,
       1 AS attempt, 1::bigint AS fence, NULL::text AS stage
FROM runner.effect_keys
WHERE effect_key = %(effect_key)s
UNION ALL
SELECT status, send_count, result, run_id, attempt, fence, stage
FROM runner.effects
WHERE effect_key = %(effect_key)s
  AND NOT EXISTS (SELECT 1 FROM runner.effect_keys k WHERE k.effect_key = %(effect_key)s)

-- name: plan_effect
-- Announce an effect (status 'planned') if its key is new. Returns whether the attempt
-- still owns its run, and whether a row was inserted.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), run AS (
    SELECT r.id
    FROM runner.job_runs r
    WHERE r.id = %(run_id)s AND r.fence = %(fence)s AND r.status = 'running'
    FOR SHARE
), planned AS (
    INSERT INTO runner.effects (
        effect_key, run_id, job_name, partition_key, stage, status, attempt, fence,
        send_count, created_at, updated_at)
    SELECT %(effect_key)s, run.id, %(job_name)s, %(partition_key)s, %(stage)s, 'planned',
           %(attempt)s, %(fence)s, 0, c.now, c.now
    FROM run CROSS JOIN clock c
    WHERE NOT EXISTS (SELECT 1 FROM runner.effect_keys k WHERE k.effect_key = %(effect_key)s)
    ON CONFLICT (effect_key) DO NOTHING
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM run) AS owned, EXISTS (SELECT 1 FROM planned) AS planned

-- name: mark_sent
-- Mark an effect 'sent' (send_count + 1) just before it is sent: inserted if the key is
-- new, else updated only if the row is still as the caller read it (seen_status,
-- seen_send_count; a NULL seen_status means "no row"), so of two senders racing on a key
-- one wins. Returns whether the attempt still owns its run, and the new send_count (NULL
-- when the row had changed, or the run is not owned).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), run AS (
    SELECT r.id
    FROM runner.job_runs r
    WHERE r.id = %(run_id)s AND r.fence = %(fence)s AND r.status = 'running'
    FOR SHARE
), sent AS (
    INSERT INTO runner.effects AS e (
        effect_key, run_id, job_name, partition_key, stage, status, attempt, fence,
        send_count, created_at, updated_at, sent_at)
    SELECT %(effect_key)s, run.id, %(job_name)s, %(partition_key)s, %(stage)s, 'sent',
           %(attempt)s, %(fence)s, 1, c.now, c.now, c.now
    FROM run CROSS JOIN clock c
    -- a key confirmed by a pruned run is never sent again (runner.effect_keys)
    WHERE NOT EXISTS (SELECT 1 FROM runner.effect_keys k WHERE k.effect_key = %(effect_key)s)
    ON CONFLICT (effect_key) DO UPDATE
    SET status = 'sent',
        send_count = e.send_count + 1,
        run_id = EXCLUDED.run_id,
        job_name = EXCLUDED.job_name,
        partition_key = EXCLUDED.partition_key,
        stage = coalesce(EXCLUDED.stage, e.stage),
        attempt = EXCLUDED.attempt,
        fence = EXCLUDED.fence,
        result = NULL,
        error = NULL,
        sent_at = EXCLUDED.sent_at,
        updated_at = EXCLUDED.updated_at
    WHERE e.status = %(seen_status)s::text AND e.send_count = %(seen_send_count)s::integer
      AND NOT EXISTS (SELECT 1 FROM runner.effect_keys k WHERE k.effect_key = %(effect_key)s)
    RETURNING e.send_count
)
SELECT EXISTS (SELECT 1 FROM run) AS owned, (SELECT send_count FROM sent) AS send_count

-- name: record_outcome
-- What became of one send: confirmed (with its result), failed or unknown (with the error).
-- Only the send that is still the row's latest (same send_count, still 'sent') is recorded.
UPDATE runner.effects e
SET status = %(status)s::text,
    result = %(result)s::jsonb,
    error = %(error)s::text,
    confirmed_by = CASE WHEN %(status)s::text = 'confirmed' THEN 'send' END,
    confirmed_at = CASE WHEN %(status)s::text = 'confirmed'
                        THEN coalesce(%(now)s::timestamptz, now()) END,
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE e.effect_key = %(effect_key)s AND e.send_count = %(send_count)s AND e.status = 'sent'
RETURNING e.id

-- name: confirm_checked
-- A handler's check found an effect of an earlier send delivered: confirmed without a new
-- send, if the row is still as the caller read it. The error of that send (a timeout, say)
-- stays, as its history.
UPDATE runner.effects e
SET status = 'confirmed',
    confirmed_by = 'check',
    confirmed_at = coalesce(%(now)s::timestamptz, now()),
    updated_at = coalesce(%(now)s::timestamptz, now()),
    run_id = %(run_id)s,
    job_name = %(job_name)s,
    partition_key = %(partition_key)s,
    attempt = %(attempt)s,
    fence = %(fence)s
WHERE e.effect_key = %(effect_key)s AND e.status = %(seen_status)s::text
  AND e.send_count = %(seen_send_count)s::integer
RETURNING e.id
