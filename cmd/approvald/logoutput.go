package main

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// DefaultLogFlushInterval is how long serve may hold a log line below warning before writing
// it (docs/operations.md, "Logs"): one write for all the access lines of a busy moment, where
// one write each costs every request a write to stderr and its reader a wake-up.
const DefaultLogFlushInterval = 100 * time.Millisecond

// logBufferSize is what the log output holds at most before it writes whatever the interval.
const logBufferSize = 64 << 10

// logOutput is serve's log output: the lines of records below warning are held and written
// together, when the interval passes (flushes) or the buffer reaches logBufferSize; a warning
// or an error is written at once with every line before it, in order (logHandler). After
// Close, lines are written as they come. Writes to w happen under the lock, so lines never
// interleave.
type logOutput struct {
	w io.Writer

	mu     sync.Mutex
	buf    []byte
	closed bool

	stop     chan struct{}
	done     chan struct{}
	stopTick func() // the ticker's Stop, for startLogOutput's output
}

// startLogOutput returns an output to w that flushes every interval until Close.
func startLogOutput(w io.Writer, every time.Duration) *logOutput {
	ticker := time.NewTicker(every)
	o := newLogOutput(w, ticker.C)
	o.stopTick = ticker.Stop
	return o
}

// newLogOutput returns an output to w that flushes on every value of tick until Close.
func newLogOutput(w io.Writer, tick <-chan time.Time) *logOutput {
	o := &logOutput{w: w, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for {
			select {
			case <-tick:
				o.Flush()
			case <-o.stop:
				return
			}
		}
	}()
	return o
}

// Write holds p (one record's line, from the handler), or writes it with everything held when
// the output is closed or the buffer would pass logBufferSize.
func (o *logOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(o.buf, p...)
	if o.closed || len(o.buf) >= logBufferSize {
		if err := o.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush writes every line held.
func (o *logOutput) Flush() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.flushLocked()
}

func (o *logOutput) flushLocked() error {
	if len(o.buf) == 0 {
		return nil
	}
	_, err := o.w.Write(o.buf)
	// Lines that could not be written are dropped, as an unbuffered writer's would be: the
	// buffer must not grow without bound behind a broken stderr.
	o.buf = o.buf[:0]
	if cap(o.buf) > 4*logBufferSize {
		o.buf = nil
	}
	return err
}

// Close stops the periodic flush and writes every line held; lines logged afterwards (while
// the store closes, say) are written at once.
func (o *logOutput) Close() error {
	o.mu.Lock()
	already := o.closed
	o.closed = true
	o.mu.Unlock()
	if !already {
		close(o.stop)
		<-o.done
		if o.stopTick != nil {
			o.stopTick()
		}
	}
	return o.Flush()
}

// logHandler is a handler writing to a logOutput that writes a record at warning or above at
// once, with every line held before it: a warning is never late, and never seen before the
// lines that led to it.
type logHandler struct {
	slog.Handler
	out *logOutput
}

// newBufferedLogger returns serve's JSON logger writing through out.
func newBufferedLogger(out *logOutput) *slog.Logger {
	return slog.New(logHandler{Handler: slog.NewJSONHandler(out, nil), out: out})
}

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		if ferr := h.out.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{Handler: h.Handler.WithAttrs(attrs), out: h.out}
}

func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{Handler: h.Handler.WithGroup(name), out: h.out}
}
