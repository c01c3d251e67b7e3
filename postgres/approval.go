package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/batch"
	"github.com/approvald/approval/internal/sqldb"
)

// dialect is PostgreSQL's SQL for the statements the drivers share (internal/sqldb).
var dialect = sqldb.Dialect{
	Param:               sqldb.Positional,
	Time:                func(t time.Time) any { return t },
	ApprovalDetail:      approvalDetailSQL,
	ForUpdate:           " FOR UPDATE",
	SkipLocked:          " FOR UPDATE SKIP LOCKED",
	LowerASCII:          func(expr string) string { return "lower(" + expr + ` COLLATE "C")` },
	AnyOf:               func(expr, p string) string { return expr + " = ANY(" + p + ")" },
	List:                func(list []string) any { return list },
	Values:              func(p string) string { return "unnest(" + p + "::text[]) AS value" },
	InboxBodyPurgeOrder: "received_at, id",
}

// approvalDetailSQL reads approvals with everything their answer shows in one statement, so a
// GET is one round trip and one snapshot: the approvers in listed order, the decisions in
// the order of their approval.voted events, and the public fields of the execution.
const approvalDetailSQL = `SELECT ` + approvalDetailColumns + `
FROM approvals a` + executionJoin

// executionJoin joins an approval a to its execution x, if it has one.
const executionJoin = ` LEFT JOIN executions x ON x.approval_id = a.id`

// approvalDetailColumns are what approvalDetailSQL selects from an approval a and its
// execution x, which the execution claim reads from the rows it updated.
const approvalDetailColumns = sqldb.ApprovalColumns + `,
	(SELECT json_agg(p.approver ORDER BY p.position) FROM approval_approvers p WHERE p.approval_id = a.id),
	(SELECT json_agg(json_build_object('approver', d.approver, 'verdict', d.verdict,
		'comment', d.comment, 'at', d.decided_at) ORDER BY d.event_seq)
	 FROM decisions d WHERE d.approval_id = a.id),
	` + sqldb.ApprovalDetailColumns

// querier adapts what runs pgx statements (the pool, a connection, ruleTx) to sqldb.Execer.
type querier struct {
	q interface {
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	}
}

func (q querier) Query(ctx context.Context, sql string, args ...any) (sqldb.Rows, error) {
	return q.q.Query(ctx, sql, args...)
}

func (q querier) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := q.q.Exec(ctx, sql, args...)
	return err
}

// approvalDetailFrom is approvalDetailSQL for a batch: the approvals read from the join
// source (whose table of requests is r, numbered by r.ord), each row led by r.ord.
func approvalDetailFrom(source string) string {
	return `SELECT r.ord, ` + approvalDetailColumns + `
FROM ` + source + executionJoin
}

// eachByOrd scans the rows of a statement of approvalDetailFrom, each led by r.ord, and calls
// f with the index of each row's request (from 0, of n) and its approval.
func eachByOrd(rows pgx.Rows, err error, n int, f func(i int, a *approval.Approval)) error {
	return sqldb.Each(rows, err, func(r sqldb.Row) error {
		var ord int
		a, err := sqldb.ScanApprovalDetailAfter(r, &ord)
		if err == nil && ord >= 1 && ord <= n {
			f(ord-1, a)
		}
		return err
	})
}

// readApprovalsSQL reads a batch of approvals by id ($1), each with its request's token
// check ($2 to $4: hash, id, instant; an empty id for none) in its WHERE clause: no row for
// an approval that is missing or whose request's token is no longer good.
var readApprovalsSQL = approvalDetailFrom(`unnest($1::text[], $2::bytea[], $3::text[], $4::timestamptz[])
		WITH ORDINALITY AS r(id, token_hash, token_id, token_at, ord)
	JOIN approvals a ON a.id = r.id`) + `
WHERE ` + batchTokenGoodSQL

// batchTokenGoodSQL is the token check of a batch's request r (its token_hash, token_id and
// token_at; an empty token_id for none), as sqldb.TokenCheckSQL is for one request.
var batchTokenGoodSQL = `(r.token_id = '' OR EXISTS (SELECT 1 FROM tokens WHERE ` +
	sqldb.TokenGoodSQL("r.token_hash", "r.token_id", "r.token_at") + `))`

// tokenArgs are a batch request's token_hash, token_id and token_at for its check c: empty
// (no check) when c is nil.
func tokenArgs(c *approval.TokenCheck) ([]byte, string, time.Time) {
	if c == nil {
		return []byte{}, "", time.Time{}
	}
	return c.Hash, c.ID, c.Now
}

// read is one read of an approval handed to the batcher, with its request's token check.
type read struct {
	id    string
	check *approval.TokenCheck
}

// Approval reads one approval with everything its answer shows (see approval.Store), through
// the store's batcher: the reads arriving at the same moment share one statement and one
// round trip. A pending token check rides in the read, as in sqldb.Reads.Approval, which this
// replaces on PostgreSQL.
func (s *Store) Approval(ctx context.Context, id string) (*approval.Approval, error) {
	c := approval.PendingTokenCheck(ctx)
	a, err := s.reads.Do(ctx, read{id: id, check: c})
	return s.shared.Checked(ctx, id, c, a, err)
}

// TokenByHash finds the token with the given hash (see approval.Store) through the store's
// batcher, as Approval reads: the lookups arriving at the same moment (a replay answered from
// memory checks only its token) share one statement and one round trip. It replaces
// sqldb.Reads.TokenByHash on PostgreSQL.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (*approval.Token, error) {
	t, err := s.tokens.Do(ctx, hash)
	if err == nil && t == nil {
		err = approval.Errorf(approval.ENOTFOUND, "token not found")
	}
	return t, translate("find token", err)
}

// tokenBatch finds calls' tokens by hash in one statement and sets each call's result: its
// token, or nil.
func (s *Store) tokenBatch(ctx context.Context, calls []*batch.Call[[]byte, *approval.Token]) error {
	hashes := make([][]byte, len(calls))
	for i, c := range calls {
		hashes[i] = c.Req
	}
	rows, err := s.batchPool.Query(ctx, `SELECT r.ord, `+sqldb.TokenColumns+`
		FROM unnest($1::bytea[]) WITH ORDINALITY AS r(hash, ord) JOIN tokens t ON t.hash = r.hash`, hashes)
	return sqldb.Each(rows, err, func(r sqldb.Row) error {
		var ord int
		t, err := sqldb.ScanTokenAfter(r, &ord)
		if err == nil && ord >= 1 && ord <= len(calls) {
			calls[ord-1].Res = t
		}
		return err
	})
}

// readBatch reads calls' approvals with readApprovalsSQL and sets each call's result: its
// approval, or nil.
func (s *Store) readBatch(ctx context.Context, calls []*batch.Call[read, *approval.Approval]) error {
	n := len(calls)
	ids, hashes, tokens, at := make([]string, n), make([][]byte, n), make([]string, n), make([]time.Time, n)
	for i, c := range calls {
		ids[i] = c.Req.id
		hashes[i], tokens[i], at[i] = tokenArgs(c.Req.check)
	}
	rows, err := s.batchPool.Query(ctx, readApprovalsSQL, ids, hashes, tokens, at)
	return eachByOrd(rows, err, n, func(i int, a *approval.Approval) { calls[i].Res = a })
}
