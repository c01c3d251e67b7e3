-- 0015_sessions: page sessions (docs/security.md, "Page sessions"). The session cookie
-- carries the id; the row is the truth, read at every page request.

CREATE TABLE sessions (
	id         TEXT    PRIMARY KEY,
	subject    TEXT    NOT NULL,
	role       TEXT    NOT NULL,
	via        TEXT    NOT NULL,
	-- The hash of the API token a token's session signed in with; NULL for the others.
	token_hash BLOB,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	ended_at   INTEGER
) STRICT;
-- Ending a person's sessions reads their live ones only.
CREATE INDEX sessions_subject_live ON sessions (subject) WHERE ended_at IS NULL;
-- The sweeper deletes the expired ones, oldest first.
CREATE INDEX sessions_expires ON sessions (expires_at);
