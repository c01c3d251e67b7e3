-- 0019_heartbeat: the one row that readiness writes (Store.HeartbeatUpdate; docs/operations.md,
-- "Readiness"): a write that commits shows that the database takes writes now, which a read
-- cannot show (a full disk, a read-only file).
CREATE TABLE heartbeat (
	id INTEGER PRIMARY KEY CHECK (id = 1),
	at INTEGER NOT NULL
) STRICT;
INSERT INTO heartbeat (id, at) VALUES (1, 0);
