package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestREADME runs the README's ```console blocks in order, as a user would type them, against
// a fresh approvald serve on SQLite in a temporary directory, with the approvald binary built
// by TestMain first on the PATH. Every command must exit 0 and print what the README shows
// below it; the conventions that let the README stay readable are in docs/testing.md, "The
// README's commands".
func TestREADME(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	steps := parseConsoleBlocks(string(text))
	// The README's promises that must stay runnable: a guard against a block turned into
	// another language, which this test would no longer see.
	for _, want := range []string{"approvald serve", "approvald token create", "/v1/approvals", "approvald request", "approvald approvals approve", "/v1/inbox/chat", "approvald policy check"} {
		found := false
		for _, s := range steps {
			found = found || strings.Contains(s.command, want)
		}
		if !found {
			t.Fatalf("no ```console block of README.md runs %q", want)
		}
	}

	for _, tool := range []string{"bash", "curl", "openssl", "base64", "od"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the README's commands need %s: %v", tool, err)
		}
	}
	r := newReadmeRun(t)
	for _, s := range steps {
		r.step(t, s)
	}
}

// A consoleStep is one command of a ```console block ("$ " and its continuation lines) and
// the lines the README shows below it.
type consoleStep struct {
	line    int // in README.md, for messages
	command string
	want    []string
}

var heredocStart = regexp.MustCompile(`<<-?\s*'?([A-Za-z_]+)'?`)

