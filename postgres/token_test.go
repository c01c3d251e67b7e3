package postgres_test

import (
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
		secret, tok, err := a.CreateToken(ctx, approval.TokenSpec{Subject: "alice", Role: approval.RoleApprover})
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
		if _, err := a.RevokeToken(ctx, tok.ID); err != nil {
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
