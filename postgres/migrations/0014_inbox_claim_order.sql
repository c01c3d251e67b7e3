-- 0014_inbox_claim_order: the inbox's claim reads its few due events in index order, however
-- long the pending backlog (docs/query-plans.md, "The inbox's claim").
--
-- The claim took the due pending events oldest first by received_at, which no index of the
-- pending ones gives: it read every due pending event through inbox_events_due_idx and sorted
-- them, 11.6 ms a claim with 7,836 events waiting (intake outrunning the processor at a
-- million approvals). Claimed in due order instead, with id to break ties, the index below
-- gives the first rows as they are; it replaces the index on (status, next_attempt_at).
CREATE INDEX inbox_events_due_order_idx ON inbox_events (status, next_attempt_at, id);
DROP INDEX inbox_events_due_idx;
