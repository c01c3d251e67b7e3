-- 0010_inbox_body_hash: a second dedupe key for sources whose scheme signs only the body
-- (github): the SHA-256 of the signed body, unique per source for as long as the event row is
-- kept. The delivery id is not signed, so a captured body resent under a new
-- X-GitHub-Delivery finds this and stores nothing (docs/http-api.md, "Replays under the
-- github scheme"). The purge of bodies keeps the hash; the purge of events removes both. NULL
-- for the other schemes, which the index leaves out.
ALTER TABLE inbox_events ADD COLUMN body_hash BLOB;
CREATE UNIQUE INDEX inbox_events_source_body_hash ON inbox_events (source, body_hash)
	WHERE body_hash IS NOT NULL;
