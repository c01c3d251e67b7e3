package storetest

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/approvald/approval"
)

// providerRouting is SuiteRouting with the addresses identity providers verified in use:
// carol and dave are named in no configuration, and reached by e-mail only once a sign-in
// stored an address for them.
var providerRouting = func() approval.Routing {
	r := SuiteRouting
	r.ProviderEmails = true
	return r
}()

// exerciseAddresses: the e-mail addresses stored at OIDC sign-ins (Service.RecordEmail,
// person_addresses), and the one rule that resolves a person's address: the configuration's
// when it names one, else the stored one, and only with Routing.ProviderEmails.
func exerciseAddresses(t *testing.T, s suite) {
	s.runRouted(t, "Upsert", providerRouting, func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		mustRecordEmail(t, svc, "carol", "carol@idp.example")
		mustRecordEmail(t, svc, "carol", "carol@idp.example") // the same again: no change, no error
		wantStored(t, f.store, []string{"carol", "dave"}, map[string]string{"carol": "carol@idp.example"})
		// A new address at a later sign-in replaces the old one.
		mustRecordEmail(t, svc, "carol", "Carol.New@IdP.example")
		wantStored(t, f.store, []string{"carol"}, map[string]string{"carol": "Carol.New@IdP.example"})
		for _, who := range []string{"carol.new@idp.example", "CAROL.NEW@IDP.EXAMPLE"} {
			if got, err := f.store.PersonsByEmail(ctx, who); err != nil || !slices.Equal(got, []string{"carol"}) {
				t.Fatalf("persons by %q: got %v, %v; want [carol]", who, got, err)
			}
		}
		if got, err := f.store.PersonsByEmail(ctx, "carol@idp.example"); err != nil || len(got) != 0 {
			t.Fatalf("persons by the replaced address: got %v, %v; want none", got, err)
		}

		// Bad input is EINVALID and changes nothing.
		for _, c := range []struct{ person, email string }{
			{"", "carol@idp.example"},
			{"carol", ""},
			{"carol", "not an address"},
			{"carol", "Carol <carol@idp.example>"},
			{"carol", "<carol@idp.example>"},
			{"carol", "carol@idp.example\nBcc: x@evil.example"},
			{"carol\n", "carol@idp.example"},
			{"carol", strings.Repeat("a", approval.MaxEmailLength) + "@x.example"},
		} {
			if err := svc.RecordEmail(ctx, c.person, c.email); approval.ErrorCode(err) != approval.EINVALID {
				t.Fatalf("record %q for %q: got %v, want EINVALID", c.email, c.person, err)
			}
		}
		wantStored(t, f.store, []string{"carol", "", "carol\n"}, map[string]string{"carol": "Carol.New@IdP.example"})
	})

	s.runRouted(t, "ConfigurationWins", providerRouting, func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		mustRecordEmail(t, svc, "alice", "alice@idp.example") // configured as alice@example.com
		mustRecordEmail(t, svc, "carol", "carol@idp.example")
		for person, want := range map[string]string{"alice": "alice@example.com", "carol": "carol@idp.example", "dave": ""} {
			if got, err := svc.EmailAddress(ctx, person); err != nil || got != want {
				t.Fatalf("address of %s: got %q, %v; want %q", person, got, err, want)
			}
		}

		// The create queues e-mail to carol, by her stored address; dave has none.
		res := mustServiceCreate(t, svc, "ci-bot", "deploy-1", `{"action":"deploy","title":"Deploy","approvers":["alice","carol","dave"]}`)
		want := []string{"alice/chat/approval.requested", "alice/email/approval.requested", "carol/email/approval.requested"}
		if got := recipients(mustOutbox(t, f.store, approval.OutboxFilter{})); !slices.Equal(got, want) {
			t.Fatalf("messages of the create: got %v, want %v", got, want)
		}
		// So does its outcome (queued in the deciding transaction), to carol who did not vote.
		if _, err := svc.Decide(ctx, asAdmin("alice"), approval.DecideRequest{
			ApprovalID: res.Approval.ID, Approver: "alice", Verdict: approval.VerdictReject, Cause: voteCause("alice"),
		}); err != nil {
			t.Fatalf("alice rejects: %v", err)
		}
		var got []string
		for _, m := range mustOutbox(t, f.store, approval.OutboxFilter{}) {
			if m.Event == approval.EventRejected {
				got = append(got, m.Recipient+"/"+m.Channel)
			}
		}
		slices.Sort(got)
		if want := []string{"carol/email", "ci-bot/callback", "ci-bot/email"}; !slices.Equal(got, want) {
			t.Fatalf("messages of the rejection: got %v, want %v", got, want)
		}

		// Sign-in links go to the configuration's addresses only: carol, known by the address
		// her identity provider verified, signs in there, so that removing her there ends her
		// access; alice's stored address is not hers while the configuration names another.
		for who, want := range map[string]string{"carol": "", "CAROL@idp.example": "", "alice@idp.example": "", "alice": "alice", "Alice": "alice"} {
			r, err := svc.RequestSignin(ctx, who, "", "")
			if err != nil || r.Person != want || r.Queued != (want != "") {
				t.Fatalf("sign-in link asked by %q: got %+v, %v; want one for %q", who, r, err, want)
			}
		}
	})

	s.runRouted(t, "UnusedWithoutProviderEmails", SuiteRouting, func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		mustRecordEmail(t, svc, "carol", "carol@idp.example")
		if got, err := svc.EmailAddress(ctx, "carol"); err != nil || got != "" {
			t.Fatalf("address of carol: got %q, %v; want none while the routing does not use the provider's", got, err)
		}
		mustServiceCreate(t, svc, "ci-bot", "deploy-1", `{"action":"deploy","title":"Deploy","approvers":["alice","carol"]}`)
		want := []string{"alice/chat/approval.requested", "alice/email/approval.requested"}
		if got := recipients(mustOutbox(t, f.store, approval.OutboxFilter{})); !slices.Equal(got, want) {
			t.Fatalf("messages: got %v, want %v", got, want)
		}
		if r, err := svc.RequestSignin(ctx, "carol@idp.example", "", ""); err != nil || r.Queued {
			t.Fatalf("sign-in link for carol: got %+v, %v; want none", r, err)
		}
	})
}

func mustRecordEmail(tb testing.TB, svc *approval.Service, person, email string) {
	tb.Helper()
	if err := svc.RecordEmail(tb.Context(), person, email); err != nil {
		tb.Fatalf("record %s's address %s: %v", person, email, err)
	}
}

// wantStored checks the stored addresses of persons, read alike by the store and in a
// transaction.
func wantStored(tb testing.TB, s approval.Store, persons []string, want map[string]string) {
	tb.Helper()
	got, err := s.PersonEmails(tb.Context(), persons)
	if err != nil || !maps.Equal(got, want) {
		tb.Fatalf("stored addresses of %q: got %v, %v; want %v", persons, got, err, want)
	}
	tx, err := s.Begin(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback(tb.Context())
	got, err = tx.PersonEmailGetMany(tb.Context(), persons)
	if err != nil || !maps.Equal(got, want) {
		tb.Fatalf("stored addresses of %q in a transaction: got %v, %v; want %v", persons, got, err, want)
	}
}
