-- 0015_sessions: page sessions (docs/security.md, "Page sessions"). The session cookie
-- carries the id; the row is the truth, read at every page request.

CREATE TABLE sessions (
	id         text        PRIMARY KEY,
	subject    text        NOT NULL,
	role       text        NOT NULL,
	via        text        NOT NULL,
	-- The hash of the API token a token's session signed in with; NULL for the others.
	token_hash bytea,
	created_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	ended_at   timestamptz
);
-- Ending a person's sessions reads their live ones only.
CREATE INDEX sessions_subject_live ON sessions (subject) WHERE ended_at IS NULL;
-- The sweeper deletes the expired ones, oldest first.
CREATE INDEX sessions_expires ON sessions (expires_at);
