-- Named statements of verification kinds (runner/verification.py): a query of a job's
-- verification, run as the condition role through runner.verify_query_v1, on a connection
-- of its own, and the checks around it.

-- name: limits
-- The transaction becomes read-only, with a statement timeout (both LOCAL: the transaction
-- is always rolled back).
SELECT set_config('transaction_read_only', 'on', true),
       set_config('statement_timeout', %(timeout)s, true)

-- name: time_limit
-- For a Python kind (the job's code, on the Python kinds' connection): a statement timeout
-- for the rest of the transaction, and the same limit on idling in it, so that the server
-- ends the session of a call the verification abandoned past its wall-clock limit.
SELECT set_config('statement_timeout', %(timeout)s, true),
       set_config('idle_in_transaction_session_timeout', %(timeout)s, true)

-- name: verify_query
-- The query's rows (at most max_rows + 1), each a JSON array of its values.
SELECT v.value
FROM runner.verify_query_v1(%(query)s, %(window_start)s::timestamptz, %(window_end)s::timestamptz,
                            %(partition)s::text, %(keys)s::text[], %(max_rows)s::int) AS v(value)

-- name: advisory_locks_held
-- Session-level advisory locks a query left behind on this connection (transaction-level
-- ones ended with the rollback).
SELECT count(*) AS held
FROM pg_locks l
WHERE l.pid = pg_backend_pid() AND l.locktype = 'advisory'

-- name: release_locks
SELECT pg_advisory_unlock_all()
