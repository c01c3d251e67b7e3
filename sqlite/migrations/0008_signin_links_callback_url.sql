-- 0008_signin_links_callback_url: e-mailed sign-in links (docs/web.md, "Sign-in links") and
-- the callback URL a create may name (docs/notifications.md, "Channels").

-- A sign-in link: only the SHA-256 of its token. used_at is set once, by the one use that
-- finds it unused and unexpired.
CREATE TABLE signin_tokens (
	hash       BLOB    PRIMARY KEY,
	subject    TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	used_at    INTEGER
) STRICT;
-- The limit on links per person counts their recent ones.
CREATE INDEX signin_tokens_subject ON signin_tokens (subject, created_at);

-- NULL when the create named no callback_url.
ALTER TABLE approvals ADD COLUMN callback_url TEXT;
