-- 0004_execution_targeted: whether an execution was created for an action with a downstream
-- target. Its status stops saying so once the runner or a report moves it, and only an
-- execution whose outcome comes from reports may take one (approval.ExecutionRecord.Reportable).
ALTER TABLE executions ADD COLUMN targeted INTEGER NOT NULL DEFAULT 0 CHECK (targeted IN (0, 1));

-- The approving transaction appended execution.queued for a targeted execution only.
UPDATE executions SET targeted = EXISTS (
	SELECT 1 FROM events e
	WHERE e.approval_id = executions.approval_id AND e.type = 'execution.queued');
