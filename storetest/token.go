package storetest

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// exerciseTokens covers the bearer token records, the one-time bootstrap, Ping and
// HeartbeatUpdate.
func exerciseTokens(t *testing.T, s suite) {
	s.run(t, "CreateAndFind", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		secret, tok := approval.NewToken("alice", approval.RoleApprover, f.clock.Now())
		if err := insertToken(ctx, f.store, tok); err != nil {
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
		wantCode(t, insertToken(ctx, f.store, tok), approval.ECONFLICT)
		_, _, err = f.service().CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "mallory", Role: "root"})
		wantCode(t, err, approval.EINVALID)
	})

	// Several replicas starting on a new database at once: exactly one prints the bootstrap
	// admin token, and only its token works.
	s.run(t, "BootstrapOnce", func(t *testing.T, f *fixture) {
		const racers = 20
		ctx := t.Context()
		// A token created by `approvald token create` is not a bootstrap: it does not stop one.
		if _, _, err := f.service().CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "ci-bot", Role: approval.RoleRequester}); err != nil {
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

	s.run(t, "NameAndExpiry", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		secret, tok, err := svc.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "ci-bot", Role: approval.RoleRequester, Name: "ci deploy bot", ExpiresIn: time.Hour})
		if err != nil {
			t.Fatalf("create token: %v", err)
		}
		got, err := f.store.Token(ctx, tok.ID)
		if err != nil {
			t.Fatalf("read token: %v", err)
		}
		if got.Name != "ci deploy bot" || got.ExpiresAt == nil || got.RevokedAt != nil || got.LastUsedAt != nil {
			t.Fatalf("token: got %+v, want named, expiring, not revoked, never used", got)
		}
		wantTime(t, "expires_at", *got.ExpiresAt, f.clock.Now().Add(time.Hour))

		// Expiry is read with the clock: a second before it the token works, at it not.
		f.clock.Advance(time.Hour - time.Second)
		if _, err := svc.Authenticate(ctx, secret); err != nil {
			t.Fatalf("authenticate before expiry: %v", err)
		}
		f.clock.Advance(time.Second)
		wantCode(t, authenticate(svc, secret), approval.EUNAUTHORIZED)
		svc.Wait()

		_, err = f.store.Token(ctx, "tok_missing")
		wantCode(t, err, approval.ENOTFOUND)
	})

	s.run(t, "PolicyRefusesBadSpecs", func(t *testing.T, f *fixture) {
		svc := f.service()
		for _, spec := range []approval.TokenSpec{
			{Subject: "", Role: approval.RoleApprover},
			{Subject: "a\x00b", Role: approval.RoleApprover},
			{Subject: "alice", Role: "root"},
			{Subject: "alice", Role: approval.RoleApprover, Name: "line\nbreak"},
			{Subject: "alice", Role: approval.RoleApprover, Name: string(make([]rune, approval.MaxTokenNameLength+1))},
			{Subject: "alice", Role: approval.RoleApprover, ExpiresIn: -time.Second},
		} {
			_, _, err := svc.CreateToken(t.Context(), tokenIssuer, spec)
			wantCode(t, err, approval.EINVALID)
		}
		list, _, err := f.store.Tokens(t.Context(), approval.TokenFilter{})
		if err != nil || len(list) != 0 {
			t.Fatalf("tokens after refused creates: got %d, %v, want none", len(list), err)
		}
	})

	s.run(t, "ListPaged", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		var made []string
		for i := range 5 {
			_, tok, err := svc.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "alice", Role: approval.RoleApprover, Name: string(rune('a' + i))})
			if err != nil {
				t.Fatalf("create token %d: %v", i, err)
			}
			made = append(made, tok.ID)
			f.clock.Advance(time.Second)
		}
		var seen []string
		cursor := ""
		for pages := 0; ; pages++ {
			list, next, err := f.store.Tokens(ctx, approval.TokenFilter{Limit: 2, Cursor: cursor})
			if err != nil {
				t.Fatalf("list tokens: %v", err)
			}
			for _, tok := range list {
				if len(tok.Hash) == 0 {
					t.Fatalf("token %s listed without its hash", tok.ID)
				}
				seen = append(seen, tok.ID)
			}
			if cursor = next; cursor == "" {
				break
			}
		}
		slices.Reverse(made)
		if !slices.Equal(seen, made) {
			t.Fatalf("listed tokens: got %v, want newest first %v", seen, made)
		}
		_, _, err := f.store.Tokens(ctx, approval.TokenFilter{Limit: approval.MaxPageSize + 1})
		wantCode(t, err, approval.EINVALID)
		_, _, err = f.store.Tokens(ctx, approval.TokenFilter{Cursor: "nonsense"})
		wantCode(t, err, approval.EINVALID)
	})

	s.run(t, "Revoke", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		secret, tok, err := svc.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "alice", Role: approval.RoleApprover})
		if err != nil {
			t.Fatalf("create token: %v", err)
		}
		if _, err := svc.Authenticate(ctx, secret); err != nil {
			t.Fatalf("authenticate: %v", err)
		}
		f.clock.Advance(time.Minute)
		revoked, err := svc.RevokeToken(ctx, tokenIssuer, tok.ID)
		if err != nil {
			t.Fatalf("revoke: %v", err)
		}
		if revoked.RevokedAt == nil {
			t.Fatalf("revoke: got no revoked_at")
		}
		wantTime(t, "revoked_at", *revoked.RevokedAt, f.clock.Now())
		// The same Service, which authenticated the token a moment ago, refuses it now.
		wantCode(t, authenticate(svc, secret), approval.EUNAUTHORIZED)

		// Revoking again changes nothing.
		f.clock.Advance(time.Minute)
		again, err := svc.RevokeToken(ctx, tokenIssuer, tok.ID)
		if err != nil {
			t.Fatalf("revoke again: %v", err)
		}
		wantTime(t, "revoked_at after a second revoke", *again.RevokedAt, *revoked.RevokedAt)

		_, err = svc.RevokeToken(ctx, tokenIssuer, "tok_missing")
		wantCode(t, err, approval.ENOTFOUND)
		svc.Wait()
	})

	s.run(t, "Rotate", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		oldSecret, old, err := svc.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "ci-bot", Role: approval.RoleRequester, Name: "ci", ExpiresIn: 24 * time.Hour})
		if err != nil {
			t.Fatalf("create token: %v", err)
		}
		f.clock.Advance(time.Hour)
		newSecret, next, err := svc.RotateToken(ctx, tokenIssuer, old.ID)
		if err != nil {
			t.Fatalf("rotate: %v", err)
		}
		if next.ID == old.ID || newSecret == oldSecret || next.Subject != "ci-bot" || next.Role != approval.RoleRequester || next.Name != "ci" {
			t.Fatalf("rotated token: got %+v, want a new id and secret for ci-bot, requester, ci", next)
		}
		wantTime(t, "rotated expires_at", *next.ExpiresAt, f.clock.Now().Add(24*time.Hour))
		wantCode(t, authenticate(svc, oldSecret), approval.EUNAUTHORIZED)
		got, err := svc.Authenticate(ctx, newSecret)
		if err != nil || got.ID != next.ID {
			t.Fatalf("authenticate with the new secret: got %v, %v, want %s", got, err, next.ID)
		}
		stored, err := f.store.Token(ctx, old.ID)
		if err != nil || stored.RevokedAt == nil {
			t.Fatalf("the old token: got %+v, %v, want revoked", stored, err)
		}

		_, _, err = svc.RotateToken(ctx, tokenIssuer, old.ID)
		wantCode(t, err, approval.ECONFLICT)
		_, _, err = svc.RotateToken(ctx, tokenIssuer, "tok_missing")
		wantCode(t, err, approval.ENOTFOUND)
		svc.Wait()
	})

	// Rotations of one token racing: exactly one makes a successor, the others are told the
	// token is revoked, and exactly one secret works afterwards.
	s.run(t, "RotateRace", func(t *testing.T, f *fixture) {
		const racers = 10
		ctx := t.Context()
		svc := f.service()
		_, old, err := svc.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "alice", Role: approval.RoleApprover})
		if err != nil {
			t.Fatalf("create token: %v", err)
		}
		secrets := make([]string, racers)
		errs := make([]error, racers)
		race(racers, func(i int) { secrets[i], _, errs[i] = svc.RotateToken(ctx, tokenIssuer, old.ID) })
		won := 0
		for i := range racers {
			if errs[i] == nil {
				won++
				if _, err := svc.Authenticate(ctx, secrets[i]); err != nil {
					t.Fatalf("the winner's secret: %v", err)
				}
				continue
			}
			wantCode(t, errs[i], approval.ECONFLICT)
		}
		if won != 1 {
			t.Fatalf("rotations: got %d winners, want 1", won)
		}
		list, _, err := f.store.Tokens(ctx, approval.TokenFilter{})
		if err != nil || len(list) != 2 {
			t.Fatalf("tokens after the race: got %d, %v, want 2", len(list), err)
		}
		svc.Wait()
	})

	// last_used_at follows use to within a minute, written at most once a minute per token.
	s.run(t, "LastUsedCoarse", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		secret, tok, err := svc.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "alice", Role: approval.RoleApprover})
		if err != nil {
			t.Fatalf("create token: %v", err)
		}
		lastUsed := func() *time.Time {
			t.Helper()
			svc.Wait()
			got, err := f.store.Token(ctx, tok.ID)
			if err != nil {
				t.Fatalf("read token: %v", err)
			}
			return got.LastUsedAt
		}
		// Many requests at once: one write, at their instant.
		first := f.clock.Now()
		errs := make([]error, 20)
		race(20, func(i int) { _, errs[i] = svc.Authenticate(ctx, secret) })
		for _, err := range errs {
			if err != nil {
				t.Fatalf("authenticate: %v", err)
			}
		}
		if got := lastUsed(); got == nil {
			t.Fatalf("last_used_at: got none after use")
		} else {
			wantTime(t, "last_used_at", *got, first)
		}

		// Within the minute, on this process or another (a second Service): no write.
		f.clock.Advance(59 * time.Second)
		other := f.service()
		for _, s := range []*approval.Service{svc, other} {
			if _, err := s.Authenticate(ctx, secret); err != nil {
				t.Fatalf("authenticate: %v", err)
			}
			s.Wait()
		}
		wantTime(t, "last_used_at within the minute", *lastUsed(), first)

		// Past it: the next use writes.
		f.clock.Advance(2 * time.Second)
		if _, err := other.Authenticate(ctx, secret); err != nil {
			t.Fatalf("authenticate: %v", err)
		}
		other.Wait()
		wantTime(t, "last_used_at past the minute", *lastUsed(), f.clock.Now())

		// The store's guard alone: a write within the minute changes nothing.
		f.clock.Advance(30 * time.Second)
		if err := f.store.TokenSetLastUsedIfOlder(ctx, tok.ID, approval.TokenTouchEvery); err != nil {
			t.Fatalf("touch: %v", err)
		}
		wantTime(t, "last_used_at after a guarded touch", *lastUsed(), f.clock.Now().Add(-30*time.Second))
		if err := f.store.TokenSetLastUsedIfOlder(ctx, "tok_missing", approval.TokenTouchEvery); err != nil {
			t.Fatalf("touch an unknown token: %v", err)
		}
	})

	s.run(t, "Ping", func(t *testing.T, f *fixture) {
		if err := f.store.Ping(t.Context()); err != nil {
			t.Fatalf("ping: %v", err)
		}
	})

	// The write a database that takes writes always takes, again and again: readiness runs
	// it every second in every replica.
	s.run(t, "HeartbeatUpdate", func(t *testing.T, f *fixture) {
		for i := range 3 {
			if err := f.store.HeartbeatUpdate(t.Context()); err != nil {
				t.Fatalf("heartbeat %d: got %v, want nil", i+1, err)
			}
			f.clock.Advance(time.Second)
		}
	})
}

// authenticate is Service.Authenticate for a test that wants only its error.
func authenticate(svc *approval.Service, secret string) error {
	_, err := svc.Authenticate(context.Background(), secret)
	return err
}

// insertToken stores a token record as it is, in a transaction of its own (Tx.TokenInsert):
// for the tests that need a given id and hash, which Service.CreateToken makes itself.
func insertToken(ctx context.Context, s approval.Store, tok approval.Token) error {
	tx, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := tx.TokenInsert(ctx, tok); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// tokenIssuer is the admin the tests make their tokens as.
var tokenIssuer = approval.Principal{Subject: "test-admin", Role: approval.RoleAdmin}
