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
ALTER TABLE executions ADD COLUMN downstream_key text NOT NULL DEFAULT '';

-- approval.DownstreamKey in SQL: the requester's UTF-8 bytes one at a time, each outside
-- A-Z a-z 0-9 - . _ ~ as %XX (upper-case hex), then "/" and the key.
UPDATE executions x SET downstream_key = (
	SELECT string_agg(CASE
		WHEN b BETWEEN 48 AND 57 OR b BETWEEN 65 AND 90 OR b BETWEEN 97 AND 122 OR b IN (45, 46, 95, 126)
		THEN chr(b)
		ELSE '%' || upper(lpad(to_hex(b), 2, '0'))
	END, '' ORDER BY i)
	FROM (SELECT i, get_byte(convert_to(a.requester, 'UTF8'), i) AS b
		FROM generate_series(0, octet_length(a.requester) - 1) AS i) AS bytes
) || '/' || x.operation_key
FROM approvals a
WHERE a.id = x.approval_id AND x.targeted AND x.attempts = 0;
