-- 0005: the purge of inbox bodies finds the oldest handled events that still have a body
-- (PurgeInbox). Through inbox_events_received_idx it walks past every older event whose body
-- is already gone, and those are kept for retention.inbox_ids: at a million approvals, with
-- bodies kept a week and ids a month, 64,000 rows per sweep. This index holds only the rows
-- the purge is after, so each sweep reads as many as it clears (docs/query-plans.md).
CREATE INDEX inbox_events_body_purge_idx ON inbox_events (received_at, id)
	WHERE body IS NOT NULL AND status IN ('processed', 'ignored', 'stale');
