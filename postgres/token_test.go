package postgres_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// TestRevocationHoldsOnEveryReplica runs two replicas (a Store and a Service each, with their
// own pools and process memory) on one schema. Once a revocation through one returns, the
// other refuses the token on its very next request, though it accepted it a moment before:
// nothing a replica remembers keeps a revoked token alive.
func TestRevocationHoldsOnEveryReplica(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := testdb.DSN(t, testdb.Postgres)
	storeA, storeB := mustOpen(t, dsn), mustOpen(t, dsn)
	if err := storeA.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	a, b := &approval.Service{Store: storeA}, &approval.Service{Store: storeB}
	t.Cleanup(func() { a.Wait(); b.Wait() })

	for round := range 20 {
		secret, tok, err := a.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "alice", Role: approval.RoleApprover})
		if err != nil {
			t.Fatalf("round %d: create token: %v", round, err)
		}
		// Replica B uses the token busily from many goroutines while A revokes it; every
		// request B starts after the revocation returned must be refused.
		const users = 8
		var used, revoked, wg sync.WaitGroup
		used.Add(users)
		revoked.Add(1)
		errs := make([]error, users)
		for i := range users {
			wg.Go(func() {
				if _, err := b.Authenticate(ctx, secret); err != nil {
					t.Errorf("round %d: replica B before the revocation: %v", round, err)
				}
				used.Done()
				revoked.Wait()
				_, errs[i] = b.Authenticate(ctx, secret)
			})
		}
		used.Wait()
		if _, err := a.RevokeToken(ctx, tokenIssuer, tok.ID); err != nil {
			t.Fatalf("round %d: revoke on replica A: %v", round, err)
		}
		revoked.Done()
		wg.Wait()
		for i, err := range errs {
			if approval.ErrorCode(err) != approval.EUNAUTHORIZED {
				t.Fatalf("round %d: replica B request %d after the revocation: got %v, want %s", round, i, err, approval.EUNAUTHORIZED)
			}
		}
	}
}

// TestTokenByHashBatched looks up many tokens at once, known and unknown, through the store's
// batcher, and then several in one batch for certain: each look-up gets its own token, by
// hash, or nothing (ENOTFOUND), never another's.
func TestTokenByHashBatched(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := mustOpen(t, testdb.DSN(t, testdb.Postgres))
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	svc := &approval.Service{Store: s}
	const tokens, lookups = 12, 96
	hashes := make([][]byte, tokens)
	ids := make([]string, tokens)
	for i := range tokens {
		secret, tok, err := svc.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: fmt.Sprint("user-", i), Role: approval.RoleApprover})
		if err != nil {
			t.Fatalf("create token: %v", err)
		}
		hashes[i], ids[i] = approval.HashToken(secret), tok.ID
	}
	errs := make([]error, lookups)
	race(lookups, func(i int) {
		k := i % (tokens + 1) // tokens known, and one unknown
		hash := []byte(fmt.Sprint("unknown-", i))
		if k < tokens {
			hash = hashes[k]
		}
		got, err := s.TokenByHash(ctx, hash)
		switch {
		case k == tokens && approval.ErrorCode(err) != approval.ENOTFOUND:
			errs[i] = fmt.Errorf("unknown hash: got %+v, %v; want ENOTFOUND", got, err)
		case k < tokens && (err != nil || got.ID != ids[k] || !bytes.Equal(got.Hash, hashes[k])):
			errs[i] = fmt.Errorf("token %d: got %+v, %v; want %s", k, got, err, ids[k])
		}
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	// One batch for certain: the tokens in reverse order, one twice, unknown hashes between.
	var want []string
	var batch [][]byte
	for i := tokens - 1; i >= 0; i-- {
		batch, want = append(batch, hashes[i]), append(want, ids[i])
		if i%4 == 0 {
			batch, want = append(batch, []byte(fmt.Sprint("unknown-", i))), append(want, "")
		}
	}
	batch, want = append(batch, hashes[3]), append(want, ids[3])
	got, err := s.TokenBatch(batch)
	if err != nil {
		t.Fatalf("one batch: %v", err)
	}
	for i, tok := range got {
		id := ""
		if tok != nil {
			id = tok.ID
			if !bytes.Equal(tok.Hash, batch[i]) {
				t.Fatalf("one batch, look-up %d: got token %s of another hash", i, id)
			}
		}
		if id != want[i] {
			t.Fatalf("one batch, look-up %d: got %q, want %q (empty: none)", i, id, want[i])
		}
	}
}
