package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
)

// The states of an idempotency record.
const (
	stateInFlight  = "in_flight"
	stateCompleted = "completed"
)

// claimAttempts bounds how often BeginIdempotent goes round when the record it raced with
// vanishes (released or purged) between its insert and its read.
const claimAttempts = 3

// BeginIdempotent starts or resumes the create named by (c.Requester, c.Key). Who owns the
// operation is decided by the primary key of idempotency_records (INSERT ... ON CONFLICT DO
// NOTHING) and, for an expired lease, by an update conditional on the old fencing token.
func (s *Store) BeginIdempotent(ctx context.Context, c approval.IdempotencyClaim) (approval.ClaimResult, error) {
	if c.Lease <= 0 {
		return approval.ClaimResult{}, approval.Errorf(approval.EINVALID, "the idempotency lease must be positive")
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return approval.ClaimResult{}, err
	}
	defer tx.Rollback(ctx)

	for range claimAttempts {
		rec, err := tx.idempotencyRecord(ctx, c.Requester, c.Key)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return approval.ClaimResult{}, translate("read idempotency record", err)
		} else if err == nil {
			res, err := tx.resume(ctx, rec, c)
			if err != nil {
				return approval.ClaimResult{}, err
			}
			return res, tx.commit(ctx, "commit idempotency claim")
		}

		// No record. If it was purged after its retention, the approval it made still
		// holds the key and the fingerprint for ever.
		a, err := tx.approvalByKey(ctx, c.Requester, c.Key)
		if err != nil {
			return approval.ClaimResult{}, err
		} else if a != nil {
			if a.Fingerprint != c.Fingerprint {
				return approval.ClaimResult{}, mismatch()
			}
			return approval.ClaimResult{Outcome: approval.Existing, Approval: a}, tx.commit(ctx, "commit read approval")
		}

		// A concurrent claim of the same key makes this insert wait for that transaction
		// and then do nothing; the next round reads what it committed.
		token := newFencingToken()
		tag, err := tx.Exec(ctx, `
			INSERT INTO idempotency_records (requester, key, fingerprint, state, token, lease_expires_at, created_at)
			VALUES ($1, $2, $3, 'in_flight', $4, $5, $6)
			ON CONFLICT (requester, key) DO NOTHING`,
			c.Requester, c.Key, c.Fingerprint, token, tx.now.Add(c.Lease), tx.now)
		if err != nil {
			return approval.ClaimResult{}, translate("insert idempotency record", err)
		}
		if tag.RowsAffected() == 1 {
			return approval.ClaimResult{Outcome: approval.Claimed, Token: token}, tx.commit(ctx, "commit idempotency claim")
		}
	}
	return approval.ClaimResult{}, &approval.Error{
		Code:       approval.ECONFLICT,
		Message:    "the operation is changing hands, try again",
		RetryAfter: time.Second,
	}
}

// ReleaseIdempotent deletes an in-flight record still holding claim's token.
func (s *Store) ReleaseIdempotent(ctx context.Context, requester, key string, claim approval.ClaimResult) error {
	tx, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)

	if _, err := tx.Exec(ctx, `
		DELETE FROM idempotency_records
		WHERE requester = $1 AND key = $2 AND token = $3 AND state = 'in_flight'`,
		requester, key, claim.Token); err != nil {
		return translate("release idempotency record", err)
	}
	return tx.commit(ctx, "commit release")
}

// PurgeResponses deletes up to limit completed records past their retention and in-flight
// records whose lease ended more than grace ago. SKIP LOCKED keeps replicas purging at once
// from waiting on each other or on a create that is completing a record.
func (s *Store) PurgeResponses(ctx context.Context, grace time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, approval.Errorf(approval.EINVALID, "limit must be positive")
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)

	tag, err := tx.Exec(ctx, `
		DELETE FROM idempotency_records r
		USING (
			SELECT requester, key FROM idempotency_records
			WHERE (state = 'completed' AND retain_until <= $1)
				OR (state = 'in_flight' AND lease_expires_at < $2)
			LIMIT $3
			FOR UPDATE SKIP LOCKED
		) due
		WHERE r.requester = due.requester AND r.key = due.key`,
		tx.now, tx.now.Add(-grace), limit)
	if err != nil {
		return 0, translate("purge idempotency records", err)
	}
	if err := tx.commit(ctx, "commit purge"); err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// idempotencyRecord is a row of idempotency_records.
