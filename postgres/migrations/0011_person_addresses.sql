-- 0011_person_addresses: the e-mail address each person's identity provider verified at
-- their last OIDC sign-in (docs/notifications.md, "Addresses"). The configuration's address,
-- when it names one, wins over it.

CREATE TABLE person_addresses (
	person     text        PRIMARY KEY,
	email      text        NOT NULL,
	-- email lower-cased, by which a sign-in link may be asked for (compared without case).
	email_key  text        NOT NULL,
	updated_at timestamptz NOT NULL
);
CREATE INDEX person_addresses_email_key ON person_addresses (email_key);