// parseConsoleBlocks returns the commands of every ```console block, in order. A command
// goes on while its line ends with a backslash or a here-document is open; an output line
// that starts with a space continues the one before it (a line break the README adds to a
// long JSON line).
func parseConsoleBlocks(text string) []consoleStep {
	var steps []consoleStep
	lines := strings.Split(text, "\n")
	in := false
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		switch {
		case !in && line == "```console":
			in = true
			continue
		case in && line == "```":
			in = false
			continue
		case !in:
			continue
		}
		if cmd, ok := strings.CutPrefix(line, "$ "); ok {
			s := consoleStep{line: i + 1, command: cmd}
			for strings.HasSuffix(lines[i], `\`) && i+1 < len(lines) {
				i++
				s.command += "\n" + lines[i]
			}
			if m := heredocStart.FindStringSubmatch(s.command); m != nil {
				for i+1 < len(lines) {
					i++
					s.command += "\n" + lines[i]
					if lines[i] == m[1] {
						break
					}
				}
			}
			steps = append(steps, s)
			continue
		}
		if len(steps) == 0 {
			continue
		}
		s := &steps[len(steps)-1]
		if rest, ok := strings.CutPrefix(line, " "); ok && len(s.want) > 0 {
			s.want[len(s.want)-1] += rest
			continue
		}
		s.want = append(s.want, line)
	}
	return steps
}

// readmeAddr is the address the README shows; the test's server listens on a free port.
const readmeAddr = "127.0.0.1:8080"

// readmeRun is the user's two terminals: a bash session that keeps its variables and
// background jobs from one command to the next, and the serve process beside it.
type readmeRun struct {
	dir   string
	env   []string
	shell *terminal
	stdin io.WriteCloser

	serve    *exec.Cmd
	serveOut *terminal
	addr     string

	// binds maps a placeholder of the README (an id, a token) to the value this run got in
	// its place, and back, so that an id the README shows twice is the same id both times and
	// a command that uses an id shown above uses the one this run got.
	binds   map[string]string
	boundTo map[string]string
}

func newReadmeRun(t *testing.T) *readmeRun {
	t.Helper()
	r := &readmeRun{dir: t.TempDir(), binds: map[string]string{}, boundTo: map[string]string{}}
	// The user's environment, with none of approvald's settings and the binary first on PATH.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "APPROVALD_") && !strings.HasPrefix(kv, "PATH=") {
			r.env = append(r.env, kv)
		}
	}
	r.env = append(r.env, "PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"))

	sh := exec.Command("bash", "--norc", "--noprofile")
	sh.Dir, sh.Env = r.dir, r.env
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.stdin = stdin
	r.shell = newTerminal()
	sh.Stdout, sh.Stderr = r.shell, r.shell
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		// The session's process group holds its background jobs too.
		_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
		_ = sh.Wait()
	})
	t.Cleanup(func() { r.stopServe(t) })
	return r
}

var serveCommand = regexp.MustCompile(`^(?:[A-Z_]+=\S+\s+)*approvald serve\b`)

func (r *readmeRun) step(t *testing.T, s consoleStep) {
	t.Helper()
	if serveCommand.MatchString(s.command) {
		r.startServe(t, s)
		return
	}
	command := r.substitute(t, s)
	mark := r.shell.len()
	// The command reads nothing from the session's stdin, which is the script. The marker
	// after its output carries its exit code and how many background jobs still run (whose
	// output may come later); $? is kept for a next command that prints it.
	fmt.Fprintf(r.stdin, "{ %s\n} </dev/null\n__rc=$?; printf '\\n%s %%d %%d\\n' \"$__rc\" \"$(jobs -pr | wc -l)\"; (exit $__rc)\n", command, stepDone)
	var (
		rc     = -1
		output string
		err    error
	)
	deadline := time.After(time.Minute)
	for {
		all := r.shell.since(mark)
		if m := stepDoneLine.FindStringSubmatchIndex(all); m != nil {
			rc, _ = strconv.Atoi(all[m[2]:m[3]])
			jobs, _ := strconv.Atoi(all[m[4]:m[5]])
			output = all[:m[0]] + all[m[1]:]
			if err = r.match(s, output, false); err == nil || jobs == 0 || rc != 0 {
				break
			}
		}
		select {
		case <-r.shell.wrote:
			continue
		case <-deadline:
		}
		if rc < 0 {
			t.Fatalf("README.md:%d: %s\ndid not end within a minute; its output:\n%s", s.line, s.command, all)
		}
		break
	}
	if rc != 0 {
		t.Fatalf("README.md:%d: %s\nexited %d; its output:\n%s", s.line, s.command, rc, output)
	}
	if err != nil {
		t.Fatalf("README.md:%d: %s\n%v", s.line, s.command, err)
	}
}

// stepDone marks the end of a command's output; the marker carries its exit code and the
// number of background jobs still running.
const stepDone = "README-STEP-DONE"

var stepDoneLine = regexp.MustCompile(`\n` + stepDone + ` (\d+) (\d+)\n`)

// startServe stops the running server as Ctrl-C does, then runs the README's serve command
// on a free port, and waits for the lines the README shows.
func (r *readmeRun) startServe(t *testing.T, s consoleStep) {
	t.Helper()
	r.stopServe(t)
	cmd := exec.Command("bash", "-c", s.command)
	cmd.Dir = r.dir
	cmd.Env = append(r.env[:len(r.env):len(r.env)], "APPROVALD_LISTEN=127.0.0.1:0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r.serveOut = newTerminal()
	cmd.Stdout, cmd.Stderr = r.serveOut, r.serveOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.serve = cmd

	listening := regexp.MustCompile(`"msg":"listening","addr":"([^"]+)"`)
	deadline := time.After(startTimeout)
	for {
		out := r.serveOut.since(0)
		if r.addr == "" {
			if m := listening.FindStringSubmatch(out); m != nil {
				r.addr = m[1]
				// What the user's approvals commands reach without --server.
				fmt.Fprintf(r.stdin, "export APPROVALD_SERVER=http://%s\n", r.addr)
			}
		}
		var err error
		if r.addr != "" {
			if err = r.match(s, out, true); err == nil {
				return
			}
		}
		select {
		case <-r.serveOut.wrote:
			continue
		case <-deadline:
		}
		if err == nil {
			err = fmt.Errorf("no listening line; output:\n%s", out)
		}
		t.Fatalf("README.md:%d: %s\n%v", s.line, s.command, err)
	}
}

// stopServe stops the server as Ctrl-C in its terminal does; it must exit 0.
func (r *readmeRun) stopServe(t *testing.T) {
	t.Helper()
	if r.serve == nil {
		return
	}
	cmd := r.serve
	r.serve, r.addr = nil, ""
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve after Ctrl-C: %v; its output:\n%s", err, r.serveOut.since(0))
		}
	case <-time.After(exitTimeout):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Errorf("serve did not stop within %s of Ctrl-C", exitTimeout)
	}
}

// What differs from run to run in the README's text: ids and tokens, which are bound to the
// values this run got, times, which match any time, and "...", which matches anything.
const (
	idPattern    = `[a-z]{3}_[0-9a-z]{26}` // apr_..., req_..., tok_..., inb_...
	tokenPattern = `apv_[A-Za-z0-9_-]{43}`
	timePattern  = `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z` + // RFC 3339
		`|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d` + // in a table
		`|[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT` // HTTP's Date
)

