-- 0013_action_listing: a listing by action reads a page's worth of rows whatever the data
-- (docs/query-plans.md, "Listings").
--
-- Without it, GET /v1/approvals?action=X walked approvals_created newest first and filtered
-- each row: a page as long as X's approvals are dense among the newest, the whole table for
-- an action with few approvals or none. One more index entry per create.
CREATE INDEX approvals_action_created ON approvals (action, created_at, id);
