-- 0006_websessions (issue 28, point 4): the console's ended sessions. A `runner web` session
-- cookie is signed and carries a random id; logging out records the SHA-256 of that id here
-- (with the cookie's own expiry), and every console process on this ledger refuses a cookie
-- whose id is listed (runner/web/auth.py). Written only through runner.end_web_session_v1,
-- which also deletes the rows of cookies that have expired anyway. Read by the console on
-- every page a session cookie asks for, by the primary key.
CREATE TABLE IF NOT EXISTS runner.web_sessions_ended (
    session_hash text PRIMARY KEY CHECK (session_hash ~ '^[0-9a-f]{64}$'),
    user_name    text NOT NULL CHECK (length(user_name) BETWEEN 1 AND 200),
    ended_at     timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS web_sessions_ended_expires ON runner.web_sessions_ended (expires_at);
