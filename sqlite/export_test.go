package sqlite

import (
	"context"
	"database/sql"
	"strings"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/batch"
	"github.com/approvald/approval/internal/sqldb"
)

// HoldWriter takes the store's one write connection and returns the function that gives it
// back, so that a test can make write transactions queue for it.
func (s *Store) HoldWriter(ctx context.Context) (release func(), err error) {
	c, err := s.write.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return func() { c.Close() }, nil
}

// WriterWaits is how many times a write transaction has had to wait for the write connection.
func (s *Store) WriterWaits() int64 { return s.write.Stats().WaitCount }

// CreatesWaiting is how many creates are queued for the next batch.
func (s *Store) CreatesWaiting() int { return s.creates.Waiting() }

// IntakesWaiting is how many deliveries are queued for the next batch of intakes.
func (s *Store) IntakesWaiting() int { return s.intakes.Waiting() }

// BatchCounts is what BatchStats reports, by kind.
func (s *Store) BatchCounts() map[string]batch.Stats { return s.batchStats() }

// ExplainApprovals returns SQLite's plan (EXPLAIN QUERY PLAN) of the statement Approvals
// sends for f, one line per step, indented by depth.
func (s *Store) ExplainApprovals(ctx context.Context, f approval.ApprovalFilter) (string, error) {
	e := &explainer{db: s.read}
	r := sqldb.Reads{DB: e, Dialect: dialect, Clock: s.instant, Translate: fail}
	if _, _, err := r.Approvals(ctx, f); err != nil {
		return "", err
	}
	return e.plan, e.err
}

// ExecRaw runs statements on the write connection, outside the store's transactions.
func (s *Store) ExecRaw(ctx context.Context, stmt string, args ...any) error {
	_, err := s.write.ExecContext(ctx, stmt, args...)
	return err
}

// explainer is a sqldb.Querier that explains the statement instead of running it for rows.
type explainer struct {
	db   *sql.DB
	plan string
	err  error
}

func (e *explainer) Query(ctx context.Context, query string, args ...any) (sqldb.Rows, error) {
	rows, err := e.db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	depth := map[int]int{}
	var lines []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			e.err = err
			break
		}
		depth[id] = depth[parent] + 1
		lines = append(lines, strings.Repeat("  ", depth[id]-1)+detail)
	}
	if e.err == nil {
		e.err = rows.Err()
	}
	e.plan = strings.Join(lines, "\n")
	return sqldb.EmptyRows{}, nil
}
