-- 0023_reminders: reminders of approvals under a policy with remind_every (docs/policies.md,
-- "Reminders"). remind_at is when the next reminder of the current stage is due, NULL when none
-- is (no remind_every, or the next would come at or after the expiry); stage_started_at is when
-- the current stage began, NULL for the first stage (it began at created_at). The reminder
-- scan reads the pending approvals whose remind_at has come, in remind_at order, through the
-- partial index, which holds only those rows.
ALTER TABLE approvals ADD COLUMN remind_at INTEGER;
ALTER TABLE approvals ADD COLUMN stage_started_at INTEGER;
CREATE INDEX approvals_remind_idx ON approvals (remind_at, id)
	WHERE status = 'pending' AND remind_at IS NOT NULL;
