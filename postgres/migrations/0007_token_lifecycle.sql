-- 0007: the token lifecycle (docs/http-api.md, "Tokens"): a name that says what a token is
-- for, an optional expiry, a revocation, and when it was last used (kept to within a minute).
-- Existing tokens get an empty name and none of the rest: they keep working as before. The
-- new columns have no default but '' and NULL, so adding them rewrites nothing.
ALTER TABLE tokens
	ADD COLUMN name         text NOT NULL DEFAULT '',
	ADD COLUMN expires_at   timestamptz,
	ADD COLUMN last_used_at timestamptz,
	ADD COLUMN revoked_at   timestamptz;
