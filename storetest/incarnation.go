package storetest

import (
	"sync"
	"testing"
)

// exerciseIncarnation covers Store.Incarnation: once the store has reached its database, it
// names one incarnation, the same however often it is asked and whatever runs meanwhile, on
// connections new and old, as long as the server stays the same.
func exerciseIncarnation(t *testing.T, s suite) {
	s.run(t, "Incarnation", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		if err := f.store.Ping(ctx); err != nil {
			t.Fatalf("ping: %v", err)
		}
		first := f.store.Incarnation()
		if first == "" {
			t.Fatal("incarnation after a ping: got \"\", want the server's")
		}
		mustServiceCreate(t, f.service(), "ci-bot", "deploy-incarnation", `{"action":"deploy","title":"incarnation","approvers":["alice"],"expires_in":"1h"}`)

		// Many at once, so that the pools open connections of their own while others ask.
		const workers = 16
		var start sync.WaitGroup
		start.Add(1)
		got := make([]string, workers)
		errs := make([]error, workers)
		var done sync.WaitGroup
		for i := range workers {
			done.Go(func() {
				start.Wait()
				errs[i] = f.store.Ping(ctx)
				got[i] = f.store.Incarnation()
			})
		}
		start.Done()
		done.Wait()
		for i := range workers {
			if errs[i] != nil {
				t.Fatalf("ping %d: %v", i, errs[i])
			}
			if got[i] != first {
				t.Fatalf("incarnation %d: got %q, want %q as at first", i, got[i], first)
			}
		}
		if again := f.store.Incarnation(); again != first {
			t.Fatalf("incarnation again: got %q, want %q", again, first)
		}
	})
}
