-- 0018_signin_asks: every request for a sign-in link, matched or not (docs/security.md,
-- "Sign-in links").
--
-- subject is the person the request matched, '' when it matched nobody; client is the
-- requesting client as the pages count it (an IPv4 address, an IPv6 /64), '' when unknown.
-- A person's links per client are counted here, so that one client's requests do not spend
-- the allowance of the person's own; and every request writes its row, matched or not, so
-- that a request for a name nobody has does the same work as one for a person.
CREATE TABLE signin_asks (
	id         INTEGER PRIMARY KEY,
	subject    TEXT    NOT NULL,
	client     TEXT    NOT NULL,
	created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX signin_asks_subject ON signin_asks (subject, client, created_at);
-- The sweeper deletes the old ones (Service.PurgeSigninTokens).
CREATE INDEX signin_asks_created ON signin_asks (created_at);
