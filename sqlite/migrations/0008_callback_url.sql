-- 0008_callback_url: the URL a create named for the approval's decision callback
-- (docs/notifications.md, "Callbacks"); NULL when the create named none.
ALTER TABLE approvals ADD COLUMN callback_url TEXT;
