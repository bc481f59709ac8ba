-- runner.tracked_spans_v1(job): the spans of a job's slots that are expected (lo < slot <= hi),
-- the complement of its retirements. A job never retired has one span (-infinity, infinity).
-- The gap scan, the watermark advance and the ledger audit clip their slot expansion to them.

CREATE OR REPLACE FUNCTION runner.tracked_spans_v1(job text) RETURNS TABLE(lo timestamp with time zone, hi timestamp with time zone)
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT coalesce(lag(r.retired_until) OVER w - interval '1 microsecond', timestamptz '-infinity'),
           r.retired_from
    FROM runner.job_retirements r
    WHERE r.job_name = job
    WINDOW w AS (ORDER BY r.retired_from)
    UNION ALL
    SELECT coalesce((SELECT max(r.retired_until) FROM runner.job_retirements r WHERE r.job_name = job)
                    - interval '1 microsecond', timestamptz '-infinity'),
           timestamptz 'infinity'
    WHERE NOT EXISTS (SELECT 1 FROM runner.job_retirements r
                      WHERE r.job_name = job AND r.retired_until IS NULL)
$$;
