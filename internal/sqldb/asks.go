package sqldb

import (
	"context"
	"time"

	"github.com/approvald/approval"
)

// AskNames splits asks into the names of its groups and of its people, in order, for the
// inserts of approval_asks (migration 0027).
func AskNames(asks []approval.Ask) (groups, people []string) {
	for _, k := range asks {
		if k.Group != "" {
			groups = append(groups, k.Group)
		} else {
			people = append(people, k.Person)
		}
	}
	return groups, people
}

// ApprovalAskReplace deletes whom the approval asks and inserts asks: up to three statements,
// sent together on PostgreSQL.
func (t Tx) ApprovalAskReplace(ctx context.Context, id string, createdAt time.Time, asks []approval.Ask) error {
	if err := t.dropAsks(ctx, id); err != nil {
		return err
	}
	groups, people := AskNames(asks)
	for _, kind := range []struct {
		kind  string
		names []string
	}{{"group", groups}, {"person", people}} {
		if len(kind.names) == 0 {
			continue
		}
		if err := t.write(ctx, "insert approval asks", `
			INSERT INTO approval_asks (approval_id, kind, name, created_at)
			SELECT $1, $2, value, $3 FROM `+t.Dialect.Values("$4"),
			id, kind.kind, t.Dialect.Time(createdAt), t.Dialect.List(kind.names)); err != nil {
			return err
		}
	}
	return nil
}

// dropAsks deletes whom the approval asks: it is no longer pending, or asks anew.
func (t Tx) dropAsks(ctx context.Context, id string) error {
	return t.write(ctx, "delete approval asks", `DELETE FROM approval_asks WHERE approval_id = $1`, id)
}

// ApprovalIDsWithoutAsksForUpdate finds, through the pending range of
// approvals_status_created, the pending approvals under a policy that ask nobody, and locks
// them, skipping those another transaction holds.
func (t Tx) ApprovalIDsWithoutAsksForUpdate(ctx context.Context, limit int) ([]string, error) {
	return t.ids(ctx, "find approvals that ask nobody", `
		SELECT id FROM approvals a
		WHERE status = 'pending' AND policy IS NOT NULL
			AND NOT EXISTS (SELECT 1 FROM approval_asks k WHERE k.approval_id = a.id)
		ORDER BY created_at, id LIMIT $1`+t.Dialect.SkipLocked, limit)
}