var (
	placeholder = regexp.MustCompile(`\b` + idPattern + `\b|\b` + tokenPattern + `|` + timePattern + `| *\.\.\. *`)
	bindable    = regexp.MustCompile(`\A(?:` + idPattern + `|` + tokenPattern + `)\z`)
)

// substitute puts this run's server address and the ids it got in the README's command.
func (r *readmeRun) substitute(t *testing.T, s consoleStep) string {
	t.Helper()
	cmd := s.command
	if r.addr != "" {
		cmd = strings.ReplaceAll(cmd, readmeAddr, r.addr)
	}
	return placeholder.ReplaceAllStringFunc(cmd, func(p string) string {
		if !bindable.MatchString(p) {
			return p
		}
		v, ok := r.binds[p]
		if !ok {
			t.Fatalf("README.md:%d: the command uses %s, which no output above showed", s.line, p)
		}
		return v
	})
}

// match reports whether got is what the README shows: line for line, a line "..." standing
// for any lines, "..." within a line for any text, and placeholders as above. With more,
// got may go on after the lines shown (a server still running). On a match it binds the
// README's ids to the ones got.
func (r *readmeRun) match(s consoleStep, got string, more bool) error {
	got = strings.ReplaceAll(got, "\r\n", "\n")
	want := s.want
	for len(want) > 0 && strings.TrimSpace(want[len(want)-1]) == "" {
		want = want[:len(want)-1]
	}
	var pattern strings.Builder
	pattern.WriteString(`\A`)
	var names []string // the README's text of each capturing group
	shown := make([]string, len(want))
	for i, line := range want {
		if r.addr != "" {
			line = strings.ReplaceAll(line, readmeAddr, r.addr)
		}
		shown[i] = line
		if line == "..." {
			pattern.WriteString(`(?:[^\n]*\n)*?`)
			continue
		}
		last := 0
		for _, loc := range placeholder.FindAllStringIndex(line, -1) {
			pattern.WriteString(regexp.QuoteMeta(line[last:loc[0]]))
			p := line[loc[0]:loc[1]]
			switch {
			case strings.TrimSpace(p) == "...":
				pattern.WriteString(`.*?`)
			case bindable.MatchString(p):
				if v, ok := r.binds[p]; ok {
					pattern.WriteString(regexp.QuoteMeta(v))
				} else if strings.HasPrefix(p, "apv_") {
					pattern.WriteString(`(` + tokenPattern + `)`)
					names = append(names, p)
				} else {
					pattern.WriteString(`(` + idPattern + `)`)
					names = append(names, p)
				}
			default:
				pattern.WriteString(`(?:` + timePattern + `)`)
			}
			last = loc[1]
		}
		pattern.WriteString(regexp.QuoteMeta(line[last:]))
		pattern.WriteString(`\n`)
	}
	if more {
		pattern.WriteString(`(?s:.*)`)
	}
	pattern.WriteString(`\z`)

	got = strings.TrimRight(got, "\n")
	if got != "" {
		got += "\n"
	}
	re := regexp.MustCompile(pattern.String())
	m := re.FindStringSubmatch(got)
	if m == nil {
		return fmt.Errorf("got:\n%s\nwant (README.md, placeholders and ... as described in docs/testing.md):\n%s", got, strings.Join(shown, "\n"))
	}
	// Each placeholder the README shows is one value, and different ones different values.
	binds := map[string]string{}
	for i, name := range names {
		v := m[i+1]
		if prev, ok := binds[name]; ok && prev != v {
			return fmt.Errorf("%s stands for %s and %s in the output:\n%s", name, prev, v, got)
		}
		binds[name] = v
	}
	for name, v := range binds {
		if other, ok := r.boundTo[v]; ok && other != name {
			return fmt.Errorf("%s and %s are both %s in the output:\n%s", name, other, v, got)
		}
	}
	for name, v := range binds {
		r.binds[name], r.boundTo[v] = v, name
	}
	return nil
}

// A terminal collects what a process writes on stdout and stderr, as a terminal shows it,
// and says when more came.
type terminal struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func newTerminal() *terminal { return &terminal{wrote: make(chan struct{}, 1)} }

func (tm *terminal) Write(p []byte) (int, error) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	tm.buf.Write(p)
	select {
	case tm.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (tm *terminal) len() int {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.buf.Len()
}

func (tm *terminal) since(mark int) string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return string(tm.buf.Bytes()[mark:])
}
