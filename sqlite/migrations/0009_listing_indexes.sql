-- 0009_listing_indexes: listings by approver and by visibility read a page's worth of rows
-- whatever the data (docs/query-plans.md, "Listings").
--
-- Each approver row carries its approval's created_at, so that "the approvals listing me,
-- newest first, after this cursor" is one ordered range of an index. created_at never
-- changes once an approval is written. (ADD COLUMN ... NOT NULL needs a default; every row
-- is given its value at once, and every insert names it.)
ALTER TABLE approval_approvers ADD COLUMN created_at INTEGER NOT NULL DEFAULT 0;
UPDATE approval_approvers SET created_at = (SELECT a.created_at FROM approvals a WHERE a.id = approval_approvers.approval_id);

-- Replaces (approver, approval_id): the same look-up by approver, in listing order.
CREATE INDEX approval_approvers_approver_created ON approval_approvers (approver, created_at, approval_id);
DROP INDEX approval_approvers_approver;

-- A requester's own approvals, newest first: the other half of the visibility filter.
CREATE INDEX approvals_requester_created ON approvals (requester, created_at, id);
