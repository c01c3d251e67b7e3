package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/approvald/approval/internal/sqldb"
)

// dialect is PostgreSQL's SQL for the statements the drivers share (internal/sqldb).
var dialect = sqldb.Dialect{
	Param:          sqldb.Positional,
	Time:           func(t time.Time) any { return t },
	ApprovalDetail: approvalDetailSQL,
	ForUpdate:      " FOR UPDATE",
	SkipLocked:     " FOR UPDATE SKIP LOCKED",
	LowerASCII:     func(expr string) string { return "lower(" + expr + ` COLLATE "C")` },
	AnyOf:          func(expr, p string) string { return expr + " = ANY(" + p + ")" },
	List:           func(list []string) any { return list },
}

// approvalDetailSQL reads approvals with everything their answer shows in one statement, so a
// GET is one round trip and one snapshot: the approvers in listed order, the decisions in
// the order of their approval.voted events, and the public fields of the execution.
const approvalDetailSQL = `SELECT ` + approvalDetailColumns + `
FROM approvals a LEFT JOIN executions x ON x.approval_id = a.id`

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
