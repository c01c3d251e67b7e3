-- 0009_listing_indexes: listings by approver and by visibility read a page's worth of rows
-- whatever the data (docs/query-plans.md, "Listings").
--
-- Each approver row carries its approval's created_at, so that "the approvals listing me,
-- newest first, after this cursor" is one ordered range of an index. created_at never
-- changes once an approval is written.
ALTER TABLE approval_approvers ADD COLUMN created_at timestamptz;
UPDATE approval_approvers p SET created_at = a.created_at FROM approvals a WHERE a.id = p.approval_id;
ALTER TABLE approval_approvers ALTER COLUMN created_at SET NOT NULL;

-- Replaces (approver, approval_id): the same look-up by approver, in listing order.
CREATE INDEX approval_approvers_approver_created_idx
	ON approval_approvers (approver, created_at DESC, approval_id DESC);
DROP INDEX approval_approvers_approver_idx;

-- A requester's own approvals, newest first: the other half of the visibility filter.
CREATE INDEX approvals_requester_created_idx ON approvals (requester, created_at DESC, id DESC);
