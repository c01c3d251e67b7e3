package sqldb

import (
	"context"
	"fmt"

	"github.com/approvald/approval"
)

// The identity provider's groups (identity_groups, migration 0022): replaced by
// Service.RecordIdentityGroups at an OIDC sign-in, read by a vote for its voters and by a
// create and GET /v1/groups for the members of the configured groups (docs/policies.md,
// "Groups").

// IdentityGroupMembers returns the stored members of the groups named: one statement.
func (r Reads) IdentityGroupMembers(ctx context.Context, groups []string) ([]approval.IdentityGroup, error) {
	if len(groups) == 0 {
		return nil, nil
	}
	rows, err := r.DB.Query(ctx, `SELECT person, oidc_group, signed_in_at FROM identity_groups WHERE `+
		r.Dialect.AnyOf("oidc_group", r.Dialect.Param(1))+` ORDER BY oidc_group, person`, r.Dialect.List(groups))
	list, err := Collect(rows, err, scanIdentityGroup)
	return list, r.Translate("read identity groups", err)
}

// IdentityGroupGetMany reads the stored groups of persons: one statement.
func (t Tx) IdentityGroupGetMany(ctx context.Context, persons []string) ([]approval.IdentityGroup, error) {
	if len(persons) == 0 {
		return nil, nil
	}
	list, err := query(ctx, t, `SELECT person, oidc_group, signed_in_at FROM identity_groups WHERE `+
		t.Dialect.AnyOf("person", "$1")+` ORDER BY person, oidc_group`, scanIdentityGroup, t.Dialect.List(persons))
	return list, t.Translate("read identity groups", err)
}

// IdentityGroupReplace deletes person's groups and inserts groups at the transaction's time:
// two statements, sent together on PostgreSQL.
func (t Tx) IdentityGroupReplace(ctx context.Context, person string, groups []string) error {
	if err := t.write(ctx, "delete identity groups", `DELETE FROM identity_groups WHERE person = $1`, person); err != nil {
		return err
	}
	if len(groups) == 0 {
		return nil
	}
	return t.write(ctx, "insert identity groups", `INSERT INTO identity_groups (person, oidc_group, signed_in_at)
		SELECT $1, value, $2 FROM `+t.Dialect.Values("$3"), person, t.Dialect.Time(t.At), t.Dialect.List(groups))
}

// scanIdentityGroup reads a row of person, oidc_group, signed_in_at.
func scanIdentityGroup(row Row) (approval.IdentityGroup, error) {
	var g approval.IdentityGroup
	if err := row.Scan(&g.Person, &g.Group, Time(&g.SignedInAt)); err != nil {
		return g, fmt.Errorf("scan identity group: %w", err)
	}
	return g, nil
}
