-- 0005_inbox_body_purge: the purge of inbox bodies finds the oldest handled events that still
-- have a body (PurgeInbox). Through inbox_events_status_received it walks past every older
-- event whose body is already gone, and those are kept for retention.inbox_ids: at a million
-- approvals, with bodies kept a week, 240 ms per sweep, holding the write lock. This index
-- holds only events with a body, so each sweep reads as many as it clears
-- (docs/query-plans.md). It leads with status as the purge's own index does: without
-- statistics, SQLite prefers it to one on received_at alone, which it never chose.
CREATE INDEX inbox_events_body_purge ON inbox_events (status, received_at)
	WHERE body IS NOT NULL;
