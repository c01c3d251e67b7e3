-- 0019_approval_policy: the policy an approval was created under (docs/policies.md,
-- "Versions"): its name, its version and the stages it resolved to, as the JSON of
-- approval.Resolved, written by the create's insert. NULL for an approval whose request named
-- its approvers. Its votes are counted by these rules, whatever the configuration says later.
ALTER TABLE approvals ADD COLUMN policy TEXT;
