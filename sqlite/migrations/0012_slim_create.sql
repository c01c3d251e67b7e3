-- 0012_slim_create: a create writes less (docs/architecture.md, "What a create writes").
--
-- The approval row is the operation key's record: it keeps the key and the fingerprint for
-- ever, and a retry's answer is rendered again from it, so the idempotency records are no
-- longer written. Records still kept are of creates that have an approval: a retry finds that.
DROP TABLE idempotency_records;

-- The inbox names an approval by its operation key alone; UNIQUE (requester, operation_key)
-- cannot serve that look-up.
CREATE INDEX approvals_operation_key ON approvals (operation_key);
