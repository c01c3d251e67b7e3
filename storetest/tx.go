package storetest

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// exerciseTx calls every statement of approval.Tx by name, directly inside Store.Begin, as
// River's riverdrivertest calls every executor method: each case checks the statement's
// effect, and a statement with a guard (IfPending, IfAttempt, IfStatus, IfActive, IfValid,
// IfLive, ForUpdate on a missing row, a unique key) also the case where the guard refuses:
// the statement or the commit fails, or the statement answers as documented, and nothing
// is written. EveryStatement fails when approval.Tx has a method no case names.
func exerciseTx(t *testing.T, s suite) {
	cases := txCases()
	for _, c := range cases {
		s.run(t, c.name, c.fn)
	}
	t.Run("EveryStatement", func(t *testing.T) {
		t.Parallel()
		named := make(map[string]bool, len(cases))
		for _, c := range cases {
			named[c.name] = true
		}
		tx := reflect.TypeFor[approval.Tx]()
		for i := range tx.NumMethod() {
			if m := tx.Method(i).Name; !named[m] {
				t.Errorf("approval.Tx.%s: got no case, want one named after it", m)
			}
		}
		if len(named) != tx.NumMethod() {
			t.Errorf("cases: got %d names, want one per method of approval.Tx (%d)", len(named), tx.NumMethod())
		}
	})
}

// txCase is the case of one approval.Tx statement, named after it.
type txCase struct {
	name string
	fn   func(t *testing.T, f *fixture)
}

// stmt is one or more statements run inside a transaction.
type stmt func(ctx context.Context, tx approval.Tx) error

// inTx runs fn in a transaction of f's store and commits it; any error fails the case.
func inTx(tb testing.TB, f *fixture, fn stmt) {
	tb.Helper()
	ctx := tb.Context()
	tx, err := f.store.Begin(ctx)
	if err != nil {
		tb.Fatalf("begin: %v", err)
	}
	defer tx.Rollback(ctx)
	if err := fn(ctx, tx); err != nil {
		tb.Fatalf("statement: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		tb.Fatalf("commit: %v", err)
	}
}

// txFails runs fn in a transaction of f's store and wants the statement, or else the commit,
// to fail: a guard that refuses fails the transaction (on PostgreSQL a queued write fails
// at the next round trip, the commit's at the latest). It returns the error.
func txFails(tb testing.TB, f *fixture, what string, fn stmt) error {
	tb.Helper()
	ctx := tb.Context()
	tx, err := f.store.Begin(ctx)
	if err != nil {
		tb.Fatalf("begin: %v", err)
	}
	err = fn(ctx, tx)
	if err == nil {
		err = tx.Commit(ctx)
	}
	if rerr := tx.Rollback(ctx); rerr != nil {
		tb.Errorf("%s: rollback after the failure: %v", what, rerr)
	}
	if err == nil {
		tb.Fatalf("%s: got a committed transaction, want the guard to fail it", what)
	}
	return err
}

// wantErr fails the case, saying what, unless err has the application error code want.
func wantErr(tb testing.TB, what string, err error, want string) {
	tb.Helper()
	if got := approval.ErrorCode(err); got != want {
		tb.Fatalf("%s: got %v (%s), want %s", what, err, got, want)
	}
}

// claimExecution claims the one due execution of f's store, in a transaction of its own.
func claimExecution(tb testing.TB, f *fixture) *approval.ExecutionClaim {
	tb.Helper()
	var claims []*approval.ExecutionClaim
	inTx(tb, f, func(ctx context.Context, tx approval.Tx) (err error) {
		claims, err = tx.ExecutionClaimDue(ctx, 10, tx.Now().Add(workLease))
		return err
	})
	if len(claims) != 1 {
		tb.Fatalf("claim executions: got %d claims, want 1", len(claims))
	}
	return claims[0]
}

// recordPending records a new pending inbox event.
func recordPending(tb testing.TB, f *fixture, eventID string) *approval.InboxEvent {
	tb.Helper()
	return mustRecordNew(tb, f.store, newInboxEvent(f.clock.Now(), "deployer", eventID, "test.event", `{"n":1}`))
}

// newOutboxMessage is a pending notification to alice under key, due at now.
func newOutboxMessage(key string, now time.Time) *approval.OutboxMessage {
	return &approval.OutboxMessage{
		ID: approval.NewID("ntf"), NaturalKey: key, Kind: approval.OutboxNotification, Recipient: "alice",
		Channel: approval.ChannelEmail, Event: "test", Payload: []byte(`{}`), Status: approval.OutboxPending,
		NextAttemptAt: &now, CreatedAt: now, UpdatedAt: now,
	}
}

// outboxMessage reads one message and its attempts.
func outboxMessage(tb testing.TB, f *fixture, id string) (*approval.OutboxMessage, []approval.OutboxAttempt) {
	tb.Helper()
	m, attempts, err := f.store.OutboxMessage(tb.Context(), id)
	if err != nil {
		tb.Fatalf("outbox message %s: %v", id, err)
	}
	return m, attempts
}

// claimOutbox claims the due messages of f's store, in a transaction of its own.
func claimOutbox(tb testing.TB, f *fixture) []*approval.OutboxMessage {
	tb.Helper()
	var claimed []*approval.OutboxMessage
	inTx(tb, f, func(ctx context.Context, tx approval.Tx) (err error) {
		claimed, err = tx.OutboxClaimDue(ctx, 10, tx.Now().Add(workLease))
		return err
	})
	return claimed
}

// mustToken reads one token.
func mustToken(tb testing.TB, f *fixture, id string) *approval.Token {
	tb.Helper()
	tok, err := f.store.Token(tb.Context(), id)
	if err != nil {
		tb.Fatalf("token %s: %v", id, err)
	}
	return tok
}

// newSession is a live session of subject made at now, for a day.
func newSession(subject string, now time.Time) *approval.Session {
	return &approval.Session{ID: approval.NewID("ses"), Subject: subject, Role: approval.RoleApprover,
		Via: approval.SessionViaOIDC, CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour)}
}

