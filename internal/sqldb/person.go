package sqldb

import (
	"context"
	"strings"
)

// The addresses identity providers verified (person_addresses, migration 0011): written by
// Service.RecordEmail at an OIDC sign-in, read where a person's address is resolved
// (docs/notifications.md, "Addresses").

// PersonEmails returns the stored addresses of the persons, person to address; persons
// without one are absent. One statement.
func (r Reads) PersonEmails(ctx context.Context, persons []string) (map[string]string, error) {
	m, err := personEmails(ctx, r.DB, r.Dialect, persons)
	return m, r.Translate("read stored addresses", err)
}

// PersonsByEmail returns the persons whose stored address is email, compared without case,
// by name. One statement on the index of the lower-cased address.
func (r Reads) PersonsByEmail(ctx context.Context, email string) ([]string, error) {
	rows, err := r.DB.Query(ctx, r.Dialect.SQL(`SELECT person FROM person_addresses WHERE email_key = $1 ORDER BY person`),
		strings.ToLower(email))
	persons, err := Collect(rows, err, func(row Row) (p string, err error) { return p, row.Scan(&p) })
	return persons, r.Translate("find stored address", err)
}

// PersonEmailGetMany is PersonEmails in the transaction.
func (t Tx) PersonEmailGetMany(ctx context.Context, persons []string) (map[string]string, error) {
	m, err := personEmails(ctx, t.Run, t.Dialect, persons)
	return m, t.Translate("read stored addresses", err)
}

// PersonEmailUpsert stores email as person's address at the transaction's time, or changes
// the stored one; an address that is already the stored one is left as it is (its
// updated_at says when it last changed).
func (t Tx) PersonEmailUpsert(ctx context.Context, person, email string) error {
	return t.write(ctx, "store address", `
		INSERT INTO person_addresses (person, email, email_key, updated_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (person) DO UPDATE
		SET email = excluded.email, email_key = excluded.email_key, updated_at = excluded.updated_at
		WHERE person_addresses.email <> excluded.email`,
		person, email, strings.ToLower(email), t.Dialect.Time(t.At))
}

// personEmails reads the addresses of persons through q: one statement, whose text is the
// same for any number of persons (the list is one argument), so a driver's statement cache
// keeps one statement for it.
func personEmails(ctx context.Context, q Querier, d Dialect, persons []string) (map[string]string, error) {
	m := map[string]string{}
	if len(persons) == 0 {
		return m, nil
	}
	rows, err := q.Query(ctx, `SELECT person, email FROM person_addresses WHERE `+d.AnyOf("person", d.Param(1)), d.List(persons))
	type pair struct{ person, email string }
	list, err := Collect(rows, err, func(row Row) (p pair, err error) { return p, row.Scan(&p.person, &p.email) })
	if err != nil {
		return nil, err
	}
	for _, p := range list {
		m[p.person] = p.email
	}
	return m, nil
}
