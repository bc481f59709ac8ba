-- bad_setting: a setting set to what this view cannot use; its branch uses the default
-- (revision 0023_settings): runner.job_not_in_code_after, and runner.no_runner_after
-- (revision 0008_watch)
-- One kind of runner.alerts (sql/views/alerts.sql; the kinds: runner/alerts.py).
CREATE OR REPLACE VIEW runner.alert_bad_setting AS
SELECT a.kind::text AS kind, a.job_name::text AS job_name, a.owner::text AS owner, a.run_id::bigint AS run_id,
       a.detail::text AS detail, a.since::timestamptz AS since
FROM (
    SELECT 'bad_setting',
           NULL::text,
           NULL::text,
           NULL::bigint,
           format('setting %s is %L, not an interval above zero and at most 100 years such as ''6 hours'' '
                  'or ''1 day 12 hours'': %s uses %s until it is fixed (ALTER DATABASE '
                  '... SET %s = ''6 hours'', or RESET)',
                  s.name, CASE WHEN length(s.raw) > 200 THEN left(s.raw, 200) || '...' ELSE s.raw END,
                  s.user_kind, s.fallback, s.name),
           now()
    -- each interval setting an alert reads, the alert and the default it uses meanwhile
    -- (runner.no_runner_after since revision 0008_watch)
    FROM (SELECT v.name, v.user_kind, v.fallback, current_setting(v.name, true) AS raw
          FROM (VALUES ('runner.job_not_in_code_after'::text, 'job_not_in_code'::text, '24 hours'::text),
                       ('runner.no_runner_after', 'no_runner', '60 seconds')) AS v (name, user_kind, fallback)) s
    WHERE nullif(btrim(s.raw), '') IS NOT NULL
      AND runner.interval_setting_v1(s.name) IS NULL
) AS a (kind, job_name, owner, run_id, detail, since);
