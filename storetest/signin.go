package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// exerciseSignin: e-mailed sign-in links. A link is queued with its mail in one transaction,
// works once (of racing uses exactly one wins), not after its expiry, and a person gets at
// most SigninLimit links per SigninWindow at once, SigninPerClient of them per requesting
// client, and past those one per SigninSpacing, also when they ask at once.
func exerciseSignin(t *testing.T, s suite) {
	// link asks for a link for who and returns the token from its queued mail.
	link := func(t *testing.T, f *fixture, who string) string {
		t.Helper()
		f.clock.Advance(time.Second) // so that the newest message is this one
		// A client of its own: no allowance of another's is spent.
		res, err := f.service().RequestSignin(t.Context(), who, approval.NewID("client"), "")
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
			res, err := svc.RequestSignin(t.Context(), who, "", "")
			if err != nil || res.Queued {
				t.Fatalf("link for unknown %q: got %+v, %v; want nothing queued and no error", who, res, err)
			}
		}
		if _, err := svc.RequestSignin(t.Context(), "a\nb", "", ""); approval.ErrorCode(err) != approval.EINVALID {
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

	// Of many requests for one person at once, from as many clients, exactly SigninLimit make
	// a link; from one client, exactly SigninPerClient. Past them a request waits for the
	// person's newest link to be SigninSpacing old.
	s.run(t, "LimitedPerPersonUnderConcurrency", func(t *testing.T, f *fixture) {
		const racers = 20
		ask := func(who string, client func(i int) string) (queued int) {
			t.Helper()
			results := make([]approval.SigninRequest, racers)
			errs := make([]error, racers)
			race(racers, func(i int) { results[i], errs[i] = f.service().RequestSignin(t.Context(), who, client(i), "") })
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
			return queued
		}
		if got := ask("alice", func(i int) string { return fmt.Sprintf("client-%d", i) }); got != approval.SigninLimit {
			t.Fatalf("links queued for 20 requests at once from 20 clients: got %d, want %d", got, approval.SigninLimit)
		}
		if got := ask("bob", func(int) string { return "one-client" }); got != approval.SigninPerClient {
			t.Fatalf("links queued for 20 requests at once from one client: got %d, want %d", got, approval.SigninPerClient)
		}
		if got := len(mustOutbox(t, f.store, approval.OutboxFilter{Kind: approval.OutboxSignin})); got != approval.SigninLimit+approval.SigninPerClient {
			t.Fatalf("sign-in mails: got %d, want %d", got, approval.SigninLimit+approval.SigninPerClient)
		}
		f.clock.Advance(approval.SigninSpacing)
		if got := ask("alice", func(i int) string { return fmt.Sprintf("client-%d", i) }); got != 1 {
			t.Fatalf("links queued for 20 requests at once past the limit, SigninSpacing after the last: got %d, want 1", got)
		}
		// Alice may ask again once the window has passed.
		f.clock.Advance(approval.SigninWindow + time.Second)
		if res, err := f.service().RequestSignin(t.Context(), "alice", "client-0", ""); err != nil || !res.Queued {
			t.Fatalf("after the window: got %+v, %v; want a link queued", res, err)
		}
	})

	// A stranger asking for alice spends their own client's allowance, not hers; and when
	// strangers from many clients have spent the person's, a request gets no new link only
	// while the person has an unused one made less than SigninSpacing ago: whoever asks
	// whenever, the person has a link to sign in with. All the while, the person's mail is
	// bounded: SigninLimit + SigninWindow/SigninSpacing links a window.
	s.run(t, "StrangersCannotLockOut", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		request := func(client string) approval.SigninRequest {
			t.Helper()
			res, err := f.service().RequestSignin(ctx, "alice", client, "")
			if err != nil {
				t.Fatalf("request from %s: %v", client, err)
			}
			return res
		}
		for range 2 * approval.SigninPerClient {
			request("stranger")
		}
		if res := request("alice's laptop"); !res.Queued {
			t.Fatalf("alice's own request after a stranger's: got %+v, want a link queued", res)
		}
		// Strangers from a new client every 20 seconds for a window; alice asks every minute.
		start, links := f.clock.Now(), 1+approval.SigninPerClient
		for i := 0; f.clock.Now().Before(start.Add(approval.SigninWindow)); i++ {
			f.clock.Advance(20 * time.Second)
			client := fmt.Sprintf("stranger-%d", i)
			if i%3 == 0 {
				client = "alice's laptop"
			}
			res := request(client)
			if res.Queued {
				links++
				continue
			}
			newest := mustOutbox(t, f.store, approval.OutboxFilter{Kind: approval.OutboxSignin})[0]
			if age := f.clock.Now().Sub(newest.CreatedAt); newest.Recipient != "alice" || age >= approval.SigninSpacing {
				t.Fatalf("a request from %s got no link, and alice's newest is %s old, want less than %s", client, age, approval.SigninSpacing)
			}
		}
		if max := approval.SigninLimit + int(approval.SigninWindow/approval.SigninSpacing) + 1; links > max {
			t.Fatalf("links for alice in a window of requests every 20 seconds: got %d, want at most %d", links, max)
		}
		// A link used is no longer one to wait for: the next request gets a new one.
		f.clock.Advance(time.Second)
		if !request("stranger-x").Queued {
			f.clock.Advance(approval.SigninSpacing)
			request("stranger-y")
		}
		var p approval.Signin
		if err := json.Unmarshal(mustOutbox(t, f.store, approval.OutboxFilter{Kind: approval.OutboxSignin})[0].Payload, &p); err != nil {
			t.Fatal(err)
		}
		if _, err := f.service().UseSignin(ctx, p.Token); err != nil {
			t.Fatalf("use alice's newest link: %v", err)
		}
		if res := request("alice's phone"); !res.Queued {
			t.Fatalf("a request after alice used her newest link: got %+v, want a link queued", res)
		}
	})

	// Every request is recorded, matched or not; SigninAskCountsForUpdate counts a subject's
	// requests per client, its links, and its unused links since a later time.
	s.run(t, "AskCounts", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		for _, who := range []string{"alice", "alice", "ALICE@example.com", "mallory"} {
			if _, err := f.service().RequestSignin(ctx, who, "c1", ""); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(time.Minute)
		}
		if _, err := f.service().RequestSignin(ctx, "alice", "c2", ""); err != nil {
			t.Fatal(err)
		}
		count := func(subject, client string, since, recentSince time.Time) approval.SigninCounts {
			t.Helper()
			tx, err := f.store.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			c, err := tx.SigninAskCountsForUpdate(ctx, approval.SigninCountParams{Subject: subject, Client: client, Since: since, RecentSince: recentSince})
			if err != nil {
				t.Fatalf("count: %v", err)
			}
			return c
		}
		now := f.clock.Now()
		for _, tc := range []struct {
			subject, client string
			since, recent   time.Time
			want            approval.SigninCounts
		}{
			{"alice", "c1", now.Add(-time.Hour), now.Add(-time.Hour), approval.SigninCounts{ClientAsks: 3, Links: 4, RecentUnused: 4}},
			{"alice", "c2", now.Add(-time.Hour), now.Add(-2 * time.Minute), approval.SigninCounts{ClientAsks: 1, Links: 4, RecentUnused: 1}},
			{"alice", "c1", now.Add(-2 * time.Minute), now.Add(-5 * time.Minute), approval.SigninCounts{ClientAsks: 1, Links: 2, RecentUnused: 4}},
			{"", "c1", now.Add(-time.Hour), now, approval.SigninCounts{ClientAsks: 1}},
			{"mallory", "c1", now.Add(-time.Hour), now, approval.SigninCounts{}},
		} {
			if got := count(tc.subject, tc.client, tc.since, tc.recent); got != tc.want {
				t.Fatalf("counts of %q from %q: got %+v, want %+v", tc.subject, tc.client, got, tc.want)
			}
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
		// Past her limit, with no recent link: one link, and then none for SigninSpacing.
		link(t, f, "alice")
		if res, err := f.service().RequestSignin(ctx, "alice", "another", ""); err != nil || !res.Limited {
			t.Fatalf("alice's seventh link in the window after a purge: got %+v, %v; want limited", res, err)
		}

		f.clock.Advance(approval.SigninKeep)
		fresh := link(t, f, "bob") // made now: kept, with its request
		// Six links and seven requests for alice are old.
		for _, want := range []int{2, 2, 2, 2, 2, 2, 1, 0} {
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