func txCases() []txCase {
	return []txCase{
		{"Now", func(t *testing.T, f *fixture) {
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if got, want := tx.Now(), f.clock.Now(); !got.Equal(want) || got.Location() != time.UTC {
					t.Fatalf("now: got %v, want %v in UTC", got, want)
				}
				return nil
			})
		}},
		{"Commit", func(t *testing.T, f *fixture) {
			a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.EventInsert(ctx, a.ID, "test.committed", "alice", approval.HTTPCause("t"), nil)
			})
			wantEventTypes(t, f.store, a.ID, approval.EventCreated, "test.committed")
		}},
		{"Rollback", func(t *testing.T, f *fixture) {
			ctx := t.Context()
			a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			tx, err := f.store.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.EventInsert(ctx, a.ID, "test.rolled-back", "alice", approval.HTTPCause("t"), nil); err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatalf("rollback: %v", err)
			}
			wantEventTypes(t, f.store, a.ID, approval.EventCreated)
			// After Commit, Rollback does nothing.
			tx, err = f.store.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatalf("rollback after commit: got %v, want nil", err)
			}
		}},

		{"TokenGetForUpdate", func(t *testing.T, f *fixture) {
			_, tok, err := f.service().CreateToken(t.Context(), tokenIssuer, approval.TokenSpec{Subject: "ci-bot", Role: approval.RoleRequester})
			if err != nil {
				t.Fatal(err)
			}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				got, err := tx.TokenGetForUpdate(ctx, tok.ID)
				if err != nil || got.ID != tok.ID || got.Subject != "ci-bot" || !bytes.Equal(got.Hash, tok.Hash) {
					t.Fatalf("token: got %+v, %v; want %s of ci-bot", got, err, tok.ID)
				}
				_, err = tx.TokenGetForUpdate(ctx, "tok_missing")
				wantErr(t, "missing token", err, approval.ENOTFOUND)
				return nil
			})
		}},
		{"TokenSetRevokedIfActive", func(t *testing.T, f *fixture) {
			_, tok, err := f.service().CreateToken(t.Context(), tokenIssuer, approval.TokenSpec{Subject: "ci-bot", Role: approval.RoleRequester})
			if err != nil {
				t.Fatal(err)
			}
			revokedAt := f.clock.Now()
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.TokenSetRevokedIfActive(ctx, tok.ID) })
			if got := mustToken(t, f, tok.ID).RevokedAt; got == nil || !got.Equal(revokedAt) {
				t.Fatalf("revoked at: got %v, want %v", got, revokedAt)
			}
			f.clock.Advance(time.Minute)
			txFails(t, f, "revoke a revoked token", func(ctx context.Context, tx approval.Tx) error {
				return tx.TokenSetRevokedIfActive(ctx, tok.ID)
			})
			if got := mustToken(t, f, tok.ID).RevokedAt; got == nil || !got.Equal(revokedAt) {
				t.Fatalf("revoked at after the refused revoke: got %v, want %v", got, revokedAt)
			}
		}},
		{"TokenInsert", func(t *testing.T, f *fixture) {
			now := f.clock.Now()
			tok := approval.Token{ID: approval.NewID("tok"), Name: "deploys", Subject: "ci-bot", Role: approval.RoleRequester,
				Hash: approval.HashToken("secret-1"), CreatedAt: now}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.TokenInsert(ctx, tok) })
			if got := mustToken(t, f, tok.ID); got.Name != "deploys" || got.Subject != "ci-bot" || !got.CreatedAt.Equal(now) {
				t.Fatalf("token: got %+v, want %+v", got, tok)
			}
			// A duplicate id, and a duplicate hash, are ECONFLICT and write nothing.
			dupID := tok
			dupID.Hash, dupID.Subject = approval.HashToken("secret-2"), "mallory"
			wantErr(t, "duplicate id", txFails(t, f, "duplicate id", func(ctx context.Context, tx approval.Tx) error {
				return tx.TokenInsert(ctx, dupID)
			}), approval.ECONFLICT)
			dupHash := tok
			dupHash.ID = approval.NewID("tok")
			wantErr(t, "duplicate hash", txFails(t, f, "duplicate hash", func(ctx context.Context, tx approval.Tx) error {
				return tx.TokenInsert(ctx, dupHash)
			}), approval.ECONFLICT)
			if got := mustToken(t, f, tok.ID); got.Subject != "ci-bot" {
				t.Fatalf("token after the duplicate: got subject %s, want ci-bot", got.Subject)
			}
			if _, err := f.store.Token(t.Context(), dupHash.ID); approval.ErrorCode(err) != approval.ENOTFOUND {
				t.Fatalf("token of the duplicate hash: got %v, want ENOTFOUND", err)
			}
		}},
		{"BootstrapInsert", func(t *testing.T, f *fixture) {
			for i, want := range []bool{true, false} {
				inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
					got, err := tx.BootstrapInsert(ctx, "tok_boot")
					if err != nil || got != want {
						t.Fatalf("bootstrap %d: got %v, %v; want %v", i, got, err, want)
					}
					return nil
				})
			}
		}},

		{"ApprovalGetForUpdate", func(t *testing.T, f *fixture) {
			a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				got, err := tx.ApprovalGetForUpdate(ctx, a.ID)
				if err != nil || got.ID != a.ID || got.Status != approval.StatusPending || !slices.Equal(got.Approvers, a.Approvers) {
					t.Fatalf("approval: got %+v, %v; want %s pending with %v", got, err, a.ID, a.Approvers)
				}
				_, err = tx.ApprovalGetForUpdate(ctx, "apr_missing")
				wantErr(t, "missing approval", err, approval.ENOTFOUND)
				return nil
			})
		}},
		{"ApprovalGetForUpdateMany", func(t *testing.T, f *fixture) {
			a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			b := PendingApproval(t, f.clock.Now())
			b.Approvers, b.RequiredApprovals = []string{"alice", "bob"}, 2
			b = MustCreate(t, f.store, b)
			vote := approval.DecideRequest{ApprovalID: b.ID, Approver: "alice", Verdict: approval.VerdictApprove, Cause: voteCause("alice")}
			if _, err := f.service().Decide(t.Context(), asAdmin("alice"), vote); err != nil {
				t.Fatal(err)
			}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				got, err := tx.ApprovalGetForUpdateMany(ctx, []string{b.ID, "apr_missing", a.ID})
				if err != nil || len(got) != 2 {
					t.Fatalf("approvals: got %d, %v; want 2", len(got), err)
				}
				byID := map[string]*approval.Approval{got[0].ID: got[0], got[1].ID: got[1]}
				if ga := byID[a.ID]; ga == nil || ga.Status != approval.StatusPending || !slices.Equal(ga.Approvers, a.Approvers) || len(ga.Decisions) != 0 {
					t.Fatalf("approval %s: got %+v; want it pending with %v and no vote", a.ID, ga, a.Approvers)
				}
				if gb := byID[b.ID]; gb == nil || len(gb.Decisions) != 1 || gb.Decisions[0].Approver != "alice" {
					t.Fatalf("approval %s: got %+v; want alice's vote", b.ID, gb)
				}
				return nil
			})
		}},
		{"ApprovalGetByIDMany", func(t *testing.T, f *fixture) {
			a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			b := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				got, err := tx.ApprovalGetByIDMany(ctx, []string{a.ID, "apr_missing", b.ID})
				var ids []string
				for _, g := range got {
					ids = append(ids, g.ID)
				}
				slices.Sort(ids)
				want := []string{a.ID, b.ID}
				slices.Sort(want)
				if err != nil || !slices.Equal(ids, want) {
					t.Fatalf("approvals: got %v, %v; want %v", ids, err, want)
				}
				return nil
			})
		}},
		{"ApprovalIDsByOperationKey", func(t *testing.T, f *fixture) {
			a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if got, err := tx.ApprovalIDsByOperationKey(ctx, a.OperationKey, 2); err != nil || !slices.Equal(got, []string{a.ID}) {
					t.Fatalf("ids by key: got %v, %v; want [%s]", got, err, a.ID)
				}
				if got, err := tx.ApprovalIDsByOperationKey(ctx, "no-such-key", 2); err != nil || len(got) != 0 {
					t.Fatalf("ids by an unused key: got %v, %v; want none", got, err)
				}
				return nil
			})
		}},
		{"ApprovalSetStatusIfPending", func(t *testing.T, f *fixture) {
			a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			now := f.clock.Now()
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.ApprovalSetStatusIfPending(ctx, a.ID, approval.StatusApproved, &now)
			})
			got := mustApproval(t, f.store, a.ID)
			if got.Status != approval.StatusApproved || got.Version != a.Version+1 || got.DecidedAt == nil || !got.DecidedAt.Equal(now) {
				t.Fatalf("approval: got %s v%d decided %v; want approved v%d at %v", got.Status, got.Version, got.DecidedAt, a.Version+1, now)
			}
			// No longer pending: refused.
			txFails(t, f, "reject an approved approval", func(ctx context.Context, tx approval.Tx) error {
				return tx.ApprovalSetStatusIfPending(ctx, a.ID, approval.StatusRejected, &now)
			})
			if again := mustApproval(t, f.store, a.ID); again.Status != approval.StatusApproved || again.Version != got.Version {
				t.Fatalf("approval after the refused write: got %s v%d, want approved v%d", again.Status, again.Version, got.Version)
			}
			// Pending but due: only expired is allowed; pending and not due: expired is refused.
			due := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			notDue := MustCreate(t, f.store, PendingApproval(t, f.clock.Now().Add(48*time.Hour)))
			f.clock.Advance(due.ExpiresAt.Sub(f.clock.Now()))
			txFails(t, f, "approve a due approval", func(ctx context.Context, tx approval.Tx) error {
				return tx.ApprovalSetStatusIfPending(ctx, due.ID, approval.StatusApproved, &now)
			})
			txFails(t, f, "expire an approval not due", func(ctx context.Context, tx approval.Tx) error {
				return tx.ApprovalSetStatusIfPending(ctx, notDue.ID, approval.StatusExpired, &now)
			})
			for _, id := range []string{due.ID, notDue.ID} {
				if got := mustApproval(t, f.store, id); got.Status != approval.StatusPending || got.Version != 1 {
					t.Fatalf("approval %s after the refused write: got %s v%d, want pending v1", id, got.Status, got.Version)
				}
			}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.ApprovalSetStatusIfPending(ctx, due.ID, approval.StatusExpired, &now)
			})
		}},
		{"ApprovalIDsDueForUpdate", func(t *testing.T, f *fixture) {
			due := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			MustCreate(t, f.store, PendingApproval(t, f.clock.Now().Add(time.Hour)))
			f.clock.Advance(due.ExpiresAt.Sub(f.clock.Now()))
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if got, err := tx.ApprovalIDsDueForUpdate(ctx, 10); err != nil || !slices.Equal(got, []string{due.ID}) {
					t.Fatalf("due: got %v, %v; want [%s]", got, err, due.ID)
				}
				return nil
			})
		}},
		{"ApprovalRemindDueForUpdate", func(t *testing.T, f *fixture) {
			start := f.clock.Now().UTC().Truncate(approval.Precision)
			reminded := func(every time.Duration) *approval.Approval {
				a := PendingApproval(t, f.clock.Now())
				a.Resolved = &approval.Resolved{Policy: "p", Version: "v", RemindEvery: every,
					Stages: []approval.Stage{{Rules: []approval.Rule{{People: []string{"alice", "bob"}, Approvals: 1}}}}}
				return MustCreate(t, f.store, a)
			}
			soon := reminded(time.Hour)
			later := reminded(2 * time.Hour)
			reminded(48 * time.Hour) // at or after the expiry: no reminder
			MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			decided := reminded(time.Hour)
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				now := tx.Now()
				return tx.ApprovalSetStatusIfPending(ctx, decided.ID, approval.StatusApproved, &now)
			})
			due := func(want ...string) {
				t.Helper()
				inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
					got, err := tx.ApprovalRemindDueForUpdate(ctx, 10)
					var ids []string
					for _, d := range got {
						ids = append(ids, d.ID)
						if !d.StageStartedAt.Equal(start) {
							t.Errorf("stage of %s started: got %s, want the create's %s", d.ID, d.StageStartedAt, start)
						}
					}
					if err != nil || !slices.Equal(ids, want) {
						t.Fatalf("due for a reminder: got %v, %v; want %v", ids, err, want)
					}
					return nil
				})
			}
			f.clock.Advance(59 * time.Minute)
			due()
			f.clock.Advance(time.Minute)
			due(soon.ID)
			f.clock.Advance(time.Hour)
			due(soon.ID, later.ID) // the soonest due first
		}},
		{"ApprovalSetReminder", func(t *testing.T, f *fixture) {
			a := PendingApproval(t, f.clock.Now())
			a.Resolved = &approval.Resolved{Policy: "p", Version: "v", RemindEvery: time.Hour,
				Stages: []approval.Stage{{Rules: []approval.Rule{{People: []string{"alice"}, Approvals: 1}}}}}
			a = MustCreate(t, f.store, a)
			started := f.clock.Now().Add(30 * time.Minute).UTC().Truncate(approval.Precision)
			next := started.Add(time.Hour)
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.ApprovalSetReminder(ctx, a.ID, started, &next)
			})
			f.clock.Advance(90*time.Minute - time.Microsecond)
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if got, err := tx.ApprovalRemindDueForUpdate(ctx, 10); err != nil || len(got) != 0 {
					t.Fatalf("due before the reminder set: got %v, %v; want none", got, err)
				}
				return nil
			})
			f.clock.Advance(time.Microsecond)
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				got, err := tx.ApprovalRemindDueForUpdate(ctx, 10)
				if err != nil || len(got) != 1 || got[0].ID != a.ID || !got[0].StageStartedAt.Equal(started) {
					t.Fatalf("due: got %+v, %v; want %s, its stage started at %s", got, err, a.ID, started)
				}
				return tx.ApprovalSetReminder(ctx, a.ID, started, nil)
			})
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if got, err := tx.ApprovalRemindDueForUpdate(ctx, 10); err != nil || len(got) != 0 {
					t.Fatalf("due with no reminder set: got %v, %v; want none", got, err)
				}
				return nil
			})
			txFails(t, f, "set the reminder of a missing approval", func(ctx context.Context, tx approval.Tx) error {
				return tx.ApprovalSetReminder(ctx, "apr_missing", started, nil)
			})
		}},
		{"ApprovalAskReplace", func(t *testing.T, f *fixture) {
			a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now())) // asks alice and bob
			asking := func(what, person string, groups []string, want ...*approval.Approval) {
				t.Helper()
				got, _ := mustList(t, f.store, approval.ApprovalFilter{AskedOf: person, AskedGroups: groups})
				wantIDs(t, what, got, want)
			}
			asking("alice, as created", "alice", nil, a)
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.ApprovalAskReplace(ctx, a.ID, a.CreatedAt, []approval.Ask{{Group: "sre"}, {Person: "fiona"}, {Group: "security"}})
			})
			asking("alice, replaced", "alice", nil)
			asking("fiona", "fiona", nil, a)
			asking("someone in sre", "zed", []string{"sre"}, a)
			asking("someone in security and sre", "zed", []string{"security", "sre"}, a)
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.ApprovalAskReplace(ctx, a.ID, a.CreatedAt, nil)
			})
			asking("fiona, none asked", "fiona", nil)
			asking("someone in sre, none asked", "zed", []string{"sre"})
			txFails(t, f, "ask for a missing approval", func(ctx context.Context, tx approval.Tx) error {
				return tx.ApprovalAskReplace(ctx, "apr_missing", a.CreatedAt, []approval.Ask{{Person: "alice"}})
			})
			asking("alice, after the refused write", "alice", nil)
		}},
		{"ApprovalIDsWithoutAsksForUpdate", func(t *testing.T, f *fixture) {
			underPolicy := func() *approval.Approval {
				a := PendingApproval(t, f.clock.Now())
				a.Resolved = &approval.Resolved{Policy: "p", Version: "v",
					Stages: []approval.Stage{{Rules: []approval.Rule{{Group: "sre", Approvals: 1}}}}}
				f.clock.Advance(time.Second)
				return MustCreate(t, f.store, a)
			}
			underPolicy() // asks sre: never found
			forgotten, later := underPolicy(), underPolicy()
			named := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			decided := underPolicy()
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				now := tx.Now()
				if err := tx.ApprovalSetStatusIfPending(ctx, decided.ID, approval.StatusApproved, &now); err != nil {
					return err
				}
				for _, a := range []*approval.Approval{forgotten, later, named} {
					if err := tx.ApprovalAskReplace(ctx, a.ID, a.CreatedAt, nil); err != nil {
						return err
					}
				}
				return nil
			})
			without := func(limit int, want ...string) {
				t.Helper()
				inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
					got, err := tx.ApprovalIDsWithoutAsksForUpdate(ctx, limit)
					if err != nil || !slices.Equal(got, want) {
						t.Fatalf("pending under a policy, asking nobody, up to %d: got %v, %v; want %v", limit, got, err, want)
					}
					return nil
				})
			}
			without(10, forgotten.ID, later.ID) // oldest first; not the named one, not the decided one
			without(1, forgotten.ID)
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.ApprovalAskReplace(ctx, forgotten.ID, forgotten.CreatedAt, []approval.Ask{{Group: "sre"}})
			})
			without(10, later.ID)
		}},
		{"DecisionInsert", func(t *testing.T, f *fixture) {
			a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			d := approval.Decision{Approver: "alice", Verdict: approval.VerdictApprove, Comment: "ok", At: f.clock.Now()}
			vote := func(ctx context.Context, tx approval.Tx) error {
				if err := tx.EventInsert(ctx, a.ID, approval.EventVoted, "alice", approval.HTTPCause("v"), nil); err != nil {
					return err
				}
				return tx.DecisionInsert(ctx, a.ID, d)
			}
			inTx(t, f, vote)
			got := mustApproval(t, f.store, a.ID).Decisions
			if len(got) != 1 || got[0].Approver != "alice" || got[0].Verdict != approval.VerdictApprove || got[0].Comment != "ok" {
				t.Fatalf("decisions: got %+v, want alice's approval", got)
			}
			// One decision per approver: a second is refused, its event with it.
			txFails(t, f, "second decision of alice", vote)
			wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventVoted)
		}},
		{"DecisionInsertIfPending", func(t *testing.T, f *fixture) {
			cause := approval.HTTPCause("v")
			a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			now := f.clock.Now().UTC().Truncate(approval.Precision)
			vote := func(approver string, status approval.Status, x *approval.ExecutionRecord, types ...string) approval.VoteWrite {
				v := approval.VoteWrite{ApprovalID: a.ID, Status: status, Execution: x,
					Vote: approval.Decision{Approver: approver, Verdict: approval.VerdictApprove, Comment: "ok " + approver, At: now}}
				for _, typ := range types {
					v.Events = append(v.Events, approval.Event{Type: typ, Actor: approver, Cause: cause, Detail: map[string]any{"by": approver}})
				}
				if status.Terminal() {
					v.DecidedAt = &now
				}
				return v
			}
			// A vote that leaves the approval pending: its event, its decision, version+1.
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.DecisionInsertIfPending(ctx, vote("alice", approval.StatusPending, nil, approval.EventVoted))
			})
			got := mustApproval(t, f.store, a.ID)
			if got.Status != approval.StatusPending || got.Version != a.Version+1 || got.DecidedAt != nil || len(got.Decisions) != 1 || got.Decisions[0].Comment != "ok alice" {
				t.Fatalf("after alice: got %s v%d decided %v, decisions %+v; want pending v%d, alice's vote", got.Status, got.Version, got.DecidedAt, got.Decisions, a.Version+1)
			}
			// The deciding vote: three events in order, the status, the execution.
			x := &approval.ExecutionRecord{ID: approval.NewID("exe"), ApprovalID: a.ID, OperationKey: a.OperationKey,
				DownstreamKey: approval.DownstreamKey(a.Requester, a.OperationKey), Action: a.Action,
				Targeted: true, Status: approval.ExecutionQueued, NextAttemptAt: &now}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.DecisionInsertIfPending(ctx, vote("bob", approval.StatusApproved, x, approval.EventVoted, approval.EventApproved, approval.EventExecutionQueued))
			})
			got = mustApproval(t, f.store, a.ID)
			if got.Status != approval.StatusApproved || got.Version != a.Version+2 || got.DecidedAt == nil || !got.DecidedAt.Equal(now) {
				t.Fatalf("after bob: got %s v%d decided %v; want approved v%d at %v", got.Status, got.Version, got.DecidedAt, a.Version+2, now)
			}
			if len(got.Decisions) != 2 || got.Decisions[0].Approver != "alice" || got.Decisions[1].Approver != "bob" {
				t.Fatalf("decisions: got %+v, want alice's then bob's", got.Decisions)
			}
			if got.Execution == nil || got.Execution.ID != x.ID || got.Execution.Status != approval.ExecutionQueued {
				t.Fatalf("execution: got %+v, want %s queued", got.Execution, x.ID)
			}
			events := wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventVoted, approval.EventVoted,
				approval.EventApproved, approval.EventExecutionQueued)
			for i, e := range events {
				if e.Seq != int64(i+1) {
					t.Fatalf("event %d: got seq %d, want %d", i, e.Seq, i+1)
				}
			}
			if e := events[4]; e.Actor != "bob" || e.Detail["by"] != "bob" || !e.At.Equal(now) {
				t.Fatalf("last event: got actor %s, detail %v, at %v; want bob's, at %v", e.Actor, e.Detail, e.At, now)
			}
			// No longer pending: refused, nothing written, neither the events nor the vote.
			txFails(t, f, "vote on an approved approval", func(ctx context.Context, tx approval.Tx) error {
				return tx.DecisionInsertIfPending(ctx, vote("carol", approval.StatusPending, nil, approval.EventVoted))
			})
			// A second vote of one approver: refused.
			b := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			a = b
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.DecisionInsertIfPending(ctx, vote("alice", approval.StatusPending, nil, approval.EventVoted))
			})
			txFails(t, f, "second vote of alice", func(ctx context.Context, tx approval.Tx) error {
				return tx.DecisionInsertIfPending(ctx, vote("alice", approval.StatusPending, nil, approval.EventVoted))
			})
			// Pending but past its expiry: refused.
			f.clock.Advance(b.ExpiresAt.Sub(f.clock.Now()))
			txFails(t, f, "vote on a due approval", func(ctx context.Context, tx approval.Tx) error {
				return tx.DecisionInsertIfPending(ctx, vote("bob", approval.StatusPending, nil, approval.EventVoted))
			})
			if got := mustApproval(t, f.store, b.ID); got.Status != approval.StatusPending || got.Version != b.Version+1 || len(got.Decisions) != 1 {
				t.Fatalf("after the refused votes: got %s v%d, %d decisions; want pending v%d, alice's vote alone", got.Status, got.Version, len(got.Decisions), b.Version+1)
			}
			wantEventTypes(t, f.store, b.ID, approval.EventCreated, approval.EventVoted)
			wantEventTypes(t, f.store, x.ApprovalID, approval.EventCreated, approval.EventVoted, approval.EventVoted,
				approval.EventApproved, approval.EventExecutionQueued)

			// Votes on several approvals in one transaction, one after the other, as the
			// Service's votes in a batch write them (PostgreSQL: one statement for those on
			// distinct approvals), and a second vote on one of them after the others.
			now = f.clock.Now().UTC().Truncate(approval.Precision)
			c := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			d := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			e := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			xd := &approval.ExecutionRecord{ID: approval.NewID("exe"), ApprovalID: d.ID, OperationKey: d.OperationKey,
				DownstreamKey: approval.DownstreamKey(d.Requester, d.OperationKey), Action: d.Action,
				Status: approval.ExecutionNotConfigured}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				for _, v := range []struct {
					on     *approval.Approval
					by     string
					status approval.Status
					x      *approval.ExecutionRecord
					types  []string
				}{
					{c, "alice", approval.StatusPending, nil, []string{approval.EventVoted}},
					{d, "alice", approval.StatusApproved, xd, []string{approval.EventVoted, approval.EventApproved}},
					{e, "bob", approval.StatusRejected, nil, []string{approval.EventVoted, approval.EventRejected}},
					{c, "bob", approval.StatusPending, nil, []string{approval.EventVoted}},
				} {
					a = v.on
					if err := tx.DecisionInsertIfPending(ctx, vote(v.by, v.status, v.x, v.types...)); err != nil {
						return err
					}
				}
				return nil
			})
			got = mustApproval(t, f.store, c.ID)
			if got.Status != approval.StatusPending || got.Version != c.Version+2 || len(got.Decisions) != 2 || got.Decisions[0].Approver != "alice" || got.Decisions[1].Approver != "bob" {
				t.Fatalf("%s: got %s v%d, decisions %+v; want pending v%d, alice's vote then bob's", c.ID, got.Status, got.Version, got.Decisions, c.Version+2)
			}
			wantEventTypes(t, f.store, c.ID, approval.EventCreated, approval.EventVoted, approval.EventVoted)
			got = mustApproval(t, f.store, d.ID)
			if got.Status != approval.StatusApproved || got.DecidedAt == nil || !got.DecidedAt.Equal(now) || len(got.Decisions) != 1 || got.Execution == nil || got.Execution.ID != xd.ID {
				t.Fatalf("%s: got %s decided %v, decisions %+v, execution %+v; want approved at %v by alice, %s", d.ID, got.Status, got.DecidedAt, got.Decisions, got.Execution, now, xd.ID)
			}
			wantEventTypes(t, f.store, d.ID, approval.EventCreated, approval.EventVoted, approval.EventApproved)
			got = mustApproval(t, f.store, e.ID)
			if got.Status != approval.StatusRejected || got.Execution != nil || len(got.Decisions) != 1 || got.Decisions[0].Approver != "bob" {
				t.Fatalf("%s: got %s, decisions %+v, execution %+v; want rejected by bob, no execution", e.ID, got.Status, got.Decisions, got.Execution)
			}
			wantEventTypes(t, f.store, e.ID, approval.EventCreated, approval.EventVoted, approval.EventRejected)
			// The approvals the votes ended ask nobody any more; the pending one still asks.
			asked, _ := mustList(t, f.store, approval.ApprovalFilter{AskedOf: "alice", Limit: approval.MaxPageSize})
			for _, ap := range asked {
				if ap.ID == d.ID || ap.ID == e.ID {
					t.Errorf("%s, %s by the votes, still asks alice", ap.ID, ap.Status)
				}
			}
			if !slices.ContainsFunc(asked, func(ap *approval.Approval) bool { return ap.ID == c.ID }) {
				t.Errorf("%s, still pending, no longer asks alice", c.ID)
			}
			// One vote's guard fails (its approval is decided already): the transaction fails,
			// and the other vote's writes with it.
			g := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			txFails(t, f, "votes, one on a decided approval", func(ctx context.Context, tx approval.Tx) error {
				a = g
				if err := tx.DecisionInsertIfPending(ctx, vote("alice", approval.StatusPending, nil, approval.EventVoted)); err != nil {
					return err
				}
				a = d
				return tx.DecisionInsertIfPending(ctx, vote("bob", approval.StatusPending, nil, approval.EventVoted))
			})
			if got := mustApproval(t, f.store, g.ID); got.Version != g.Version || len(got.Decisions) != 0 {
				t.Fatalf("%s after the failed transaction: got v%d, decisions %+v; want nothing written", g.ID, got.Version, got.Decisions)
			}
			wantEventTypes(t, f.store, g.ID, approval.EventCreated)
		}},
		{"EventInsert", func(t *testing.T, f *fixture) {
			a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if err := tx.EventInsert(ctx, a.ID, "test.one", "alice", approval.HTTPCause("t"), map[string]any{"n": 1}); err != nil {
					return err
				}
				return tx.EventInsert(ctx, a.ID, "test.two", "bob", approval.HTTPCause("t"), nil)
			})
			events := wantEventTypes(t, f.store, a.ID, approval.EventCreated, "test.one", "test.two")
			for i, e := range events {
				if e.Seq != int64(i+1) {
					t.Fatalf("event %d: got seq %d, want %d", i, e.Seq, i+1)
				}
			}
			if events[1].Actor != "alice" || events[1].Detail["n"] != float64(1) {
				t.Fatalf("event: got actor %s, detail %v; want alice, n=1", events[1].Actor, events[1].Detail)
			}
		}},
		{"EventInsertMany", func(t *testing.T, f *fixture) {
			a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			b := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.EventInsertMany(ctx, []approval.Event{
					{ApprovalID: a.ID, Type: "test.a1", Actor: "alice"},
					{ApprovalID: b.ID, Type: "test.b1", Actor: "bob", Detail: map[string]any{"k": "v"}},
					{ApprovalID: a.ID, Type: "test.a2", Actor: "alice"},
				})
			})
			wantEventTypes(t, f.store, a.ID, approval.EventCreated, "test.a1", "test.a2")
			if events := wantEventTypes(t, f.store, b.ID, approval.EventCreated, "test.b1"); events[1].Seq != 2 || events[1].Detail["k"] != "v" {
				t.Fatalf("b's event: got seq %d, detail %v; want 2, k=v", events[1].Seq, events[1].Detail)
			}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.EventInsertMany(ctx, nil) })
		}},
		{"Notify", func(t *testing.T, f *fixture) {
			// A committed Notify is heard; one rolled back fails nothing and is not heard: a
			// committed signal sent after it arrives while the rolled-back one has not, since
			// both stores deliver in commit order (SQLite within the process after commit,
			// PostgreSQL on the store's one LISTEN connection).
			topic, marker := approval.TopicApproval("apr_rolled_back"), approval.TopicApproval("apr_committed")
			rolledBack, stop := f.store.Subscribe(topic)
			defer stop()
			committed, stopCommitted := f.store.Subscribe(marker)
			defer stopCommitted()
			// Committed until each subscription, which may still be connecting, hears one.
			for _, s := range []struct {
				topic string
				ch    <-chan struct{}
			}{{topic, rolledBack}, {marker, committed}} {
				wantSignal(t, s.ch, s.topic, func(int) {
					inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.Notify(ctx, s.topic) })
				})
			}
			drain(rolledBack)
			drain(committed)

			ctx := t.Context()
			tx, err := f.store.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Notify(ctx, topic); err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatalf("rollback after notify: %v", err)
			}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.Notify(ctx, marker) })
			wantSignalled(t, committed, "the committed signal after a rolled-back one")
			select {
			case <-rolledBack:
				t.Fatal("a Notify that was rolled back was heard")
			default:
			}
		}},
		{"ExecutionInsert", func(t *testing.T, f *fixture) {
			a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			now := f.clock.Now()
			rec := &approval.ExecutionRecord{ID: approval.NewID("exe"), ApprovalID: a.ID, OperationKey: a.OperationKey,
				DownstreamKey: approval.DownstreamKey(a.Requester, a.OperationKey), Action: a.Action, Targeted: true,
				Status: approval.ExecutionQueued, NextAttemptAt: &now, CreatedAt: now, UpdatedAt: now}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.ExecutionInsert(ctx, rec) })
			got := mustExecution(t, f.store, rec.ID)
			if got.ApprovalID != a.ID || !got.Targeted || got.Status != approval.ExecutionQueued || got.NextAttemptAt == nil {
				t.Fatalf("execution: got %+v, want %+v", got, rec)
			}
			// One execution per approval.
			second := *rec
			second.ID = approval.NewID("exe")
			txFails(t, f, "second execution of an approval", func(ctx context.Context, tx approval.Tx) error {
				return tx.ExecutionInsert(ctx, &second)
			})
			if _, err := f.store.Execution(t.Context(), second.ID); approval.ErrorCode(err) != approval.ENOTFOUND {
				t.Fatalf("second execution: got %v, want ENOTFOUND", err)
			}
		}},
		{"ExecutionClaimDue", func(t *testing.T, f *fixture) {
			a, rec := mustApprovedExecution(t, f)
			c := claimExecution(t, f)
			if c.Record.ID != rec.ID || c.Attempt != 1 || c.Recovered || c.Record.Status != approval.ExecutionRunning ||
				c.Approval == nil || c.Approval.ID != a.ID {
				t.Fatalf("claim: got %+v, want attempt 1 of %s", c, rec.ID)
			}
			// Running under a live lease: not due.
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if got, err := tx.ExecutionClaimDue(ctx, 10, tx.Now().Add(workLease)); err != nil || len(got) != 0 {
					t.Fatalf("claim under a live lease: got %d, %v; want none", len(got), err)
				}
				return nil
			})
			// Its lease past, its call never started: claimed again, abandoned.
			f.clock.Advance(workLease)
			if again := claimExecution(t, f); again.Attempt != 2 || again.Recovered || !again.Abandoned {
				t.Fatalf("claim after an unsent lease: got attempt %d, recovered %v, abandoned %v; want 2, false, true", again.Attempt, again.Recovered, again.Abandoned)
			}
			// Its call started, then its lease past: claimed again, recovered.
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				_, err := tx.ExecutionSetSendingIfAttemptMany(ctx, []string{rec.ID}, []int{2}, tx.Now().Add(workLease))
				return err
			})
			f.clock.Advance(workLease)
			if again := claimExecution(t, f); again.Attempt != 3 || !again.Recovered || again.Abandoned {
				t.Fatalf("claim after a sent lease: got attempt %d, recovered %v, abandoned %v; want 3, true, false", again.Attempt, again.Recovered, again.Abandoned)
			}
		}},
		{"ExecutionSetSendingIfAttemptMany", func(t *testing.T, f *fixture) {
			_, r1 := mustApprovedExecution(t, f)
			_, r2 := mustApprovedExecution(t, f)
			_, r3 := mustApprovedExecution(t, f)
			var claims []*approval.ExecutionClaim
			inTx(t, f, func(ctx context.Context, tx approval.Tx) (err error) {
				claims, err = tx.ExecutionClaimDue(ctx, 2, tx.Now().Add(workLease))
				return err
			})
			if len(claims) != 2 {
				t.Fatalf("claim: got %d claims, want 2", len(claims))
			}
			claimed := map[string]bool{claims[0].Record.ID: true, claims[1].Record.ID: true}
			var queued string
			for _, r := range []*approval.ExecutionRecord{r1, r2, r3} {
				if !claimed[r.ID] {
					queued = r.ID
				}
			}
			until := f.clock.Now().Add(time.Hour)
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				// The first claim's attempt, another attempt of the second, and a queued one:
				// only the first is marked, and the transaction goes on.
				marked, err := tx.ExecutionSetSendingIfAttemptMany(ctx,
					[]string{claims[0].Record.ID, claims[1].Record.ID, queued}, []int{1, 2, 0}, until)
				if err != nil || !slices.Equal(marked, []string{claims[0].Record.ID}) {
					t.Fatalf("mark: got %v, %v; want only %s", marked, err, claims[0].Record.ID)
				}
				return nil
			})
			if got := mustExecution(t, f.store, claims[0].Record.ID).LeaseExpiresAt; got == nil || !got.Equal(until) {
				t.Fatalf("marked lease: got %v, want %v", got, until)
			}
			if got := mustExecution(t, f.store, claims[1].Record.ID).LeaseExpiresAt; got == nil || got.Equal(until) {
				t.Fatalf("refused lease: got %v, want the claim's", got)
			}
			// Both leases past: the marked one may have sent its call, the other never did.
			f.clock.Advance(time.Hour)
			var again []*approval.ExecutionClaim
			inTx(t, f, func(ctx context.Context, tx approval.Tx) (err error) {
				again, err = tx.ExecutionClaimDue(ctx, 10, tx.Now().Add(workLease))
				return err
			})
			recovered := make(map[string]bool)
			for _, c := range again {
				if c.Record.ID != queued && c.Recovered == c.Abandoned {
					t.Fatalf("claim of %s: got recovered %v and abandoned %v, want one of them", c.Record.ID, c.Recovered, c.Abandoned)
				}
				recovered[c.Record.ID] = c.Recovered
			}
			if len(again) != 3 || !recovered[claims[0].Record.ID] || recovered[claims[1].Record.ID] || recovered[queued] {
				t.Fatalf("claim after the leases: got %v, want %s alone recovered of 3", recovered, claims[0].Record.ID)
			}
		}},
		{"ExecutionSetLeaseIfAttempt", func(t *testing.T, f *fixture) {
			_, rec := mustApprovedExecution(t, f)
			c := claimExecution(t, f)
			until := f.clock.Now().Add(time.Hour)
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if ok, err := tx.ExecutionSetLeaseIfAttempt(ctx, rec.ID, c.Attempt, until); err != nil || !ok {
					t.Fatalf("renew: got %v, %v; want true", ok, err)
				}
				// Another attempt's renewal: refused, reported, and the transaction goes on.
				if ok, err := tx.ExecutionSetLeaseIfAttempt(ctx, rec.ID, c.Attempt+1, until.Add(time.Hour)); err != nil || ok {
					t.Fatalf("renew of another attempt: got %v, %v; want false", ok, err)
				}
				return nil
			})
			if got := mustExecution(t, f.store, rec.ID).LeaseExpiresAt; got == nil || !got.Equal(until) {
				t.Fatalf("lease: got %v, want %v", got, until)
			}
		}},
		{"ExecutionGetForUpdate", func(t *testing.T, f *fixture) {
			_, rec := mustApprovedExecution(t, f)
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if got, err := tx.ExecutionGetForUpdate(ctx, rec.ID); err != nil || got.ID != rec.ID || got.Status != approval.ExecutionQueued {
					t.Fatalf("execution: got %+v, %v; want %s queued", got, err, rec.ID)
				}
				_, err := tx.ExecutionGetForUpdate(ctx, "exe_missing")
				wantErr(t, "missing execution", err, approval.ENOTFOUND)
				return nil
			})
		}},
		{"ExecutionGetForUpdateMany", func(t *testing.T, f *fixture) {
			_, r1 := mustApprovedExecution(t, f)
			_, r2 := mustApprovedExecution(t, f)
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				got, err := tx.ExecutionGetForUpdateMany(ctx, []string{r2.ID, "exe_missing", r1.ID})
				var ids []string
				for _, g := range got {
					ids = append(ids, g.ID)
				}
				slices.Sort(ids)
				want := []string{r1.ID, r2.ID}
				slices.Sort(want)
				if err != nil || !slices.Equal(ids, want) {
					t.Fatalf("executions: got %v, %v; want %v", ids, err, want)
				}
				return nil
			})
		}},
		{"ExecutionGetByApprovalForUpdate", func(t *testing.T, f *fixture) {
			a, rec := mustApprovedExecution(t, f)
			pending := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if got, err := tx.ExecutionGetByApprovalForUpdate(ctx, a.ID); err != nil || got.ID != rec.ID {
					t.Fatalf("execution of %s: got %+v, %v; want %s", a.ID, got, err, rec.ID)
				}
				_, err := tx.ExecutionGetByApprovalForUpdate(ctx, pending.ID)
				wantErr(t, "execution of a pending approval", err, approval.ENOTFOUND)
				_, err = tx.ExecutionGetByApprovalForUpdate(ctx, "apr_missing")
				wantErr(t, "execution of a missing approval", err, approval.ENOTFOUND)
				return nil
			})
		}},
		{"ExecutionIDsByOperationKey", func(t *testing.T, f *fixture) {
			_, rec := mustApprovedExecution(t, f)
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if got, err := tx.ExecutionIDsByOperationKey(ctx, rec.OperationKey, 2); err != nil || !slices.Equal(got, []string{rec.ID}) {
					t.Fatalf("ids by key: got %v, %v; want [%s]", got, err, rec.ID)
				}
				if got, err := tx.ExecutionIDsByOperationKey(ctx, "no-such-key", 2); err != nil || len(got) != 0 {
					t.Fatalf("ids by an unused key: got %v, %v; want none", got, err)
				}
				return nil
			})
		}},
		{"ExecutionUpdateIfAttempt", func(t *testing.T, f *fixture) {
			_, rec := mustApprovedExecution(t, f)
			c := claimExecution(t, f)
			// Another attempt's write: refused, nothing written.
			stale := *c.Record
			stale.Status, stale.LastError = approval.ExecutionFailed, "stale"
			txFails(t, f, "write of another attempt", func(ctx context.Context, tx approval.Tx) error {
				return tx.ExecutionUpdateIfAttempt(ctx, &stale, c.Attempt+1)
			})
			if got := mustExecution(t, f.store, rec.ID); got.Status != approval.ExecutionRunning || got.LastError != "" {
				t.Fatalf("execution after the refused write: got %s %q, want running", got.Status, got.LastError)
			}
			done := *c.Record
			done.Status, done.Result, done.LeaseExpiresAt, done.AppliedVersion = approval.ExecutionSucceeded, []byte(`{"ok":true}`), nil, 1
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.ExecutionUpdateIfAttempt(ctx, &done, c.Attempt)
			})
			if got := mustExecution(t, f.store, rec.ID); got.Status != approval.ExecutionSucceeded || got.AppliedVersion != 1 {
				t.Fatalf("execution: got %s v%d, want succeeded v1", got.Status, got.AppliedVersion)
			}
			// The same attempt once it is no longer running: refused.
			txFails(t, f, "write of a finished attempt", func(ctx context.Context, tx approval.Tx) error {
				return tx.ExecutionUpdateIfAttempt(ctx, &stale, c.Attempt)
			})
			if got := mustExecution(t, f.store, rec.ID); got.Status != approval.ExecutionSucceeded {
				t.Fatalf("execution after the refused write: got %s, want succeeded", got.Status)
			}
		}},
		{"ExecutionUpdateIfAttemptMany", func(t *testing.T, f *fixture) {
			_, r1 := mustApprovedExecution(t, f)
			_, r2 := mustApprovedExecution(t, f)
			var claims []*approval.ExecutionClaim
			inTx(t, f, func(ctx context.Context, tx approval.Tx) (err error) {
				claims, err = tx.ExecutionClaimDue(ctx, 10, tx.Now().Add(workLease))
				return err
			})
			if len(claims) != 2 {
				t.Fatalf("claims: got %d, want 2", len(claims))
			}
			recs := make([]*approval.ExecutionRecord, 2)
			for i, c := range claims {
				r := *c.Record
				r.Status, r.LeaseExpiresAt, r.LastError = approval.ExecutionFailed, nil, "gave up"
				recs[i] = &r
			}
			// One fence wrong: the transaction fails, neither is written.
			txFails(t, f, "one write of another attempt", func(ctx context.Context, tx approval.Tx) error {
				return tx.ExecutionUpdateIfAttemptMany(ctx, recs, []int{claims[0].Attempt, claims[1].Attempt + 1})
			})
			for _, id := range []string{r1.ID, r2.ID} {
				if got := mustExecution(t, f.store, id); got.Status != approval.ExecutionRunning {
					t.Fatalf("execution %s after the refused write: got %s, want running", id, got.Status)
				}
			}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.ExecutionUpdateIfAttemptMany(ctx, recs, []int{claims[0].Attempt, claims[1].Attempt})
			})
			for _, id := range []string{r1.ID, r2.ID} {
				if got := mustExecution(t, f.store, id); got.Status != approval.ExecutionFailed || got.LastError != "gave up" {
					t.Fatalf("execution %s: got %s %q, want failed", id, got.Status, got.LastError)
				}
			}
		}},
		{"ExecutionUpdateIfStatus", func(t *testing.T, f *fixture) {
			_, rec := mustApprovedExecution(t, f)
			cancelled := *rec
			cancelled.Status, cancelled.NextAttemptAt = approval.ExecutionCancelled, nil
			// Read as running, but it is queued: refused.
			txFails(t, f, "write of a status it is not in", func(ctx context.Context, tx approval.Tx) error {
				return tx.ExecutionUpdateIfStatus(ctx, &cancelled, approval.ExecutionRunning)
			})
			if got := mustExecution(t, f.store, rec.ID); got.Status != approval.ExecutionQueued {
				t.Fatalf("execution after the refused write: got %s, want queued", got.Status)
			}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.ExecutionUpdateIfStatus(ctx, &cancelled, approval.ExecutionQueued)
			})
			if got := mustExecution(t, f.store, rec.ID); got.Status != approval.ExecutionCancelled {
				t.Fatalf("execution: got %s, want cancelled", got.Status)
			}
		}},

		{"InboxGetForUpdate", func(t *testing.T, f *fixture) {
			e := recordPending(t, f, "msg_1")
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				got, err := tx.InboxGetForUpdate(ctx, e.ID)
				if err != nil || got.ID != e.ID || got.Status != approval.InboxPending || len(got.Body) != 0 {
					t.Fatalf("inbox event: got %+v, %v; want %s pending without its body", got, err, e.ID)
				}
				_, err = tx.InboxGetForUpdate(ctx, "inb_missing")
				wantErr(t, "missing inbox event", err, approval.ENOTFOUND)
				return nil
			})
		}},
		{"InboxSetDone", func(t *testing.T, f *fixture) {
			e := recordPending(t, f, "msg_1")
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				got, err := tx.InboxSetDone(ctx, e.ID, approval.InboxProcessed, "applied", "")
				if err != nil || got.Status != approval.InboxProcessed || got.Outcome != "applied" || len(got.Body) == 0 {
					t.Fatalf("done: got %+v, %v; want processed, applied, with its body", got, err)
				}
				return nil
			})
			// No longer pending: refused.
			txFails(t, f, "mark a processed event done", func(ctx context.Context, tx approval.Tx) error {
				_, err := tx.InboxSetDone(ctx, e.ID, approval.InboxIgnored, "again", "")
				return err
			})
			if got := mustInboxEvent(t, f.store, e.ID); got.Status != approval.InboxProcessed || got.Outcome != "applied" {
				t.Fatalf("event after the refused write: got %s %q, want processed, applied", got.Status, got.Outcome)
			}
		}},
		{"InboxMarkDoneMany", func(t *testing.T, f *fixture) {
			e1, e2, e3 := recordPending(t, f, "msg_1"), recordPending(t, f, "msg_2"), recordPending(t, f, "msg_3")
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.InboxMarkDoneMany(ctx, []approval.InboxMark{
					{ID: e1.ID, Status: approval.InboxProcessed, Outcome: "one"},
					{ID: e2.ID, Status: approval.InboxIgnored, Outcome: "two", Attempted: true},
				})
			})
			if got := mustInboxEvent(t, f.store, e1.ID); got.Status != approval.InboxProcessed || got.Outcome != "one" || got.Attempts != 0 {
				t.Fatalf("event 1: got %s %q attempts %d, want processed, one, 0", got.Status, got.Outcome, got.Attempts)
			}
			if got := mustInboxEvent(t, f.store, e2.ID); got.Status != approval.InboxIgnored || got.Attempts != 1 {
				t.Fatalf("event 2: got %s attempts %d, want ignored, 1", got.Status, got.Attempts)
			}
			// One of them no longer pending: the transaction fails, the pending one stays.
			txFails(t, f, "mark a done event again", func(ctx context.Context, tx approval.Tx) error {
				return tx.InboxMarkDoneMany(ctx, []approval.InboxMark{
					{ID: e3.ID, Status: approval.InboxProcessed, Outcome: "three"},
					{ID: e1.ID, Status: approval.InboxProcessed, Outcome: "again"},
				})
			})
			if got := mustInboxEvent(t, f.store, e3.ID); got.Status != approval.InboxPending {
				t.Fatalf("event 3 after the refused write: got %s, want pending", got.Status)
			}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.InboxMarkDoneMany(ctx, nil) })
		}},
		{"InboxSetAttemptFailed", func(t *testing.T, f *fixture) {
			e := recordPending(t, f, "msg_1")
			now := f.clock.Now()
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.InboxSetAttemptFailed(ctx, e.ID, approval.InboxFailed, "boom", nil, &now)
			})
			if got := mustInboxEvent(t, f.store, e.ID); got.Status != approval.InboxFailed || got.LastError != "boom" {
				t.Fatalf("event: got %s %q, want failed, boom", got.Status, got.LastError)
			}
			// No longer pending: refused.
			txFails(t, f, "fail a failed event", func(ctx context.Context, tx approval.Tx) error {
				return tx.InboxSetAttemptFailed(ctx, e.ID, approval.InboxPending, "again", &now, nil)
			})
			if got := mustInboxEvent(t, f.store, e.ID); got.Status != approval.InboxFailed || got.LastError != "boom" {
				t.Fatalf("event after the refused write: got %s %q, want failed, boom", got.Status, got.LastError)
			}
		}},
		{"InboxSetPendingIfFailed", func(t *testing.T, f *fixture) {
			e := recordPending(t, f, "msg_1")
			// Pending, not failed: refused.
			txFails(t, f, "retry a pending event", func(ctx context.Context, tx approval.Tx) error {
				_, err := tx.InboxSetPendingIfFailed(ctx, e.ID)
				return err
			})
			now := f.clock.Now()
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.InboxSetAttemptFailed(ctx, e.ID, approval.InboxFailed, "boom", nil, &now)
			})
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				got, err := tx.InboxSetPendingIfFailed(ctx, e.ID)
				if err != nil || got.Status != approval.InboxPending || got.LastError != "boom" || len(got.Body) == 0 {
					t.Fatalf("retry: got %+v, %v; want pending, its last error kept, with its body", got, err)
				}
				return nil
			})
		}},
		{"InboxClaimDue", func(t *testing.T, f *fixture) {
			e := recordPending(t, f, "msg_1")
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				got, err := tx.InboxClaimDue(ctx, 10, tx.Now().Add(workLease), "c1")
				if err != nil || len(got) != 1 || got[0].ID != e.ID || got[0].LeaseToken != "c1:"+e.ID || got[0].Attempts != 1 || len(got[0].Body) == 0 {
					t.Fatalf("claim: got %+v, %v; want %s leased to c1, attempt 1, with its body", got, err, e.ID)
				}
				return nil
			})
			// Under a live lease: not claimed again.
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if got, err := tx.InboxClaimDue(ctx, 10, tx.Now().Add(workLease), "c2"); err != nil || len(got) != 0 {
					t.Fatalf("claim under a live lease: got %d, %v; want none", len(got), err)
				}
				return nil
			})
		}},
		{"InboxLockDue", func(t *testing.T, f *fixture) {
			e := recordPending(t, f, "msg_1")
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				got, err := tx.InboxLockDue(ctx, 10)
				if err != nil || len(got) != 1 || got[0].ID != e.ID || len(got[0].Body) == 0 {
					t.Fatalf("lock: got %+v, %v; want %s with its body", got, err, e.ID)
				}
				return nil
			})
			if got := mustInboxEvent(t, f.store, e.ID); got.Status != approval.InboxPending || got.Attempts != 0 || got.LeaseToken != "" {
				t.Fatalf("event after the lock: got %s attempts %d lease %q, want it unchanged", got.Status, got.Attempts, got.LeaseToken)
			}
		}},
		{"InboxDeleteHandled", func(t *testing.T, f *fixture) {
			done, pending := recordPending(t, f, "msg_1"), recordPending(t, f, "msg_2")
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				_, err := tx.InboxSetDone(ctx, done.ID, approval.InboxProcessed, "applied", "")
				return err
			})
			f.clock.Advance(time.Hour)
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if n, err := tx.InboxDeleteHandled(ctx, tx.Now(), 10); err != nil || n != 1 {
					t.Fatalf("delete: got %d, %v; want 1", n, err)
				}
				return nil
			})
			if _, err := f.store.InboxEvent(t.Context(), done.ID); approval.ErrorCode(err) != approval.ENOTFOUND {
				t.Fatalf("deleted event: got %v, want ENOTFOUND", err)
			}
			mustInboxEvent(t, f.store, pending.ID)
		}},
		{"InboxClearBodyHandled", func(t *testing.T, f *fixture) {
			done, pending := recordPending(t, f, "msg_1"), recordPending(t, f, "msg_2")
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				_, err := tx.InboxSetDone(ctx, done.ID, approval.InboxProcessed, "applied", "")
				return err
			})
			f.clock.Advance(time.Hour)
			for i, want := range []int{1, 0} {
				inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
					if n, err := tx.InboxClearBodyHandled(ctx, tx.Now(), 10); err != nil || n != want {
						t.Fatalf("clear %d: got %d, %v; want %d", i, n, err, want)
					}
					return nil
				})
			}
			if got := mustInboxEvent(t, f.store, done.ID); len(got.Body) != 0 {
				t.Fatalf("handled event's body: got %q, want none", got.Body)
			}
			if got := mustInboxEvent(t, f.store, pending.ID); len(got.Body) == 0 {
				t.Fatal("pending event's body: got none, want it kept")
			}
		}},

		{"OutboxInsert", func(t *testing.T, f *fixture) {
			m := newOutboxMessage("key-1", f.clock.Now())
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.OutboxInsert(ctx, m) })
			// The same natural key again: nothing inserted, no error.
			again := newOutboxMessage("key-1", f.clock.Now())
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.OutboxInsert(ctx, again) })
			if got := mustOutbox(t, f.store, approval.OutboxFilter{}); len(got) != 1 || got[0].ID != m.ID {
				t.Fatalf("outbox: got %d messages, want only %s", len(got), m.ID)
			}
		}},
		{"OutboxClaimDue", func(t *testing.T, f *fixture) {
			m := newOutboxMessage("key-1", f.clock.Now())
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.OutboxInsert(ctx, m) })
			if got := claimOutbox(t, f); len(got) != 1 || got[0].ID != m.ID || got[0].Status != approval.OutboxSending || got[0].Attempts != 1 {
				t.Fatalf("claim: got %+v, want %s sending, attempt 1", got, m.ID)
			}
			if _, attempts := outboxMessage(t, f, m.ID); len(attempts) != 1 || attempts[0].Attempt != 1 {
				t.Fatalf("attempts: got %+v, want attempt 1 started", attempts)
			}
			// Under a live lease: not claimed again.
			if got := claimOutbox(t, f); len(got) != 0 {
				t.Fatalf("claim under a live lease: got %d, want none", len(got))
			}
		}},
		{"OutboxGetForUpdate", func(t *testing.T, f *fixture) {
			m := newOutboxMessage("key-1", f.clock.Now())
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.OutboxInsert(ctx, m) })
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if got, err := tx.OutboxGetForUpdate(ctx, m.ID); err != nil || got.ID != m.ID || got.Status != approval.OutboxPending {
					t.Fatalf("message: got %+v, %v; want %s pending", got, err, m.ID)
				}
				_, err := tx.OutboxGetForUpdate(ctx, "ntf_missing")
				wantErr(t, "missing message", err, approval.ENOTFOUND)
				return nil
			})
		}},
		{"OutboxUpdateIfAttempt", func(t *testing.T, f *fixture) {
			m := newOutboxMessage("key-1", f.clock.Now())
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.OutboxInsert(ctx, m) })
			claimed := claimOutbox(t, f)[0]
			sent := *claimed
			now := f.clock.Now()
			sent.Status, sent.LeaseExpiresAt, sent.SentAt = approval.OutboxSent, nil, &now
			// Another attempt's write: refused, nothing written.
			txFails(t, f, "write of another attempt", func(ctx context.Context, tx approval.Tx) error {
				return tx.OutboxUpdateIfAttempt(ctx, &sent, claimed.Attempts+1)
			})
			if got, _ := outboxMessage(t, f, m.ID); got.Status != approval.OutboxSending {
				t.Fatalf("message after the refused write: got %s, want sending", got.Status)
			}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.OutboxUpdateIfAttempt(ctx, &sent, claimed.Attempts)
			})
			if got, _ := outboxMessage(t, f, m.ID); got.Status != approval.OutboxSent || got.SentAt == nil {
				t.Fatalf("message: got %s sent at %v, want sent", got.Status, got.SentAt)
			}
			// The same attempt once it is no longer sending: refused.
			txFails(t, f, "write of a finished attempt", func(ctx context.Context, tx approval.Tx) error {
				return tx.OutboxUpdateIfAttempt(ctx, &sent, claimed.Attempts)
			})
		}},
		{"OutboxUpdateIfStatus", func(t *testing.T, f *fixture) {
			m := newOutboxMessage("key-1", f.clock.Now())
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.OutboxInsert(ctx, m) })
			failed := *m
			failed.Status, failed.NextAttemptAt, failed.LastError = approval.OutboxFailed, nil, "given up"
			txFails(t, f, "write of a status it is not in", func(ctx context.Context, tx approval.Tx) error {
				return tx.OutboxUpdateIfStatus(ctx, &failed, approval.OutboxSending)
			})
			if got, _ := outboxMessage(t, f, m.ID); got.Status != approval.OutboxPending {
				t.Fatalf("message after the refused write: got %s, want pending", got.Status)
			}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.OutboxUpdateIfStatus(ctx, &failed, approval.OutboxPending)
			})
			if got, _ := outboxMessage(t, f, m.ID); got.Status != approval.OutboxFailed || got.LastError != "given up" {
				t.Fatalf("message: got %s %q, want failed", got.Status, got.LastError)
			}
		}},
		{"OutboxAttemptFinish", func(t *testing.T, f *fixture) {
			m := newOutboxMessage("key-1", f.clock.Now())
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.OutboxInsert(ctx, m) })
			claimed := claimOutbox(t, f)[0]
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.OutboxAttemptFinish(ctx, m.ID, claimed.Attempts, "retry", "421 try later")
			})
			if _, attempts := outboxMessage(t, f, m.ID); len(attempts) != 1 || attempts[0].Outcome != "retry" ||
				attempts[0].Error != "421 try later" || attempts[0].FinishedAt == nil {
				t.Fatalf("attempts: got %+v, want attempt 1 finished as retry", attempts)
			}
		}},

		{"SigninAskCountsForUpdate", func(t *testing.T, f *fixture) {
			since := f.clock.Now()
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				for range 2 {
					if err := tx.SigninAskInsert(ctx, "alice", "192.0.2.1"); err != nil {
						return err
					}
				}
				if err := tx.SigninAskInsert(ctx, "alice", "192.0.2.2"); err != nil {
					return err
				}
				return tx.SigninTokenInsert(ctx, approval.HashToken("link-1"), "alice", tx.Now().Add(time.Hour))
			})
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				got, err := tx.SigninAskCountsForUpdate(ctx, approval.SigninCountParams{Subject: "alice", Client: "192.0.2.1", Since: since, RecentSince: since.Add(-time.Minute)})
				want := approval.SigninCounts{ClientAsks: 2, Links: 1, RecentUnused: 1}
				if err != nil || got != want {
					t.Fatalf("counts: got %+v, %v; want %+v", got, err, want)
				}
				return nil
			})
		}},
		{"SigninAskInsert", func(t *testing.T, f *fixture) {
			since := f.clock.Now()
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.SigninAskInsert(ctx, "", "192.0.2.1") })
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				got, err := tx.SigninAskCountsForUpdate(ctx, approval.SigninCountParams{Client: "192.0.2.1", Since: since, RecentSince: since})
				if err != nil || got.ClientAsks != 1 {
					t.Fatalf("counts: got %+v, %v; want one ask", got, err)
				}
				return nil
			})
		}},
		{"SigninAskDeleteBefore", func(t *testing.T, f *fixture) {
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.SigninAskInsert(ctx, "alice", "192.0.2.1") })
			f.clock.Advance(time.Hour)
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.SigninAskInsert(ctx, "alice", "192.0.2.1") })
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if n, err := tx.SigninAskDeleteBefore(ctx, tx.Now(), 10); err != nil || n != 1 {
					t.Fatalf("delete: got %d, %v; want 1", n, err)
				}
				return nil
			})
		}},
		{"SigninTokenInsert", func(t *testing.T, f *fixture) {
			hash := approval.HashToken("link-1")
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.SigninTokenInsert(ctx, hash, "alice", tx.Now().Add(time.Hour))
			})
			// The same hash again: refused.
			txFails(t, f, "duplicate link", func(ctx context.Context, tx approval.Tx) error {
				return tx.SigninTokenInsert(ctx, hash, "mallory", tx.Now().Add(time.Hour))
			})
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if got, err := tx.SigninTokenUseIfValid(ctx, hash); err != nil || got != "alice" {
					t.Fatalf("use: got %q, %v; want alice", got, err)
				}
				return nil
			})
		}},
		{"SigninTokenUseIfValid", func(t *testing.T, f *fixture) {
			valid, expiring := approval.HashToken("link-1"), approval.HashToken("link-2")
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if err := tx.SigninTokenInsert(ctx, valid, "alice", tx.Now().Add(time.Hour)); err != nil {
					return err
				}
				return tx.SigninTokenInsert(ctx, expiring, "bob", tx.Now().Add(time.Minute))
			})
			use := func(hash []byte) (subject string, err error) {
				inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
					subject, err = tx.SigninTokenUseIfValid(ctx, hash)
					return nil
				})
				return subject, err
			}
			if got, err := use(valid); err != nil || got != "alice" {
				t.Fatalf("use: got %q, %v; want alice", got, err)
			}
			_, err := use(valid)
			wantErr(t, "second use", err, approval.ENOTFOUND)
			f.clock.Advance(time.Minute)
			_, err = use(expiring)
			wantErr(t, "use at expiry", err, approval.ENOTFOUND)
			_, err = use(approval.HashToken("never-made"))
			wantErr(t, "unknown link", err, approval.ENOTFOUND)
		}},
		{"SigninTokenDeleteExpired", func(t *testing.T, f *fixture) {
			expired, live := approval.HashToken("link-1"), approval.HashToken("link-2")
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if err := tx.SigninTokenInsert(ctx, expired, "alice", tx.Now().Add(time.Minute)); err != nil {
					return err
				}
				return tx.SigninTokenInsert(ctx, live, "bob", tx.Now().Add(time.Hour))
			})
			f.clock.Advance(2 * time.Minute)
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if n, err := tx.SigninTokenDeleteExpired(ctx, tx.Now(), 10); err != nil || n != 1 {
					t.Fatalf("delete: got %d, %v; want 1", n, err)
				}
				if got, err := tx.SigninTokenUseIfValid(ctx, live); err != nil || got != "bob" {
					t.Fatalf("use of the live link: got %q, %v; want bob", got, err)
				}
				return nil
			})
		}},

		{"SessionInsert", func(t *testing.T, f *fixture) {
			sess := newSession("alice", f.clock.Now())
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.SessionInsert(ctx, sess) })
			got, err := f.store.Session(t.Context(), sess.ID)
			if err != nil || got.Subject != "alice" || got.Via != approval.SessionViaOIDC || got.EndedAt != nil {
				t.Fatalf("session: got %+v, %v; want alice's, live", got, err)
			}
			// The same id again: refused.
			dup := newSession("mallory", f.clock.Now())
			dup.ID = sess.ID
			txFails(t, f, "duplicate session", func(ctx context.Context, tx approval.Tx) error { return tx.SessionInsert(ctx, dup) })
			if got, err := f.store.Session(t.Context(), sess.ID); err != nil || got.Subject != "alice" {
				t.Fatalf("session after the duplicate: got %+v, %v; want alice's", got, err)
			}
		}},
		{"SessionSetEndedIfLive", func(t *testing.T, f *fixture) {
			sess := newSession("alice", f.clock.Now())
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.SessionInsert(ctx, sess) })
			for i, want := range []int{1, 0} {
				inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
					if n, err := tx.SessionSetEndedIfLive(ctx, sess.ID); err != nil || n != want {
						t.Fatalf("end %d: got %d, %v; want %d", i, n, err, want)
					}
					return nil
				})
				f.clock.Advance(time.Minute)
			}
			if got, err := f.store.Session(t.Context(), sess.ID); err != nil || got.EndedAt == nil || !got.EndedAt.Equal(sess.CreatedAt) {
				t.Fatalf("session: got ended at %v (%v), want %v: the second end changed nothing", got.EndedAt, err, sess.CreatedAt)
			}
		}},
		{"SessionSetEndedIfLiveBySubject", func(t *testing.T, f *fixture) {
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				for _, who := range []string{"alice", "alice", "bob"} {
					if err := tx.SessionInsert(ctx, newSession(who, tx.Now())); err != nil {
						return err
					}
				}
				return nil
			})
			for i, want := range []int{2, 0} {
				inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
					if n, err := tx.SessionSetEndedIfLiveBySubject(ctx, "alice"); err != nil || n != want {
						t.Fatalf("end alice's %d: got %d, %v; want %d", i, n, err, want)
					}
					return nil
				})
			}
		}},
		{"SessionDeleteExpired", func(t *testing.T, f *fixture) {
			old := newSession("alice", f.clock.Now())
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.SessionInsert(ctx, old) })
			f.clock.Advance(48 * time.Hour)
			fresh := newSession("bob", f.clock.Now())
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if err := tx.SessionInsert(ctx, fresh); err != nil {
					return err
				}
				if n, err := tx.SessionDeleteExpired(ctx, tx.Now(), 10); err != nil || n != 1 {
					t.Fatalf("delete: got %d, %v; want 1", n, err)
				}
				return nil
			})
			if _, err := f.store.Session(t.Context(), old.ID); approval.ErrorCode(err) != approval.ENOTFOUND {
				t.Fatalf("expired session: got %v, want ENOTFOUND", err)
			}
			if _, err := f.store.Session(t.Context(), fresh.ID); err != nil {
				t.Fatalf("live session: %v", err)
			}
		}},

		{"PersonEmailGetMany", func(t *testing.T, f *fixture) {
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if err := tx.PersonEmailUpsert(ctx, "carol", "carol@idp.example"); err != nil {
					return err
				}
				got, err := tx.PersonEmailGetMany(ctx, []string{"carol", "dave"})
				if err != nil || len(got) != 1 || got["carol"] != "carol@idp.example" {
					t.Fatalf("addresses: got %v, %v; want carol's only", got, err)
				}
				return nil
			})
		}},
		{"PersonEmailUpsert", func(t *testing.T, f *fixture) {
			for _, email := range []string{"carol@idp.example", "carol@idp.example", "carol.new@idp.example"} {
				inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.PersonEmailUpsert(ctx, "carol", email) })
			}
			wantStored(t, f.store, []string{"carol"}, map[string]string{"carol": "carol.new@idp.example"})
		}},
		{"SecretInsertIfAbsent", func(t *testing.T, f *fixture) {
			first, second := []byte("first value"), []byte("second value")
			for _, v := range [][]byte{first, second} {
				inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.SecretInsertIfAbsent(ctx, "k", v) })
			}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if got, err := tx.SecretGet(ctx, "k"); err != nil || !bytes.Equal(got, first) {
					t.Fatalf("secret k: got %q, %v; want %q: the second insert changed nothing", got, err, first)
				}
				return nil
			})
		}},
		{"SecretGet", func(t *testing.T, f *fixture) {
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if _, err := tx.SecretGet(ctx, "k"); approval.ErrorCode(err) != approval.ENOTFOUND {
					t.Fatalf("an absent secret: %v, want ENOTFOUND", err)
				}
				// Written and read back in one transaction, as Service.StoredSessionKey does.
				if err := tx.SecretInsertIfAbsent(ctx, "k", []byte{0, 1, 255}); err != nil {
					return err
				}
				if got, err := tx.SecretGet(ctx, "k"); err != nil || !bytes.Equal(got, []byte{0, 1, 255}) {
					t.Fatalf("secret k in its transaction: got %v, %v; want [0 1 255]", got, err)
				}
				return nil
			})
		}},

		{"SlackMessageInsert", func(t *testing.T, f *fixture) {
			first := approval.SlackMessage{OutboxID: "ntf_1", ApprovalID: "apr_1", Recipient: "carol", Channel: "D0CAROL", TS: "1700000000.000100"}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.SlackMessageInsert(ctx, first) })
			f.clock.Advance(time.Minute)
			// The guard: a second record of the same notification (a resend that found its
			// post) changes nothing; the first stands.
			again := first
			again.TS, again.Channel = "1700000099.000200", "C0OTHER"
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.SlackMessageInsert(ctx, again) })
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				got, err := tx.SlackMessageGet(ctx, "ntf_1")
				if err != nil {
					return err
				}
				want := first
				want.PostedAt = f.clock.Now().Add(-time.Minute)
				if got != want {
					t.Fatalf("slack message: got %+v, want the first record %+v", got, want)
				}
				return nil
			})
		}},
		{"SlackMessageGet", func(t *testing.T, f *fixture) {
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if _, err := tx.SlackMessageGet(ctx, "ntf_none"); approval.ErrorCode(err) != approval.ENOTFOUND {
					t.Fatalf("an unrecorded notification: got %v, want ENOTFOUND", err)
				}
				m := approval.SlackMessage{OutboxID: "ntf_2", ApprovalID: "apr_1", Recipient: "#C0DEPLOYS", Channel: "C0DEPLOYS", TS: "1.2"}
				if err := tx.SlackMessageInsert(ctx, m); err != nil {
					return err
				}
				if got, err := tx.SlackMessageGet(ctx, "ntf_2"); err != nil || got.TS != "1.2" || got.Channel != "C0DEPLOYS" {
					t.Fatalf("recorded in this transaction: got %+v, %v", got, err)
				}
				return nil
			})
		}},
		{"SlackMessageGetMany", func(t *testing.T, f *fixture) {
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				for _, m := range []approval.SlackMessage{
					{OutboxID: "ntf_b", ApprovalID: "apr_1", Recipient: "dave", Channel: "D0DAVE", TS: "2.0"},
					{OutboxID: "ntf_a", ApprovalID: "apr_1", Recipient: "carol", Channel: "D0CAROL", TS: "1.0"},
					{OutboxID: "ntf_c", ApprovalID: "apr_2", Recipient: "carol", Channel: "D0CAROL", TS: "3.0"},
				} {
					if err := tx.SlackMessageInsert(ctx, m); err != nil {
						return err
					}
				}
				got, err := tx.SlackMessageGetMany(ctx, "apr_1")
				if err != nil {
					return err
				}
				if len(got) != 2 || got[0].OutboxID != "ntf_a" || got[1].OutboxID != "ntf_b" {
					t.Fatalf("messages of apr_1: got %+v, want ntf_a and ntf_b, in that order", got)
				}
				if none, err := tx.SlackMessageGetMany(ctx, "apr_none"); err != nil || len(none) != 0 {
					t.Fatalf("an approval without messages: got %v, %v; want none", none, err)
				}
				return nil
			})
		}},
		{"SlackUserUpsert", func(t *testing.T, f *fixture) {
			for _, id := range []string{"U0CAROL", "U0CAROL", "U0CAROL2"} {
				inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.SlackUserUpsert(ctx, "carol", id) })
			}
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if got, err := tx.SlackUserGet(ctx, "carol"); err != nil || got != "U0CAROL2" {
					t.Fatalf("carol's slack user: got %q, %v; want the last one stored, U0CAROL2", got, err)
				}
				return nil
			})
		}},
		{"SlackUserGet", func(t *testing.T, f *fixture) {
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if got, err := tx.SlackUserGet(ctx, "nobody"); err != nil || got != "" {
					t.Fatalf("a person without a stored user: got %q, %v; want \"\"", got, err)
				}
				if err := tx.SlackUserUpsert(ctx, "dave", "U0DAVE"); err != nil {
					return err
				}
				if got, err := tx.SlackUserGet(ctx, "dave"); err != nil || got != "U0DAVE" {
					t.Fatalf("dave: got %q, %v; want U0DAVE", got, err)
				}
				return nil
			})
		}},
		{"SlackUserPersons", func(t *testing.T, f *fixture) {
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				for person, id := range map[string]string{"erin": "U0SHARED", "carol": "U0SHARED", "dave": "U0DAVE"} {
					if err := tx.SlackUserUpsert(ctx, person, id); err != nil {
						return err
					}
				}
				got, err := tx.SlackUserPersons(ctx, "U0SHARED")
				if err != nil || strings.Join(got, " ") != "carol erin" {
					t.Fatalf("persons of U0SHARED: got %v, %v; want carol erin", got, err)
				}
				if got, err := tx.SlackUserPersons(ctx, "U0NOBODY"); err != nil || len(got) != 0 {
					t.Fatalf("an unknown user: got %v, %v; want none", got, err)
				}
				return nil
			})
		}},

		{"IdentityGroupGetMany", func(t *testing.T, f *fixture) {
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				for person, groups := range map[string][]string{"carol": {"sre", "dba"}, "dave": {"sre"}, "erin": {"ops"}} {
					if err := tx.IdentityGroupReplace(ctx, person, groups); err != nil {
						return err
					}
				}
				got, err := tx.IdentityGroupGetMany(ctx, []string{"dave", "carol", "nobody"})
				if err != nil {
					return err
				}
				wantIdentityGroups(t, got, "carol:dba carol:sre dave:sre", tx.Now())
				// Nobody asked for: nothing read, no error.
				if got, err := tx.IdentityGroupGetMany(ctx, nil); err != nil || len(got) != 0 {
					t.Fatalf("no persons: got %v, %v; want none", got, err)
				}
				return nil
			})
		}},
		{"IdentityGroupReplace", func(t *testing.T, f *fixture) {
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				if err := tx.IdentityGroupReplace(ctx, "carol", []string{"sre", "dba"}); err != nil {
					return err
				}
				return tx.IdentityGroupReplace(ctx, "dave", []string{"sre"})
			})
			f.clock.Advance(time.Hour)
			// A later sign-in replaces the set: a group no longer named goes, the ones kept
			// carry the new sign-in's time, and other persons' rows stay.
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error {
				return tx.IdentityGroupReplace(ctx, "carol", []string{"sre", "ops"})
			})
			got, err := f.store.IdentityGroupMembers(t.Context(), []string{"sre", "dba", "ops"})
			if err != nil {
				t.Fatal(err)
			}
			wantIdentityGroups(t, got[:2], "carol:ops carol:sre", f.clock.Now())
			wantIdentityGroups(t, got[2:], "dave:sre", f.clock.Now().Add(-time.Hour))
			// An empty set removes every group of the person, and only theirs.
			inTx(t, f, func(ctx context.Context, tx approval.Tx) error { return tx.IdentityGroupReplace(ctx, "carol", nil) })
			got, err = f.store.IdentityGroupMembers(t.Context(), []string{"sre", "dba", "ops"})
			if err != nil {
				t.Fatal(err)
			}
			wantIdentityGroups(t, got, "dave:sre", f.clock.Now().Add(-time.Hour))
		}},
	}
}

// wantIdentityGroups fails unless got is want ("person:group" in order, by spaces), each
// signed in at at.
func wantIdentityGroups(tb testing.TB, got []approval.IdentityGroup, want string, at time.Time) {
	tb.Helper()
	parts := make([]string, len(got))
	for i, g := range got {
		parts[i] = g.Person + ":" + g.Group
		if !g.SignedInAt.Equal(at) {
			tb.Errorf("%s: got signed in at %v, want %v", parts[i], g.SignedInAt, at)
		}
	}
	if s := strings.Join(parts, " "); s != want {
		tb.Fatalf("identity groups: got %q, want %q", s, want)
	}
}
