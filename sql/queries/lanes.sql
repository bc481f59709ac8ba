-- Named statements of lanes (runner/lanes.py): what a process may serve, and `runner lane`.

-- name: lanes
-- Every lane, by priority, with its running and queued runs (an index probe each).
SELECT l.lane, l.rank, l.concurrency, l.rate, l.builtin, l.description, l.updated_at,
       (SELECT count(*) FROM runner.job_runs r WHERE r.lane = l.lane AND r.status = 'running') AS running,
       (SELECT count(*) FROM runner.job_runs r WHERE r.lane = l.lane AND r.status IN ('pending', 'failed')
          AND r.next_attempt_at IS NOT NULL) AS queued
FROM runner.lanes l
ORDER BY l.rank, l.lane

-- name: lane_names
SELECT lane FROM runner.lanes ORDER BY rank, lane

-- name: set_lane
-- Create a lane or change its limits: runner.set_lane_v1 (sql/functions/set_lane_v1.sql),
-- audited in runner.requests.
SELECT f.request_id, f.lane, f.rank, f.concurrency, f.rate, f.created
FROM runner.set_lane_v1(%(lane)s, %(rank)s::int, %(concurrency)s::int, %(set_concurrency)s,
                        %(rate)s::float8, %(set_rate)s, %(description)s::text, %(who)s, %(reason)s,
                        %(now)s::timestamptz) AS f
