package storetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// exerciseSessions: page sessions (sessions, migration 0015). A session is read with its
// token in one statement; it is live until it is ended, expires, or its token is revoked or
// expires; ending a person's sessions ends each once, also when several operators do it at
// once; the sweeper's purge deletes only expired rows, in batches.
func exerciseSessions(t *testing.T, s suite) {
	operator := approval.Principal{Subject: "olga", Role: approval.RoleOperator}

	start := func(t *testing.T, f *fixture, p approval.Principal, via string, hash []byte, ttl time.Duration) *approval.Session {
		t.Helper()
		sess, err := f.service().StartSession(t.Context(), p, via, hash, ttl)
		if err != nil {
			t.Fatalf("start a session for %s: %v", p.Subject, err)
		}
		return sess
	}
	check := func(t *testing.T, f *fixture, id string, live bool) {
		t.Helper()
		_, err := f.service().CheckSession(t.Context(), id)
		switch {
		case live && err != nil:
			t.Fatalf("session %s: %v, want live", id, err)
		case !live && approval.ErrorCode(err) != approval.EUNAUTHORIZED:
			t.Fatalf("session %s: %v, want EUNAUTHORIZED", id, err)
		}
	}

	// The session key kept in the store: replicas starting at once each make a key, and all
	// come out with the one that was inserted first; later starts read it back.
	s.run(t, "StoredSessionKeyAtOnce", func(t *testing.T, f *fixture) {
		const racers = 20
		keys := make([][]byte, racers)
		errs := make([]error, racers)
		race(racers, func(i int) { keys[i], errs[i] = f.service().StoredSessionKey(t.Context()) })
		for i := range racers {
			if errs[i] != nil {
				t.Fatalf("racer %d: %v", i, errs[i])
			}
			if len(keys[i]) != approval.SessionKeyLength || !bytes.Equal(keys[i], keys[0]) {
				t.Fatalf("racer %d: got key %x, want racer 0's %x (%d bytes)", i, keys[i], keys[0], approval.SessionKeyLength)
			}
		}
		again, err := f.service().StoredSessionKey(t.Context())
		if err != nil || !bytes.Equal(again, keys[0]) {
			t.Fatalf("a later start: got key %x, %v; want %x", again, err, keys[0])
		}
	})

	s.run(t, "SessionInsert", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		secret, tok, err := svc.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "alice", Role: approval.RoleApprover})
		if err != nil {
			t.Fatal(err)
		}
		byToken := start(t, f, approval.Principal{Subject: "alice", Role: approval.RoleApprover}, approval.SessionViaToken, approval.HashToken(secret), time.Hour)
		got, err := f.store.Session(ctx, byToken.ID)
		if err != nil {
			t.Fatalf("read the session: %v", err)
		}
		if got.Subject != "alice" || got.Role != approval.RoleApprover || got.Via != approval.SessionViaToken ||
			!got.CreatedAt.Equal(f.clock.Now().UTC().Truncate(approval.Precision)) || !got.ExpiresAt.Equal(got.CreatedAt.Add(time.Hour)) || got.EndedAt != nil {
			t.Fatalf("session read back: %+v", got)
		}
		if got.Token == nil || got.Token.ID != tok.ID || got.Token.Subject != "alice" || got.Token.RevokedAt != nil {
			t.Fatalf("the session's token: %+v, want %s", got.Token, tok.ID)
		}
		byLink := start(t, f, approval.Principal{Subject: "bob", Role: approval.RoleApprover}, approval.SessionViaLink, nil, time.Hour)
		if got, err := f.store.Session(ctx, byLink.ID); err != nil || got.Token != nil || got.TokenHash != nil {
			t.Fatalf("a link's session: %+v, %v; want no token", got, err)
		}
		if _, err := f.store.Session(ctx, "ses_nope"); approval.ErrorCode(err) != approval.ENOTFOUND {
			t.Fatalf("an unknown session: %v, want ENOTFOUND", err)
		}
		for name, via := range map[string]string{"no hash": approval.SessionViaToken, "unknown way": "password"} {
			if _, err := svc.StartSession(ctx, approval.Principal{Subject: "alice", Role: approval.RoleApprover}, via, nil, time.Hour); approval.ErrorCode(err) != approval.EINVALID {
				t.Errorf("%s: %v, want EINVALID", name, err)
			}
		}
	})

	s.run(t, "SessionLivesWithItsToken", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		p := approval.Principal{Subject: "alice", Role: approval.RoleApprover}
		tokens := map[string]*approval.Token{}
		sessions := map[string]string{}
		for _, end := range []string{"revoke", "rotate", "expire"} {
			secret, tok, err := svc.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "alice", Role: approval.RoleApprover, ExpiresIn: 2 * time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			tokens[end], sessions[end] = tok, start(t, f, p, approval.SessionViaToken, approval.HashToken(secret), 12*time.Hour).ID
			check(t, f, sessions[end], true)
		}
		if _, err := svc.RevokeToken(ctx, tokenIssuer, tokens["revoke"].ID); err != nil {
			t.Fatal(err)
		}
		if _, _, err := svc.RotateToken(ctx, tokenIssuer, tokens["rotate"].ID); err != nil {
			t.Fatal(err)
		}
		check(t, f, sessions["revoke"], false)
		check(t, f, sessions["rotate"], false)
		check(t, f, sessions["expire"], true)
		f.clock.Advance(2 * time.Hour)
		check(t, f, sessions["expire"], false)
	})

	s.run(t, "SessionLinkPersonConfigured", func(t *testing.T, f *fixture) {
		check(t, f, start(t, f, approval.Principal{Subject: "alice", Role: approval.RoleApprover}, approval.SessionViaLink, nil, time.Hour).ID, true)
		check(t, f, start(t, f, approval.Principal{Subject: "mallory", Role: approval.RoleApprover}, approval.SessionViaLink, nil, time.Hour).ID, false)
		check(t, f, start(t, f, approval.Principal{Subject: "mallory", Role: approval.RoleApprover}, approval.SessionViaOIDC, nil, time.Hour).ID, true)
	})

	s.run(t, "SessionSetEndedIfLive", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		sess := start(t, f, approval.Principal{Subject: "alice", Role: approval.RoleApprover}, approval.SessionViaOIDC, nil, time.Hour)
		other := start(t, f, approval.Principal{Subject: "alice", Role: approval.RoleApprover}, approval.SessionViaOIDC, nil, time.Hour)
		if err := f.service().EndSession(ctx, sess.ID); err != nil {
			t.Fatal(err)
		}
		check(t, f, sess.ID, false)
		check(t, f, other.ID, true)
		if got, _ := f.store.Session(ctx, sess.ID); got == nil || got.EndedAt == nil {
			t.Fatalf("the ended session: %+v, want ended_at set", got)
		}
		tx, err := f.store.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		// The guard: an ended session is not ended again.
		if n, err := tx.SessionSetEndedIfLive(ctx, sess.ID); err != nil || n != 0 {
			t.Fatalf("end an ended session: %d, %v; want 0", n, err)
		}
		if n, err := tx.SessionSetEndedIfLive(ctx, other.ID); err != nil || n != 1 {
			t.Fatalf("end a live session: %d, %v; want 1", n, err)
		}
	})

	s.run(t, "SessionSetEndedIfLiveBySubject", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		alice := approval.Principal{Subject: "alice", Role: approval.RoleApprover}
		ended := start(t, f, alice, approval.SessionViaOIDC, nil, time.Hour)
		if err := svc.EndSession(ctx, ended.ID); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for range 3 {
			ids = append(ids, start(t, f, alice, approval.SessionViaOIDC, nil, time.Hour).ID)
		}
		bob := start(t, f, approval.Principal{Subject: "bob", Role: approval.RoleApprover}, approval.SessionViaOIDC, nil, time.Hour)

		if _, err := svc.RevokeSessions(ctx, alice, "alice"); approval.ErrorCode(err) != approval.EFORBIDDEN {
			t.Fatalf("an approver revokes: %v, want EFORBIDDEN", err)
		}
		for _, subject := range []string{"", " ", "a\nb"} {
			if _, err := svc.RevokeSessions(ctx, operator, subject); approval.ErrorCode(err) != approval.EINVALID {
				t.Fatalf("subject %q: %v, want EINVALID", subject, err)
			}
		}
		for _, id := range ids {
			check(t, f, id, true)
		}
		// Several operators at once: each live session is ended by exactly one of them.
		const racers = 8
		counts := make([]int, racers)
		errs := make([]error, racers)
		race(racers, func(i int) { counts[i], errs[i] = svc.RevokeSessions(ctx, operator, "alice") })
		total := 0
		for i := range racers {
			if errs[i] != nil {
				t.Fatalf("racer %d: %v", i, errs[i])
			}
			total += counts[i]
		}
		if total != len(ids) {
			t.Fatalf("sessions ended by racing revokes: %d, want %d", total, len(ids))
		}
		for _, id := range ids {
			check(t, f, id, false)
		}
		check(t, f, bob.ID, true)
	})

	s.run(t, "SessionDeleteExpired", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		p := approval.Principal{Subject: "alice", Role: approval.RoleApprover}
		var old []string
		for range 3 {
			old = append(old, start(t, f, p, approval.SessionViaOIDC, nil, time.Hour).ID)
		}
		if err := svc.EndSession(ctx, old[0]); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Hour + approval.SessionKeep)
		fresh := start(t, f, p, approval.SessionViaOIDC, nil, time.Hour)
		f.clock.Advance(time.Second)
		if n, err := svc.PurgeSessions(ctx, approval.SessionKeep, 2); err != nil || n != 2 {
			t.Fatalf("first batch: %d, %v; want 2", n, err)
		}
		if n, err := svc.PurgeSessions(ctx, approval.SessionKeep, 2); err != nil || n != 1 {
			t.Fatalf("second batch: %d, %v; want 1", n, err)
		}
		for _, id := range old {
			if _, err := f.store.Session(ctx, id); approval.ErrorCode(err) != approval.ENOTFOUND {
				t.Fatalf("purged session %s: %v, want ENOTFOUND", id, err)
			}
		}
		check(t, f, fresh.ID, true)
		if _, err := svc.PurgeSessions(ctx, approval.SessionKeep, 0); approval.ErrorCode(err) != approval.EINVALID {
			t.Fatalf("limit 0: %v, want EINVALID", err)
		}
	})
}
