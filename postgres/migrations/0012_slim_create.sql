-- 0012_slim_create: a create writes less (docs/architecture.md, "What a create writes").
--
-- The approval row is the operation key's record: it keeps the key and the fingerprint for
-- ever, and a retry's answer is rendered again from it, so the idempotency records (a second
-- row, its stored response and two index entries per create) are no longer written.
-- Records still kept are of creates that have an approval: a retry finds that.
DROP TABLE idempotency_records;

-- One unique index on (operation_key, requester) serves both the create's look-up by
-- requester and key and the inbox's look-up by key alone, in place of two.
CREATE UNIQUE INDEX approvals_operation_key_requester ON approvals (operation_key, requester);
ALTER TABLE approvals DROP CONSTRAINT approvals_operation_key_unique;
DROP INDEX approvals_operation_key_idx;

-- An approver is listed once per approval: (approval_id, approver) is the key; position is
-- the listed order, a column only.
ALTER TABLE approval_approvers DROP CONSTRAINT approval_approvers_pkey;
ALTER TABLE approval_approvers DROP CONSTRAINT approval_approvers_unique;
ALTER TABLE approval_approvers ADD PRIMARY KEY (approval_id, approver);
