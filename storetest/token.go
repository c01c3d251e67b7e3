package storetest

import (
	"bytes"
	"testing"

	"github.com/approvald/approval"
)

// exerciseTokens covers the bearer token records, the one-time bootstrap and Ping.
func exerciseTokens(t *testing.T, s suite) {
	s.run(t, "CreateAndFind", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		secret, tok := approval.NewToken("alice", approval.RoleApprover, f.clock.Now())
		if err := f.service().CreateToken(ctx, tok); err != nil {
			t.Fatalf("create token: %v", err)
		}
		got, err := f.store.TokenByHash(ctx, approval.HashToken(secret))
		if err != nil {
			t.Fatalf("token by hash: %v", err)
		}
		if got.ID != tok.ID || got.Subject != "alice" || got.Role != approval.RoleApprover || !bytes.Equal(got.Hash, tok.Hash) {
			t.Fatalf("token: got %+v, want %+v", got, tok)
		}
		wantTime(t, "token created_at", got.CreatedAt, tok.CreatedAt)

		_, err = f.store.TokenByHash(ctx, approval.HashToken(secret+"x"))
		wantCode(t, err, approval.ENOTFOUND)

		// The same id and hash again is a conflict; a role no one knows is refused.
		wantCode(t, f.service().CreateToken(ctx, tok), approval.ECONFLICT)
		_, unknown := approval.NewToken("mallory", "root", f.clock.Now())
		wantCode(t, f.service().CreateToken(ctx, unknown), approval.EINVALID)
	})

	// Several replicas starting on a new database at once: exactly one prints the bootstrap
	// admin token, and only its token works.
	s.run(t, "BootstrapOnce", func(t *testing.T, f *fixture) {
		const racers = 20
		ctx := t.Context()
		// A token created by `approvald token create` is not a bootstrap: it does not stop one.
		_, ordinary := approval.NewToken("ci-bot", approval.RoleRequester, f.clock.Now())
		if err := f.service().CreateToken(ctx, ordinary); err != nil {
			t.Fatalf("create token: %v", err)
		}

		secrets := make([]string, racers)
		tokens := make([]approval.Token, racers)
		for i := range racers {
			secrets[i], tokens[i] = approval.NewToken("admin", approval.RoleAdmin, f.clock.Now())
		}
		won := make([]bool, racers)
		errs := make([]error, racers)
		race(racers, func(i int) { won[i], errs[i] = f.service().Bootstrap(ctx, tokens[i]) })

		winners := 0
		for i := range racers {
			if errs[i] != nil {
				t.Fatalf("bootstrap %d: %v", i, errs[i])
			}
			got, err := f.store.TokenByHash(ctx, approval.HashToken(secrets[i]))
			if !won[i] {
				wantCode(t, err, approval.ENOTFOUND)
				continue
			}
			winners++
			if err != nil {
				t.Fatalf("the bootstrapped token: %v", err)
			}
			if got.Subject != "admin" || got.Role != approval.RoleAdmin {
				t.Fatalf("the bootstrapped token: got %s as %s, want admin as admin", got.Subject, got.Role)
			}
		}
		if winners != 1 {
			t.Fatalf("bootstrap: got %d winners, want 1", winners)
		}

		_, late := approval.NewToken("admin", approval.RoleAdmin, f.clock.Now())
		if ok, err := f.service().Bootstrap(ctx, late); err != nil || ok {
			t.Fatalf("bootstrap after the first: got %v, %v, want false, nil", ok, err)
		}
	})

	s.run(t, "Ping", func(t *testing.T, f *fixture) {
		if err := f.store.Ping(t.Context()); err != nil {
			t.Fatalf("ping: %v", err)
		}
	})
}
