package sqldb

import (
	"context"
)

// Kept secrets (secrets, migration 0021): written once, by the first process that needs one,
// and read back by every process after (Service.StoredSessionKey).

// SecretInsertIfAbsent stores value under name at the transaction's time, only when no secret
// has that name; guarded by the primary key. Of concurrent inserts one writes, the others
// wait for its commit and change nothing.
func (t Tx) SecretInsertIfAbsent(ctx context.Context, name string, value []byte) error {
	return t.write(ctx, "store secret", `
		INSERT INTO secrets (name, value, created_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO NOTHING`,
		name, value, t.Dialect.Time(t.At))
}

// SecretGet returns the secret named name, or ENOTFOUND.
func (t Tx) SecretGet(ctx context.Context, name string) ([]byte, error) {
	list, err := query(ctx, t, `SELECT value FROM secrets WHERE name = $1`,
		func(row Row) (v []byte, err error) { return v, row.Scan(Bytes(&v)) }, name)
	v, err := first(list, err)("secret %s not found", name)
	return v, t.Translate("read secret", err)
}
