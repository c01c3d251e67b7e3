-- 0004: whether an execution was created for an action with a downstream target. Its status
-- stops saying so once the runner or a report moves it, and only an execution whose outcome
-- comes from reports may take one (approval.ExecutionRecord.Reportable).
ALTER TABLE executions ADD COLUMN targeted boolean NOT NULL DEFAULT false;

-- The approving transaction appended execution.queued for a targeted execution only.
UPDATE executions x SET targeted = EXISTS (
	SELECT 1 FROM events e
	WHERE e.approval_id = x.approval_id AND e.type = 'execution.queued');
