package sqldb

import (
	"context"
	"fmt"
	"time"

	"github.com/approvald/approval"
)

// TokenColumns are the columns ScanToken reads, from tokens t.
const TokenColumns = `t.id, t.name, t.subject, t.role, t.hash, t.created_at, t.expires_at, t.last_used_at, t.revoked_at`

// ScanToken reads TokenColumns.
func ScanToken(row Row) (*approval.Token, error) { return ScanTokenAfter(row) }

// ScanTokenAfter reads a row of columns of its own, scanned into lead, then TokenColumns.
func ScanTokenAfter(row Row, lead ...any) (*approval.Token, error) {
	var t approval.Token
	var role string
	if err := row.Scan(append(lead, &t.ID, &t.Name, &t.Subject, &role, Bytes(&t.Hash), Time(&t.CreatedAt),
		NullTime(&t.ExpiresAt), NullTime(&t.LastUsedAt), NullTime(&t.RevokedAt))...); err != nil {
		return nil, fmt.Errorf("scan token: %w", err)
	}
	t.Role = approval.Role(role)
	return &t, nil
}

// TokenByHash finds the token with the given hash, revoked and expired ones included, or
// ENOTFOUND: one statement on the hash's unique index.
func (r Reads) TokenByHash(ctx context.Context, hash []byte) (*approval.Token, error) {
	rows, err := r.DB.Query(ctx, `SELECT `+TokenColumns+` FROM tokens t WHERE t.hash = `+r.Dialect.Param(1), hash)
	t, err := first(Collect(rows, err, ScanToken))("token not found")
	return t, r.Translate("find token", err)
}

// Token returns one token, or ENOTFOUND.
func (r Reads) Token(ctx context.Context, id string) (*approval.Token, error) {
	t, err := TokenByID(ctx, r.DB, r.Dialect, id, "")
	return t, r.Translate("read token", err)
}

// TokenByID reads one token through q, or ENOTFOUND; lock is appended to the statement
// ("FOR UPDATE" on PostgreSQL, "" elsewhere).
func TokenByID(ctx context.Context, q Querier, d Dialect, id, lock string) (*approval.Token, error) {
	rows, err := q.Query(ctx, `SELECT `+TokenColumns+` FROM tokens t WHERE t.id = `+d.Param(1)+` `+lock, id)
	return first(Collect(rows, err, ScanToken))("token %s not found", id)
}

// Tokens lists tokens newest first; see approval.Store.
func (r Reads) Tokens(ctx context.Context, f approval.TokenFilter) ([]*approval.Token, string, error) {
	limit, err := approval.PageLimit(f.Limit)
	if err != nil {
		return nil, "", err
	}
	q := Query{Dialect: r.Dialect}
	if err := q.After(f.Cursor, "t.created_at", "t.id"); err != nil {
		return nil, "", err
	}
	return page(ctx, r, "list tokens", `SELECT `+TokenColumns+` FROM tokens t`, &q, "t.created_at", "t.id", limit, ScanToken,
		func(t *approval.Token) (time.Time, string) { return t.CreatedAt, t.ID })
}

// TokenTouchSQL is the statement of approval.Store.TokenSetLastUsedIfOlder in d: its
// arguments are now, the token's id, and now minus the interval.
func TokenTouchSQL(d Dialect) string {
	return `UPDATE tokens SET last_used_at = ` + d.Param(1) + ` WHERE id = ` + d.Param(2) +
		` AND (last_used_at IS NULL OR last_used_at < ` + d.Param(3) + `)`
}

// TokenInsert is the statement of approval.Tx.TokenInsert in d and its arguments: every
// column a new token has, its name and expiry included (last use and revocation start
// unset). The driver runs it and translates a unique violation to ECONFLICT.
func TokenInsert(d Dialect, t approval.Token) (string, []any) {
	var expires any
	if t.ExpiresAt != nil {
		expires = d.Time(*t.ExpiresAt)
	}
	return `INSERT INTO tokens (id, subject, role, hash, created_at, name, expires_at) VALUES (` +
			d.Param(1) + `, ` + d.Param(2) + `, ` + d.Param(3) + `, ` + d.Param(4) + `, ` +
			d.Param(5) + `, ` + d.Param(6) + `, ` + d.Param(7) + `)`,
		[]any{t.ID, t.Subject, string(t.Role), t.Hash, d.Time(t.CreatedAt), t.Name, expires}
}

// TokenCheckSQL is the statement of a pending approval.TokenCheck in d, from the given first
// parameter on (hash, id, now): how many tokens have this hash and id, are unrevoked and
// expire after now; 1 when the token is still good, 0 otherwise. It reads one row through the
// hash's unique index.
func TokenCheckSQL(d Dialect, from int) string {
	return `SELECT count(*) FROM tokens WHERE ` + TokenGoodSQL(d.Param(from), d.Param(from+1), d.Param(from+2))
}

// TokenGoodSQL is the condition that a row of tokens is the token with the hash and id given,
// unrevoked and unexpired at the instant given (each an SQL expression): the rule of a
// pending approval.TokenCheck, for TokenCheckSQL and for a driver's statement that checks
// the tokens of several requests.
func TokenGoodSQL(hash, id, at string) string {
	return `tokens.hash = ` + hash + ` AND tokens.id = ` + id + ` AND tokens.revoked_at IS NULL AND
		(tokens.expires_at IS NULL OR tokens.expires_at > ` + at + `)`
}

// tokenCheckCond is TokenCheckSQL for c with its arguments added to q, for a condition of
// q's statement.
func tokenCheckCond(q *Query, c *approval.TokenCheck) string {
	sql := TokenCheckSQL(q.Dialect, len(q.Args)+1)
	q.Args = append(q.Args, TokenCheckArgs(q.Dialect, c)...)
	return sql
}

// SettleCheck settles a pending check c that rode in a read's statement (as a condition of
// its WHERE clause): a read that found rows passed it; one that found none may have missed
// them because the token is no longer good, so the token is asked alone (CheckToken). A nil
// c has nothing to settle.
func SettleCheck(ctx context.Context, q Querier, d Dialect, c *approval.TokenCheck, found bool) error {
	switch {
	case c == nil:
		return nil
	case found:
		c.Pass()
		return nil
	}
	return CheckToken(ctx, q, d, c)
}

// TokenCheckArgs are the arguments of TokenCheckSQL for c in d.
func TokenCheckArgs(d Dialect, c *approval.TokenCheck) []any {
	return []any{c.Hash, c.ID, d.Time(c.Now)}
}

// CheckToken runs the pending check c through q: nil when the token is still good (c passes),
// else c's refusal.
func CheckToken(ctx context.Context, q Querier, d Dialect, c *approval.TokenCheck) error {
	good, err := TokenGood(ctx, q, d, c)
	if err != nil {
		return err
	}
	if !good {
		return c.Refuse()
	}
	c.Pass()
	return nil
}

// TokenGood runs the check c through q and reports whether the token is still good, leaving c
// pending: for a driver that settles c later (once the write it guards has committed).
func TokenGood(ctx context.Context, q Querier, d Dialect, c *approval.TokenCheck) (bool, error) {
	rows, err := q.Query(ctx, TokenCheckSQL(d, 1), TokenCheckArgs(d, c)...)
	n, err := first(Collect(rows, err, func(r Row) (int, error) {
		var n int
		return n, r.Scan(&n)
	}))("no count")
	if err != nil {
		return false, fmt.Errorf("check token: %w", err)
	}
	return n == 1, nil
}
