-- 0021_secrets: keys the service makes once and keeps with its data, by name. The one kept so
-- far is the pages' session key when web.session_key is not configured (docs/web.md,
-- "Session"): generated at the first start, inserted if absent and read back, so that every
-- later start, and every replica sharing the database, signs with the same key.
CREATE TABLE secrets (
	name       text        PRIMARY KEY,
	value      bytea       NOT NULL,
	created_at timestamptz NOT NULL
);
