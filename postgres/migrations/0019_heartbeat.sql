-- 0019_heartbeat: the one row that readiness writes (Store.HeartbeatUpdate; docs/operations.md,
-- "Readiness"): a write that commits shows that the database takes writes now, which a read
-- cannot show (a server in recovery, a read-only database, a full disk).
CREATE TABLE heartbeat (
	id smallint    PRIMARY KEY CHECK (id = 1),
	at timestamptz NOT NULL
);
INSERT INTO heartbeat (id, at) VALUES (1, 'epoch');
