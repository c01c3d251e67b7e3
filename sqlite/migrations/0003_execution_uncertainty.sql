-- 0003_execution_uncertainty: what the runner needs to know of an execution's earlier
-- attempts, kept as state rather than read back from the audit trail.

-- Some attempt since the last operator retry may have reached the target without a known
-- outcome. Sticky until an operator retries or resolves the execution.
ALTER TABLE executions ADD COLUMN uncertain INTEGER NOT NULL DEFAULT 0 CHECK (uncertain IN (0, 1));
-- attempts as it was at the last operator retry: the retry policy counts attempts - attempt_base.
ALTER TABLE executions ADD COLUMN attempt_base INTEGER NOT NULL DEFAULT 0;

-- Executions in the middle of a run (queued for another attempt, or running) get both from
-- the audit trail, where earlier releases of the runner read them: the attempts claimed and
-- not released before the last operator retry, and whether since then an attempt was
-- recovered or ended saying it may have reached the target. Finished executions need neither
-- until an operator retry, which sets both afresh.
UPDATE executions SET
	attempt_base = (
		SELECT count(*) FILTER (WHERE e.type = 'execution.attempt')
			- count(*) FILTER (WHERE e.type = 'execution.released')
		FROM events e
		WHERE e.approval_id = executions.approval_id
			AND e.seq < (SELECT coalesce(max(r.seq), 0) FROM events r
				WHERE r.approval_id = executions.approval_id AND r.type = 'execution.retried')),
	uncertain = EXISTS (
		SELECT 1 FROM events e
		WHERE e.approval_id = executions.approval_id
			AND e.seq > (SELECT coalesce(max(r.seq), 0) FROM events r
				WHERE r.approval_id = executions.approval_id AND r.type = 'execution.retried')
			AND ((e.type = 'execution.attempt' AND json_extract(e.detail, '$.recovered') = 1)
				OR json_extract(e.detail, '$.reason') LIKE '%may have reached the target%'))
WHERE status IN ('queued', 'running');
