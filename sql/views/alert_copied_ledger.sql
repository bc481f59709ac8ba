-- copied_ledger: this ledger is a copy of another (restored into another database or cluster:
-- runner.ledger_copy_v1, schema step 0007_identity) that no operator has adopted yet; its
-- runners hold the source's backfill plans, catch-up, retries and takeovers meanwhile. It
-- clears when `runner db adopt --reason R` records the current identity.
-- One kind of runner.alerts (sql/views/alerts.sql; the kinds: runner/alerts.py).
CREATE OR REPLACE VIEW runner.alert_copied_ledger AS
SELECT a.kind::text AS kind, a.job_name::text AS job_name, a.owner::text AS owner, a.run_id::bigint AS run_id,
       a.detail::text AS detail, a.since::timestamptz AS since
FROM (
    SELECT 'copied_ledger', NULL::text, NULL::text, NULL::bigint, c.detail, now()
    FROM runner.ledger_copy_v1() c
    WHERE c.copied
) AS a (kind, job_name, owner, run_id, detail, since);
