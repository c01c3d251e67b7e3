-- 0015_execution_claim_order: the execution claim reads its few due executions in index
-- order, however long the queued backlog (docs/query-plans.md, "The execution claim,
-- session 15").
--
-- The claim takes the due queued executions by (next_attempt_at, id) and the running ones
-- whose lease ran out by (lease_expires_at, id), which neither index gave: with a backlog
-- of queued executions (a target down for an hour, a burst of approvals) every claim read all
-- of them through executions_due_idx and sorted them, 32-70 ms a claim with 15,000 waiting.
-- With id in the indexes the first rows come in claim order and a claim stops after its
-- batch; they replace the indexes on (status, next_attempt_at) and (lease_expires_at).
CREATE INDEX executions_due_order_idx ON executions (status, next_attempt_at, id);
DROP INDEX executions_due_idx;
CREATE INDEX executions_lease_order_idx ON executions (lease_expires_at, id) WHERE status = 'running';
DROP INDEX executions_lease_idx;
