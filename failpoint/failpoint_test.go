package failpoint_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/approvald/approval/failpoint"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec    string
		want    string // Set.String() of the result; "" for a nil set
		wantErr bool
	}{
		{spec: "", want: ""},
		{spec: "  ;, ", want: ""},
		{spec: "execution.after-send=crash", want: "execution.after-send=crash"},
		{spec: "execution.after-send=crash@3", want: "execution.after-send=crash@3"},
		{spec: " execution.before-send = error @ 2 ", want: "execution.before-send=error@2"},
		{spec: "execution.after-record=off", want: "execution.after-record=off"},
		{spec: "approval.after-commit=sleep(150ms)", want: "approval.after-commit=sleep(150ms)"},
		{spec: "approval.after-commit=sleep(1s)@4", want: "approval.after-commit=sleep(1s)@4"},
		{
			spec: "execution.after-send=crash;approval.after-commit=error,execution.before-send=off;",
			want: "approval.after-commit=error;execution.after-send=crash;execution.before-send=off",
		},

		{spec: "execution.after-sned=crash", wantErr: true}, // a typo must not pass silently
		{spec: "execution.after-send", wantErr: true},
		{spec: "=crash", wantErr: true},
		{spec: "execution.after-send=", wantErr: true},
		{spec: "execution.after-send=panic", wantErr: true},
		{spec: "execution.after-send=Crash", wantErr: true},
		{spec: "execution.after-send=crash@0", wantErr: true},
		{spec: "execution.after-send=crash@-1", wantErr: true},
		{spec: "execution.after-send=crash@x", wantErr: true},
		{spec: "execution.after-send=crash@", wantErr: true},
		{spec: "execution.after-send=sleep", wantErr: true},
		{spec: "execution.after-send=sleep()", wantErr: true},
		{spec: "execution.after-send=sleep(5)", wantErr: true},
		{spec: "execution.after-send=sleep(-1s)", wantErr: true},
		{spec: "execution.after-send=crash;execution.after-send=off", wantErr: true},
	}
	for _, tt := range tests {
		s, err := failpoint.Parse(tt.spec)
		if tt.wantErr {
			if err == nil {
				t.Errorf("Parse(%q): got %q, want an error", tt.spec, s)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.spec, err)
			continue
		}
		if got := s.String(); got != tt.want {
			t.Errorf("Parse(%q): got %q, want %q", tt.spec, got, tt.want)
		}
		if tt.want == "" && s != nil {
			t.Errorf("Parse(%q): got a non-nil set, want nil", tt.spec)
		}
	}
}

func TestNilSet(t *testing.T) {
	t.Parallel()
	var s *failpoint.Set
	for _, name := range failpoint.Known {
		if err := s.Inject(name); err != nil {
			t.Errorf("nil set Inject(%q): got %v, want nil", name, err)
		}
		if got := s.Hits(name); got != 0 {
			t.Errorf("nil set Hits(%q): got %d, want 0", name, got)
		}
	}
}

func TestInjectError(t *testing.T) {
	t.Parallel()
	s := MustParse(t, "execution.before-send=error;execution.after-send=off")

	for i := range 3 {
		err := s.Inject("execution.before-send")
		if !errors.Is(err, failpoint.ErrInjected) {
			t.Fatalf("hit %d: got %v, want ErrInjected", i+1, err)
		}
	}
	if err := s.Inject("execution.after-send"); err != nil {
		t.Errorf("off point: got %v, want nil", err)
	}
	if err := s.Inject("approval.after-commit"); err != nil {
		t.Errorf("point not in the set: got %v, want nil", err)
	}
	if got := s.Hits("execution.before-send"); got != 3 {
		t.Errorf("Hits(before-send): got %d, want 3", got)
	}
	if got := s.Hits("execution.after-send"); got != 1 {
		t.Errorf("Hits(after-send): got %d, want 1", got)
	}
}

