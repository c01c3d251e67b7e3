-- 0022_identity_groups: the groups each person's identity provider named in the groups claim
-- at their last OIDC sign-in (docs/policies.md, "Groups"). A sign-in replaces the person's
-- rows in one transaction; a vote reads the voters' rows in its own, so that a group whose
-- oidc_group is one of these counts them as members (as of that sign-in, signed_in_at).

CREATE TABLE identity_groups (
	person       text        NOT NULL,
	oidc_group   text        NOT NULL,
	signed_in_at timestamptz NOT NULL,
	PRIMARY KEY (person, oidc_group)
);
-- The members of an identity-provider group, for creates and GET /v1/groups.
CREATE INDEX identity_groups_group ON identity_groups (oidc_group, person);
