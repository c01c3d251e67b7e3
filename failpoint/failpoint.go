// Package failpoint lets tests kill or fail the real approvald binary at named points, so that
// crash recovery is exercised on the code that runs in production rather than on a model of it.
//
// The points are switched on with the environment variable APPROVALD_FAILPOINTS, a list of
// entries separated by ';' or ',':
//
//	name=action[@N]
//
// where action is one of
//
//	off              the point is listed but does nothing (handy to override a default)
//	error            Inject returns an error wrapping ErrInjected; the caller treats it as a failure
//	crash            the process sends itself SIGKILL: no deferred code, no flushing, no cleanup
//	sleep(DURATION)  Inject sleeps for DURATION (time.ParseDuration syntax), then returns nil
//
// and the optional suffix @N (N >= 1) makes the action fire on the Nth hit of the point only;
// every other hit passes. Without it the action fires on every hit. For example
//
//	APPROVALD_FAILPOINTS='execution.after-send=crash@3; approval.after-commit=error'
//
// lets two executions through, kills the process right after the third one has been sent
// downstream, and fails every approval just after its commit. Names must be listed in Known,
// and each may appear once: a typo is an error, so a test cannot pass because its failpoint
// silently never fired.
package failpoint

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// EnvVar is the environment variable FromEnv reads.
const EnvVar = "APPROVALD_FAILPOINTS"

// Known lists the points the code base injects. Parse rejects any other name.
var Known = []string{
	"execution.before-send",  // the attempt is recorded, the downstream call not yet made
	"execution.after-send",   // the downstream call answered, the result not yet recorded
	"execution.after-record", // the result is recorded
	"approval.after-commit",  // a decision is committed, the HTTP answer not yet written
	"outbox.after-send",      // a channel accepted an outbox message, its outcome not yet recorded
	"slack.after-post",       // Slack accepted a post, its channel and ts not yet recorded
}

// ErrInjected is wrapped by the error Inject returns from an "error" point.
var ErrInjected = errors.New("failpoint injected error")

// Set is a parsed failpoint specification. A nil *Set has no failpoints, and Inject on it
// costs one comparison, so production code calls Inject unconditionally. A Set is safe for
// concurrent use.
type Set struct {
	points map[string]*point
}

// point is one armed failpoint and its hit counter.
type point struct {
	action action
	sleep  time.Duration // for actionSleep
	nth    int64         // fire on this hit only; 0 means every hit
	hits   atomic.Int64
}

type action int

const (
	actionOff action = iota
	actionError
	actionCrash
	actionSleep
)

// Parse parses a specification in the syntax described in the package comment. An empty or
// blank spec returns a nil *Set. Unknown names, unknown actions, duplicate names and bad syntax
// are errors.
func Parse(spec string) (*Set, error) {
	entries := strings.FieldsFunc(spec, func(r rune) bool { return r == ';' || r == ',' })
	points := make(map[string]*point)
	for _, entry := range entries {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, act, ok := strings.Cut(entry, "=")
		name, act = strings.TrimSpace(name), strings.TrimSpace(act)
		if !ok || name == "" || act == "" {
			return nil, fmt.Errorf("failpoint %q: want name=action", entry)
		}
		if !slices.Contains(Known, name) {
			return nil, fmt.Errorf("failpoint %q: unknown point (known: %s)", name, strings.Join(Known, ", "))
		}
		if _, dup := points[name]; dup {
			return nil, fmt.Errorf("failpoint %q: listed twice", name)
		}
		p, err := parseAction(act)
		if err != nil {
			return nil, fmt.Errorf("failpoint %q: %w", name, err)
		}
		points[name] = p
	}
	if len(points) == 0 {
		return nil, nil
	}
	return &Set{points: points}, nil
}

// FromEnv parses the environment variable APPROVALD_FAILPOINTS. Unset or empty gives a nil *Set.
func FromEnv() (*Set, error) {
	s, err := Parse(os.Getenv(EnvVar))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvVar, err)
	}
	return s, nil
}

// Inject counts a hit of the named point and performs its action when it fires: it returns an
// error wrapping ErrInjected, sleeps, or kills the process and never returns. A point not in
// the set, or a nil set, returns nil.
func (s *Set) Inject(name string) error {
	if s == nil {
		return nil
	}
	p := s.points[name]
	if p == nil {
		return nil
	}
	if hit := p.hits.Add(1); p.nth != 0 && hit != p.nth {
		return nil
	}
	switch p.action {
	case actionError:
		return fmt.Errorf("%s: %w", name, ErrInjected)
	case actionCrash:
		crash()
	case actionSleep:
		time.Sleep(p.sleep)
	}
	return nil
}

// Hits returns how many times the named point has been reached, fired or not.
func (s *Set) Hits(name string) int {
	if s == nil || s.points[name] == nil {
		return 0
	}
	return int(s.points[name].hits.Load())
}

// String returns the armed points in a form Parse accepts, sorted by name, for logging at
// start-up that the process is running with failpoints.
func (s *Set) String() string {
	if s == nil {
		return ""
	}
	names := make([]string, 0, len(s.points))
	for name := range s.points {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + "=" + s.points[name].String()
	}
	return strings.Join(parts, ";")
}

func (p *point) String() string {
	var s string
	switch p.action {
	case actionOff:
		s = "off"
	case actionError:
		s = "error"
	case actionCrash:
		s = "crash"
	case actionSleep:
		s = "sleep(" + p.sleep.String() + ")"
	}
	if p.nth != 0 {
		s += "@" + strconv.FormatInt(p.nth, 10)
	}
	return s
}

// parseAction parses "action[@N]".
func parseAction(s string) (*point, error) {
	p := &point{}
	if act, n, ok := strings.Cut(s, "@"); ok {
		nth, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
		if err != nil || nth < 1 {
			return nil, fmt.Errorf("hit %q: want a whole number >= 1", n)
		}
		p.nth, s = nth, strings.TrimSpace(act)
	}
	switch {
	case s == "off":
		p.action = actionOff
	case s == "error":
		p.action = actionError
	case s == "crash":
		p.action = actionCrash
	case strings.HasPrefix(s, "sleep(") && strings.HasSuffix(s, ")"):
		d, err := time.ParseDuration(strings.TrimSpace(s[len("sleep(") : len(s)-1]))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("action %q: want sleep(DURATION) with a non-negative duration", s)
		}
		p.action, p.sleep = actionSleep, d
	default:
		return nil, fmt.Errorf("unknown action %q (want off, error, crash or sleep(DURATION))", s)
	}
	return p, nil
}

// crash kills the process with SIGKILL, the closest a test can get to a power cut or the OOM
// killer: nothing after this point runs, not even deferred functions or buffered writes.
func crash() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	// The kernel delivers SIGKILL before the kill system call returns to user space, so this
	// line is not reached; block rather than fall through if it ever is, because returning
	// would let the caller carry on past a point where the test expects the process dead.
	for {
		time.Sleep(time.Hour)
	}
}
