package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

// dialect is SQLite's SQL for the statements the drivers share (internal/sqldb).
var dialect = sqldb.Dialect{
	Param:          sqldb.Question,
	Time:           func(t time.Time) any { return micros(t) },
	ApprovalDetail: approvalDetailSQL,
	LowerASCII:     func(expr string) string { return "lower(" + expr + ")" },
	AnyOf:          func(expr, p string) string { return expr + " IN (SELECT value FROM json_each(" + p + "))" },
	Values:         func(p string) string { return "json_each(" + p + ")" },
	List: func(list []string) any {
		doc, _ := json.Marshal(list) // a list of strings always encodes
		return string(doc)
	},
	InboxBodyPurgeOrder: "status, received_at",
}

// approvalDetailSQL reads approvals with everything their answer shows in one statement: the
// approvers in listed order, the decisions oldest first (votes cast at the same instant, as
// under a frozen test clock, in insertion order through rowid), each at its time in RFC 3339,
// and the public fields of the execution.
const approvalDetailSQL = `SELECT ` + sqldb.ApprovalColumns + `,
	(SELECT json_group_array(p.approver ORDER BY p.position) FROM approval_approvers p WHERE p.approval_id = a.id),
	(SELECT json_group_array(json_object('approver', d.approver, 'verdict', d.verdict, 'comment', d.comment,
		'at', strftime('%Y-%m-%dT%H:%M:%S', d.decided_at / 1000000, 'unixepoch') || printf('.%06dZ', d.decided_at % 1000000))
		ORDER BY d.decided_at, d.rowid)
	 FROM decisions d WHERE d.approval_id = a.id),
	` + sqldb.ApprovalDetailColumns + `
FROM approvals a LEFT JOIN executions x ON x.approval_id = a.id`

// InsertApproval writes a new approval, or returns the approval that holds its key; see
// approval.Store. SQLite's single writer orders concurrent inserts of one key: the second
// finds the first's approval. The creates that queue for the writer at the same moment share
// one write transaction and its commit (writeBatch).
func (s *Store) InsertApproval(ctx context.Context, a *approval.Approval, cause approval.Cause, outbox []*approval.OutboxMessage) (*approval.KeyHolder, error) {
	// A retry finds the approval holding its key on the read pool, the request's token check
	// in the same statement, without queueing for the one write connection. Only a key that
	// looks free (or a token that may be refused) goes on to the write transaction, which
	// checks both again under the write lock.
	check := approval.PendingTokenCheck(ctx)
	if h, err := keyHolder(ctx, s.shared.DB, a.Requester, a.OperationKey, check); err != nil || h != nil {
		return h, fail("read the approval holding the key", err)
	}
	out, err := s.creates.Do(ctx, insert{a: a, cause: cause, outbox: outbox, check: check})
	switch {
	case err != nil:
		return nil, fail("insert approval", err)
	case out.refused:
		return nil, check.Refuse()
	case check != nil:
		check.Pass()
	}
	return out.holder, nil
}

// insert is one create handed to the batcher: the approval, its event's cause, its
// notifications and the request's pending token check, if any.
type insert struct {
	a      *approval.Approval
	cause  approval.Cause
	outbox []*approval.OutboxMessage
	check  *approval.TokenCheck
}

// inserted is a create's outcome in its batch: refused (its token no longer good), or
// written (holder nil), or the approval that holds its key.
type inserted struct {
	refused bool
	holder  *approval.KeyHolder
}

// insertOne writes one create in tx, or finds the approval holding its key.
func insertOne(ctx context.Context, tx *tx, in insert) (inserted, error) {
	if in.check != nil {
		good, err := sqldb.TokenGood(ctx, querier{tx}, dialect, in.check)
		if err != nil || !good {
			return inserted{refused: !good}, fail("check token", err)
		}
	}
	holder, err := keyHolder(ctx, querier{tx}, in.a.Requester, in.a.OperationKey, nil)
	if err != nil || holder != nil {
		return inserted{holder: holder}, fail("insert approval", err)
	}
	if err := insertApproval(ctx, tx, in.a, in.cause); err != nil {
		return inserted{}, fail("insert approval", err)
	}
	rt := newRuleTx(tx)
	for _, m := range in.outbox {
		if err := rt.OutboxInsert(ctx, m); err != nil {
			return inserted{}, err
		}
	}
	if len(in.outbox) > 0 {
		tx.topics.Add(approval.TopicOutbox)
	}
	return inserted{}, nil
}

// keyHolder finds the approval made under (requester, key) through q, or nil. The token check
// c, if any, rides in the WHERE clause: a row read means it passed.
func keyHolder(ctx context.Context, q sqldb.Querier, requester, key string, c *approval.TokenCheck) (*approval.KeyHolder, error) {
	stmt, args := approvalDetailSQL+` WHERE a.operation_key = ? AND a.requester = ?`, []any{key, requester}
	if c != nil {
		stmt, args = stmt+` AND (`+sqldb.TokenCheckSQL(dialect, 3)+`) = 1`, append(args, sqldb.TokenCheckArgs(dialect, c)...)
	}
	rows, err := q.Query(ctx, stmt, args...)
	list, err := sqldb.Collect(rows, err, sqldb.ScanApprovalDetail)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	if c != nil {
		c.Pass()
	}
	return &approval.KeyHolder{Fingerprint: list[0].Fingerprint, Approval: list[0]}, nil
}

// insertApproval writes the approval, its approvers, whom it asks and its created event.
func insertApproval(ctx context.Context, tx *tx, a *approval.Approval, cause approval.Cause) error {
	policy, err := sqldb.PolicyJSON(a)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO approvals (id, requester, operation_key, fingerprint, action, title, context,
			required_approvals, status, decided_at, expires_at, created_at, version, callback_url, policy, remind_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', NULL, ?, ?, 1, NULLIF(?, ''), ?, ?)`,
		a.ID, a.Requester, a.OperationKey, a.Fingerprint, a.Action, a.Title, nullText(a.Context),
		a.RequiredApprovals, micros(a.ExpiresAt), micros(a.CreatedAt), a.CallbackURL, nullText(policy),
		nullMicros(a.FirstReminder()),
	); err != nil {
		if isUnique(err) {
			return approval.Errorf(approval.ECONFLICT, "an approval with this id or operation key already exists")
		}
		return fmt.Errorf("insert approval: %w", err)
	}
	for i, name := range a.Approvers {
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO approval_approvers (approval_id, position, approver, created_at) VALUES (?, ?, ?, ?)`,
			a.ID, i, name, micros(a.CreatedAt),
		); err != nil {
			if isUnique(err) {
				return approval.Errorf(approval.EINVALID, "approver %q is listed twice", name)
			}
			return fmt.Errorf("insert approver: %w", err)
		}
	}
	rt := newRuleTx(tx)
	if asks := a.Asks(); len(asks) > 0 {
		if err := rt.ApprovalAskReplace(ctx, a.ID, a.CreatedAt, asks); err != nil {
			return err
		}
	}
	return rt.EventInsert(ctx, a.ID, approval.EventCreated, a.Requester, cause, nil)
}

// nullText binds JSON as TEXT, or NULL when there is none.
func nullText(b []byte) sql.NullString {
	return sql.NullString{String: string(b), Valid: b != nil}
}
