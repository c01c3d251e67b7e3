package loadtest

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/approvald/approval/internal/sqlitepool"
)

// sqliteVars bounds the parameters of one multi-row INSERT, under SQLite's limit of 32766.
const sqliteVars = 30000

// SeedSQLite writes s into the migrated, empty SQLite database dsn names, on a write
// connection opened as the store's (sqlite's, see internal/sqlitepool): one transaction per seedBatch
// approvals, each table in multi-row INSERTs. Times are unix microseconds and booleans 0 or
// 1, as the store writes them. It does not ANALYZE: the store never does, so the plans the
// scenarios meet are those of a database without statistics.
func SeedSQLite(ctx context.Context, dsn string, s Seed, progress io.Writer) (SeedCounts, error) {
	if err := s.defaults(); err != nil {
		return SeedCounts{}, err
	}
	write, read, err := sqlitepool.Open(ctx, dsn)
	if err != nil {
		return SeedCounts{}, err
	}
	defer write.Close()
	read.Close()
	counts, err := seedBatches(ctx, s, progress, "sqlite", func(ctx context.Context, r *seedRows) error {
		tx, err := write.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("seed: begin: %w", err)
		}
		defer tx.Rollback()
		if err := insertRows(ctx, tx, r); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("seed: commit: %w", err)
		}
		return nil
	})
	if err != nil {
		return counts, err
	}
	// Move the log into the database now rather than during the first scenarios.
	if _, err := write.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return counts, fmt.Errorf("seed: checkpoint: %w", err)
	}
	return counts, nil
}

func insertRows(ctx context.Context, tx *sql.Tx, r *seedRows) error {
	us := func(t time.Time) int64 { return t.UnixMicro() }
	b := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	tables := []struct {
		name string
		cols []string
		n    int
		row  func(i int) []any
	}{
		{"approvals", []string{"id", "requester", "operation_key", "fingerprint", "action", "title", "context",
			"required_approvals", "status", "decided_at", "expires_at", "created_at", "version"}, len(r.approvals), func(i int) []any {
			a := r.approvals[i]
			var decided any
			if a.decidedAt != nil {
				decided = us(*a.decidedAt)
			}
			return []any{a.id, a.requester, a.key, a.fingerprint, a.action, a.title, string(a.context), 1, string(a.status), decided, us(a.expiresAt), us(a.createdAt), a.version}
		}},
		{"approval_approvers", []string{"approval_id", "position", "approver", "created_at"}, len(r.approvers), func(i int) []any {
			p := r.approvers[i]
			return []any{p.approvalID, p.position, p.approver, us(p.createdAt)}
		}},
		{"approval_asks", []string{"approval_id", "kind", "name", "created_at"}, len(r.asks), func(i int) []any {
			p := r.asks[i]
			return []any{p.approvalID, "person", p.approver, us(p.createdAt)}
		}},
		{"decisions", []string{"approval_id", "approver", "verdict", "comment", "decided_at"}, len(r.decisions), func(i int) []any {
			d := r.decisions[i]
			return []any{d.approvalID, d.approver, d.verdict, d.comment, us(d.at)}
		}},
		{"events", []string{"approval_id", "seq", "type", "at", "actor", "cause", "detail"}, len(r.events), func(i int) []any {
			e := r.events[i]
			var detail any
			if e.detail != nil {
				detail = string(e.detail)
			}
			return []any{e.approvalID, e.seq, e.typ, us(e.at), e.actor, string(e.cause), detail}
		}},
		{"executions", []string{"id", "approval_id", "operation_key", "action", "targeted", "status", "attempts",
			"last_error", "result", "next_attempt_at", "lease_expires_at", "applied_version", "uncertain", "attempt_base",
			"created_at", "updated_at"}, len(r.executions), func(i int) []any {
			x := r.executions[i]
			return []any{x.id, x.approvalID, x.key, x.action, b(x.targeted), string(x.status), x.attempts, "", x.result, nil, nil, 0, 0, 0, us(x.createdAt), us(x.updatedAt)}
		}},
		{"inbox_events", []string{"id", "source", "event_id", "type", "headers", "body", "received_at", "status",
			"attempts", "last_error", "next_attempt_at", "lease_token", "lease_expires_at", "processed_at", "outcome",
			"approval_id", "conflicts"}, len(r.inbox), func(i int) []any {
			e := r.inbox[i]
			var ref any
			if e.approvalID != "" {
				ref = e.approvalID
			}
			return []any{e.id, e.source, e.eventID, e.typ, string(e.headers), e.body, us(e.receivedAt), string(e.status), 1, "", nil, "", nil, us(e.processedAt), e.outcome, ref, 0}
		}},
	}
	for _, t := range tables {
		per := sqliteVars / len(t.cols)
		for from := 0; from < t.n; from += per {
			to := min(from+per, t.n)
			var sb strings.Builder
			sb.WriteString("INSERT INTO " + t.name + " (" + strings.Join(t.cols, ", ") + ") VALUES ")
			one := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(t.cols)), ", ") + ")"
			args := make([]any, 0, (to-from)*len(t.cols))
			for i := from; i < to; i++ {
				if i > from {
					sb.WriteString(", ")
				}
				sb.WriteString(one)
				args = append(args, t.row(i)...)
			}
			if _, err := tx.ExecContext(ctx, sb.String(), args...); err != nil {
				return fmt.Errorf("seed: insert %s: %w", t.name, err)
			}
		}
	}
	return nil
}
