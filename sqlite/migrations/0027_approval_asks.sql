-- 0027_approval_asks: whom each pending approval asks now (docs/policies.md, "Waiting for
-- me"): a person ('person', name) or a group ('group', name). An approval whose request named
-- its approvers asks them; one under a policy asks the groups and the people of its current
-- stage's rules, replaced when a vote starts the next stage. A row lives while its approval
-- is pending: the write that ends it deletes its rows. "Waiting for me" reads one range of the
-- index per name it looks under, the person and each group they are in at that moment, so a
-- page costs what waits for them, however long the history, and a group joined after the
-- create finds the approval.

CREATE TABLE approval_asks (
	approval_id TEXT    NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
	kind        TEXT    NOT NULL CHECK (kind IN ('person', 'group')),
	name        TEXT    NOT NULL,
	-- The approval's, as approval_approvers keeps it: the range is read newest first.
	created_at  INTEGER NOT NULL,
	PRIMARY KEY (approval_id, kind, name)
) STRICT;
CREATE INDEX approval_asks_name ON approval_asks (kind, name, created_at, approval_id);

-- The pending approvals whose request named their approvers ask them. Those under a policy
-- are given their current stage's rows by the service at start (Service.RestoreAsks), which
-- alone can count the votes toward the stages.
INSERT INTO approval_asks (approval_id, kind, name, created_at)
SELECT p.approval_id, 'person', p.approver, p.created_at
FROM approval_approvers p JOIN approvals a ON a.id = p.approval_id
WHERE a.status = 'pending' AND a.policy IS NULL;