type idempotencyRecord struct {
	requester, key string
	fingerprint    string
	state          string
	token          string
	leaseExpiresAt time.Time
	response       approval.StoredResponse
}

// idempotencyRecord reads a record, or returns pgx.ErrNoRows.
func (tx *tx) idempotencyRecord(ctx context.Context, requester, key string) (*idempotencyRecord, error) {
	r := idempotencyRecord{requester: requester, key: key}
	var status *int
	var location *string
	err := tx.QueryRow(ctx, `
		SELECT fingerprint, state, token, lease_expires_at, response_status, response_location, response_body
		FROM idempotency_records WHERE requester = $1 AND key = $2`,
		requester, key).Scan(&r.fingerprint, &r.state, &r.token, &r.leaseExpiresAt, &status, &location, &r.response.Body)
	if err != nil {
		return nil, err
	}
	if status != nil {
		r.response.StatusCode = *status
	}
	if location != nil {
		r.response.Location = *location
	}
	return &r, nil
}

// resume answers a claim that found an existing record: a mismatch, a replay, a conflict
// while the lease runs, or a takeover once it has run out.
func (tx *tx) resume(ctx context.Context, r *idempotencyRecord, c approval.IdempotencyClaim) (approval.ClaimResult, error) {
	if r.fingerprint != c.Fingerprint {
		return approval.ClaimResult{}, mismatch()
	}
	if r.state == stateCompleted {
		resp := r.response
		return approval.ClaimResult{Outcome: approval.Replayed, Response: &resp}, nil
	}
	if left := r.leaseExpiresAt.Sub(tx.now); left > 0 {
		return approval.ClaimResult{}, inFlight(left)
	}

	// Of several retries taking over the same expired lease, the first to update wins; the
	// others block on its row lock, then find the token changed and update nothing.
	token := newFencingToken()
	tag, err := tx.Exec(ctx, `
		UPDATE idempotency_records SET token = $4, lease_expires_at = $5
		WHERE requester = $1 AND key = $2 AND token = $3
			AND state = 'in_flight' AND lease_expires_at <= $6`,
		r.requester, r.key, r.token, token, tx.now.Add(c.Lease), tx.now)
	if err != nil {
		return approval.ClaimResult{}, translate("take over idempotency record", err)
	}
	if tag.RowsAffected() == 0 {
		return approval.ClaimResult{}, inFlight(c.Lease)
	}
	return approval.ClaimResult{Outcome: approval.Claimed, Token: token}, nil
}

// approvalByKey returns the approval made under (requester, key) with its approvers and
// decisions, or nil if there is none.
func (tx *tx) approvalByKey(ctx context.Context, requester, key string) (*approval.Approval, error) {
	var id string
	err := tx.QueryRow(ctx, `SELECT id FROM approvals WHERE requester = $1 AND operation_key = $2`,
		requester, key).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	} else if err != nil {
		return nil, translate("find approval by operation key", err)
	}
	return tx.approval(ctx, id, false)
}

func mismatch() error {
	return approval.Errorf(approval.EMISMATCH, "the Idempotency-Key was already used for a different request")
}

// inFlight is the conflict for a claim another request holds, retryable after the time left
// on its lease (at least a second, the granularity of Retry-After).
func inFlight(left time.Duration) error {
	return &approval.Error{
		Code:       approval.ECONFLICT,
		Message:    "a request with this Idempotency-Key is still in flight",
		RetryAfter: max(left, time.Second),
	}
}

// newFencingToken returns a fresh, unguessable claim token.
func newFencingToken() string { return approval.NewID("clm") }
