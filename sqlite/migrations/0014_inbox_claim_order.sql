-- 0014_inbox_claim_order: the inbox's claim reads its few due events in index order, however
-- long the pending backlog (docs/query-plans.md, "The inbox's claim").
--
-- The claim took the due pending events by (status, received_at), which made SQLite read every
-- due pending event through inbox_events_due and sort them in a temporary B-tree. Claimed in
-- due order instead, with id to break ties, the index below gives the first rows as they are;
-- it replaces the index on (status, next_attempt_at).
CREATE INDEX inbox_events_due_order ON inbox_events (status, next_attempt_at, id);
DROP INDEX inbox_events_due;
