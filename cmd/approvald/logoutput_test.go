package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// writes is an io.Writer that hands each write to the test, in order.
type writes chan []byte

func (w writes) Write(p []byte) (int, error) {
	w <- bytes.Clone(p)
	return len(p), nil
}

// next returns the next write, failing the test if none comes (a bound, not a timing: the
// write is due at once).
func (w writes) next(t *testing.T) []byte {
	t.Helper()
	select {
	case p := <-w:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no write")
		return nil
	}
}

// none fails the test if a write has been made.
func (w writes) none(t *testing.T, when string) {
	t.Helper()
	select {
	case p := <-w:
		t.Fatalf("%s: got a write %q, want none", when, p)
	default:
	}
}

// messages returns the msg of each JSON line of p.
func messages(t *testing.T, p []byte) []string {
	t.Helper()
	var msgs []string
	for _, line := range strings.Split(strings.TrimSuffix(string(p), "\n"), "\n") {
		var rec struct{ Msg string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %q is not a JSON record: %v", line, err)
		}
		msgs = append(msgs, rec.Msg)
	}
	return msgs
}

// TestLogOutput: lines below warning wait for a tick, a Flush or a full buffer, and go in one
// write; a warning goes at once with every line before it; after Close each line goes as it
// comes.
func TestLogOutput(t *testing.T) {
	t.Parallel()
	// Under synctest: the output's ticker runs on the bubble's clock, so the test moves time
	// to the tick with time.Sleep, and synctest.Wait tells when the flusher has done its part.
	synctest.Test(t, func(t *testing.T) {
		w := make(writes, 100)
		out := startLogOutput(w, time.Second)
		log := newBufferedLogger(out).With("component", "test") // WithAttrs keeps the flushing

		log.Info("one")
		log.Debug("hidden") // below the JSON handler's level: nothing
		log.Info("two")
		time.Sleep(time.Second - time.Nanosecond)
		synctest.Wait()
		w.none(t, "two info lines before the tick")
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := messages(t, w.next(t)); strings.Join(got, ",") != "one,two" {
			t.Errorf("the tick wrote %q, want one,two in one write", got)
		}

		log.Info("three")
		log.WithGroup("g").Warn("careful", "k", 1)
		if got := messages(t, w.next(t)); strings.Join(got, ",") != "three,careful" {
			t.Errorf("the warning wrote %q, want three,careful in one write", got)
		}
		log.Info("four")
		log.Error("broken")
		if got := messages(t, w.next(t)); strings.Join(got, ",") != "four,broken" {
			t.Errorf("the error wrote %q, want four,broken in one write", got)
		}

		// A full buffer is written without waiting for the tick.
		long := strings.Repeat("x", 1000)
		n := 0
		for len(w) == 0 {
			log.Info("filler", "text", long)
			n++
			if n > 2*logBufferSize/len(long) {
				t.Fatalf("%d lines of %d bytes held and no write", n, len(long))
			}
		}
		if p := w.next(t); len(p) < logBufferSize || len(p) > logBufferSize+2*len(long) {
			t.Errorf("a full buffer wrote %d bytes, want about %d", len(p), logBufferSize)
		}
		if n < logBufferSize/(len(long)+100) {
			t.Errorf("the buffer was written after %d lines, want about %d", n, logBufferSize/len(long))
		}

		log.Info("held at close")
		if err := out.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if got := messages(t, w.next(t)); strings.Join(got, ",") != "held at close" {
			t.Errorf("close wrote %q, want the line held", got)
		}
		log.Info("after close")
		if got := messages(t, w.next(t)); strings.Join(got, ",") != "after close" {
			t.Errorf("after close: got %q, want the line at once", got)
		}
		if err := out.Close(); err != nil {
			t.Errorf("second close: %v", err)
		}
	})
}

// TestLogOutput_Concurrent: many goroutines logging while ticks, warnings and a full buffer
// write: every line arrives whole, once, and each goroutine's in the order it logged them.
func TestLogOutput_Concurrent(t *testing.T) {
	t.Parallel()
	const goroutines, lines = 32, 300
	buf := newLineWriter()
	tick := make(chan time.Time)
	out := newLogOutput(buf, tick)
	log := newBufferedLogger(out)

	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range lines {
				level := slog.LevelInfo
				if i%97 == 0 {
					level = slog.LevelWarn
				}
				log.Log(t.Context(), level, "line", "g", g, "i", i, "pad", strings.Repeat("p", i))
			}
		})
	}
	ticking := make(chan struct{})
	go func() {
		defer close(ticking)
		for range 200 {
			tick <- time.Time{}
		}
	}()
	close(start)
	wg.Wait()
	<-ticking
	if err := out.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	next := make([]int, goroutines)
	for _, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		var rec struct{ G, I int }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %.80q... is not a whole JSON record: %v", line, err)
		}
		if rec.I != next[rec.G] {
			t.Fatalf("goroutine %d: got line %d, want %d", rec.G, rec.I, next[rec.G])
		}
		next[rec.G]++
	}
	for g, n := range next {
		if n != lines {
			t.Errorf("goroutine %d: %d lines written, want %d", g, n, lines)
		}
	}
}
