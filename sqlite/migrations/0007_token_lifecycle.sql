-- 0007: the token lifecycle (docs/http-api.md, "Tokens"): a name that says what a token is
-- for, an optional expiry, a revocation, and when it was last used (kept to within a minute).
-- Existing tokens get an empty name and none of the rest: they keep working as before.
ALTER TABLE tokens ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN expires_at INTEGER;
ALTER TABLE tokens ADD COLUMN last_used_at INTEGER;
ALTER TABLE tokens ADD COLUMN revoked_at INTEGER;
