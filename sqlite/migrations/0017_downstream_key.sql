-- 0017_downstream_key: the target's Idempotency-Key names the requester as well as the
-- operation key (docs/http-api.md, "The call"; approval.DownstreamKey), fixed on the
-- execution when it is created.
--
-- Rows left '' keep the bare operation key (ExecutionRecord.IdempotencyKey): a row that was
-- called may have reached its target under that key, and one inserted by a replica of an
-- older version during an upgrade is called under it by that replica too. A targeted row
-- never called (attempts = 0: a claim counts its attempt before any call) gets the new key
-- here, so that one held back because another requester's approval used its operation key
-- is called as an operation of its own.
ALTER TABLE executions ADD COLUMN downstream_key TEXT NOT NULL DEFAULT '';

-- approval.DownstreamKey in SQL: the requester's UTF-8 bytes one at a time, each outside
-- A-Z a-z 0-9 - . _ ~ as %XX (hex() writes upper-case digits), then "/" and the key.
WITH RECURSIVE escaped (id, bytes, pos, out) AS (
	SELECT x.id, CAST(a.requester AS BLOB), 1, ''
	FROM executions x JOIN approvals a ON a.id = x.approval_id
	WHERE x.targeted = 1 AND x.attempts = 0
	UNION ALL
	SELECT id, bytes, pos + 1, out || CASE
		WHEN hex(substr(bytes, pos, 1)) BETWEEN '30' AND '39'
			OR hex(substr(bytes, pos, 1)) BETWEEN '41' AND '5A'
			OR hex(substr(bytes, pos, 1)) BETWEEN '61' AND '7A'
			OR hex(substr(bytes, pos, 1)) IN ('2D', '2E', '5F', '7E')
		THEN CAST(substr(bytes, pos, 1) AS TEXT)
		ELSE '%' || hex(substr(bytes, pos, 1))
	END
	FROM escaped WHERE pos <= length(bytes)
)
UPDATE executions SET downstream_key = (
	SELECT e.out FROM escaped e WHERE e.id = executions.id AND e.pos = length(e.bytes) + 1
) || '/' || operation_key
WHERE targeted = 1 AND attempts = 0;