func TestInjectNthHit(t *testing.T) {
	t.Parallel()
	s := MustParse(t, "execution.after-record=error@3")
	for hit := 1; hit <= 5; hit++ {
		err := s.Inject("execution.after-record")
		if fired := errors.Is(err, failpoint.ErrInjected); fired != (hit == 3) {
			t.Errorf("hit %d: got %v, want an error on hit 3 only", hit, err)
		}
	}
}

// TestInjectNthHitConcurrent checks the counting is exact under contention: of many
// goroutines hitting the point at once, exactly one sees the Nth hit.
func TestInjectNthHitConcurrent(t *testing.T) {
	t.Parallel()
	const goroutines = 64
	s := MustParse(t, "execution.before-send=error@17")

	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	fired := 0
	for range goroutines {
		wg.Go(func() {
			<-start
			if errors.Is(s.Inject("execution.before-send"), failpoint.ErrInjected) {
				mu.Lock()
				fired++
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()

	if fired != 1 {
		t.Errorf("fired: got %d, want 1", fired)
	}
	if got := s.Hits("execution.before-send"); got != goroutines {
		t.Errorf("Hits: got %d, want %d", got, goroutines)
	}
}

func TestInjectSleep(t *testing.T) {
	t.Parallel()
	// Only a lower bound is checked: the sleep must happen, how much longer it takes is up
	// to the scheduler.
	s := MustParse(t, "approval.after-commit=sleep(20ms)@2")
	if err := s.Inject("approval.after-commit"); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := s.Inject("approval.after-commit"); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(begin); elapsed < 20*time.Millisecond {
		t.Errorf("second hit took %v, want at least 20ms", elapsed)
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "execution.after-send=error")
	s, err := failpoint.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(s.Inject("execution.after-send"), failpoint.ErrInjected) {
		t.Errorf("got no injected error from a point set in %s", failpoint.EnvVar)
	}

	t.Setenv(failpoint.EnvVar, "execution.after-send=explode")
	if _, err := failpoint.FromEnv(); err == nil {
		t.Error("bad spec in the environment: got nil error")
	}

	t.Setenv(failpoint.EnvVar, "")
	if s, err := failpoint.FromEnv(); err != nil || s != nil {
		t.Errorf("empty environment: got (%v, %v), want (nil, nil)", s, err)
	}
}

// helperDirEnv tells the test binary, run as a child, that it is TestHelperCrash's process
// and where to write its marker files.
const helperDirEnv = "FAILPOINT_TEST_HELPER_DIR"

// TestCrash runs this test binary as a child with a crash point armed on the second hit and
// checks that the child died by SIGKILL at that point: the first hit passed (its marker file
// exists) and neither the code after the second hit nor the deferred function ran.
func TestCrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCrash$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		helperDirEnv+"="+dir,
		failpoint.EnvVar+"=execution.after-send=crash@2",
	)
	out, err := cmd.CombinedOutput()

	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		t.Fatalf("child: got %v, want it killed; output:\n%s", err, out)
	}
	ws, ok := exitErr.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child: got %v, want killed by SIGKILL; output:\n%s", exitErr, out)
	}
	for file, want := range map[string]bool{"first-hit": true, "second-hit": false, "deferred": false} {
		_, err := os.Stat(filepath.Join(dir, file))
		if exists := err == nil; exists != want {
			t.Errorf("marker %s: exists %v, want %v", file, exists, want)
		}
	}
}

// TestHelperCrash is not a test on its own: TestCrash runs it in a child process.
func TestHelperCrash(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		t.Skip("run by TestCrash in a child process")
	}
	mark := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	defer mark("deferred")

	s, err := failpoint.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Inject("execution.after-send"); err != nil {
		t.Fatalf("first hit: %v", err)
	}
	mark("first-hit")
	_ = s.Inject("execution.after-send") // the process dies here
	mark("second-hit")
}

// MustParse parses spec or fails the test.
func MustParse(tb testing.TB, spec string) *failpoint.Set {
	tb.Helper()
	s, err := failpoint.Parse(spec)
	if err != nil {
		tb.Fatalf("Parse(%q): %v", spec, err)
	}
	return s
}
