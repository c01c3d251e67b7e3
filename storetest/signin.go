package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// exerciseSignin: e-mailed sign-in links. A link is queued with its mail in one transaction,
// works once (of racing uses exactly one wins), not after its expiry, and a person gets at
// most SigninLimit links per SigninWindow, also when they ask at once.
func exerciseSignin(t *testing.T, s suite) {
	// link asks for a link for who and returns the token from its queued mail.
	link := func(t *testing.T, f *fixture, who string) string {
		t.Helper()
		f.clock.Advance(time.Second) // so that the newest message is this one
		res, err := f.service().RequestSignin(t.Context(), who)
		if err != nil || !res.Queued {
			t.Fatalf("request a link for %s: got %+v, %v; want one queued", who, res, err)
		}
		msgs := mustOutbox(t, f.store, approval.OutboxFilter{Kind: approval.OutboxSignin})
		var p approval.Signin
		if err := json.Unmarshal(msgs[0].Payload, &p); err != nil || p.Token == "" {
			t.Fatalf("newest sign-in mail payload %s: %v", msgs[0].Payload, err)
		}
		if msgs[0].Recipient != res.Person || msgs[0].Channel != approval.ChannelEmail {
			t.Fatalf("sign-in mail to %s on %s, want %s on email", msgs[0].Recipient, msgs[0].Channel, res.Person)
		}
		return p.Token
	}

	s.run(t, "ByNameOrAddress", func(t *testing.T, f *fixture) {
		svc := f.service()
		for who, want := range map[string]string{"alice": "alice", "BOB@example.com": "bob"} {
			person, err := svc.UseSignin(t.Context(), link(t, f, who))
			if err != nil || person != want {
				t.Fatalf("link asked by %q: signed in %q (%v), want %q", who, person, err, want)
			}
		}
		for _, who := range []string{"mallory", "mallory@example.com"} {
			res, err := svc.RequestSignin(t.Context(), who)
			if err != nil || res.Queued {
				t.Fatalf("link for unknown %q: got %+v, %v; want nothing queued and no error", who, res, err)
			}
		}
		if _, err := svc.RequestSignin(t.Context(), "a\nb"); approval.ErrorCode(err) != approval.EINVALID {
			t.Fatalf("link for a name with a newline: got %v, want EINVALID", err)
		}
		if got := len(mustOutbox(t, f.store, approval.OutboxFilter{Kind: approval.OutboxSignin})); got != 2 {
			t.Fatalf("sign-in mails: got %d, want 2", got)
		}
	})

	s.run(t, "UsedOnceUnderConcurrency", func(t *testing.T, f *fixture) {
		token := link(t, f, "alice")
		const racers = 50
		people := make([]string, racers)
		errs := make([]error, racers)
		race(racers, func(i int) { people[i], errs[i] = f.service().UseSignin(t.Context(), token) })
		won := 0
		for i := range racers {
			switch {
			case errs[i] == nil && people[i] == "alice":
				won++
			case approval.ErrorCode(errs[i]) != approval.EUNAUTHORIZED:
				t.Fatalf("racer %d: got %q, %v; want alice or EUNAUTHORIZED", i, people[i], errs[i])
			}
		}
		if won != 1 {
			t.Fatalf("uses that signed in: got %d, want exactly 1", won)
		}
		if _, err := f.service().UseSignin(t.Context(), token); approval.ErrorCode(err) != approval.EUNAUTHORIZED {
			t.Fatalf("a later use: got %v, want EUNAUTHORIZED", err)
		}
	})

	s.run(t, "Expires", func(t *testing.T, f *fixture) {
		token := link(t, f, "alice")
		f.clock.Advance(approval.SigninTTL)
		if _, err := f.service().UseSignin(t.Context(), token); approval.ErrorCode(err) != approval.EUNAUTHORIZED {
			t.Fatalf("use at the expiry: got %v, want EUNAUTHORIZED", err)
		}
		for _, bad := range []string{"", "lnk_nothing", token + "x"} {
			if _, err := f.service().UseSignin(t.Context(), bad); approval.ErrorCode(err) != approval.EUNAUTHORIZED {
				t.Fatalf("use of %q: got %v, want EUNAUTHORIZED", bad, err)
			}
		}
	})

	s.run(t, "LimitedPerPersonUnderConcurrency", func(t *testing.T, f *fixture) {
		const racers = 20
		results := make([]approval.SigninRequest, racers)
		errs := make([]error, racers)
		race(racers, func(i int) { results[i], errs[i] = f.service().RequestSignin(t.Context(), "alice") })
		queued := 0
		for i := range racers {
			if errs[i] != nil {
				t.Fatalf("racer %d: %v", i, errs[i])
			}
			if results[i].Queued {
				queued++
			} else if !results[i].Limited {
				t.Fatalf("racer %d: neither queued nor limited: %+v", i, results[i])
			}
		}
		if queued != approval.SigninLimit {
			t.Fatalf("links queued for 20 requests at once: got %d, want %d", queued, approval.SigninLimit)
		}
		if got := len(mustOutbox(t, f.store, approval.OutboxFilter{Kind: approval.OutboxSignin})); got != approval.SigninLimit {
			t.Fatalf("sign-in mails: got %d, want %d", got, approval.SigninLimit)
		}
		// Bob's limit is his own; and alice may ask again once the window has passed.
		link(t, f, "bob")
		f.clock.Advance(approval.SigninWindow + time.Second)
		if res, err := f.service().RequestSignin(t.Context(), "alice"); err != nil || !res.Queued {
			t.Fatalf("after the window: got %+v, %v; want a link queued", res, err)
		}
	})

	// Old links are deleted by the sweeper, in batches, but only once they are past both
	// their expiry and the window of the per-person limit: deleting a used or expired link
	// sooner would give its person a link more in that window.
	s.run(t, "Purge", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		purge := func(limit int) int {
			t.Helper()
			n, err := f.service().PurgeSigninTokens(ctx, approval.SigninKeep, limit)
			if err != nil {
				t.Fatalf("purge sign-in links: %v", err)
			}
			return n
		}
		first := link(t, f, "alice")
		for range approval.SigninLimit - 1 {
			link(t, f, "alice")
		}
		if _, err := f.service().UseSignin(ctx, first); err != nil {
			t.Fatalf("use alice's first link: %v", err)
		}
		f.clock.Advance(approval.SigninTTL + time.Second)
		if n := purge(100); n != 0 {
			t.Fatalf("purge within the limit's window: got %d deleted, want 0", n)
		}
		if res, err := f.service().RequestSignin(ctx, "alice"); err != nil || !res.Limited {
			t.Fatalf("alice's sixth link in the window after a purge: got %+v, %v; want limited", res, err)
		}

		f.clock.Advance(approval.SigninKeep)
		fresh := link(t, f, "bob") // made now: kept
		for _, want := range []int{2, 2, 1, 0} {
			if n := purge(2); n != want {
				t.Fatalf("purge in batches of 2: got %d deleted, want %d", n, want)
			}
		}
		if person, err := f.service().UseSignin(ctx, fresh); err != nil || person != "bob" {
			t.Fatalf("bob's fresh link after the purge: got %q, %v; want bob", person, err)
		}
		if _, err := f.service().PurgeSigninTokens(ctx, approval.SigninKeep, 0); approval.ErrorCode(err) != approval.EINVALID {
			t.Fatalf("purge with limit 0: got %v, want EINVALID", err)
		}
	})
}
