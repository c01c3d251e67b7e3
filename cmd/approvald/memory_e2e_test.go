package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/webhook"
)

// heldMemoryLimit is what the server's resident memory must stay under while strangers hold
// hundreds of connections on every endpoint that reads a body before it knows who sent it.
const heldMemoryLimit = 150 << 20

// Held connections on each unauthenticated endpoint (the three sign-in forms, the webhook
// intake), each declaring a large body and sending part of it, keep the real binary's resident
// memory under 150 MiB, while an authenticated GET /v1/approvals still gets an answer (200,
// or 503 with Retry-After). The peak (VmHWM) is read once every connection has sent what it
// meant to and a few requests have gone through after it, so that what the server had to
// read has been read.
func TestServe_HeldConnectionsBoundMemory(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.SQLite)
	reader := createToken(t, dsn, "ops", "operator")
	srv := startServeWith(t, dsn, serveOptions{config: fmt.Sprintf(`
web:
  session_key: "a-session-key-of-at-least-32-bytes!!"
  signin_links: {}
smtp: {host: 127.0.0.1, port: 2525, starttls: none, from: "approvald <approvals@example.com>"}
people:
  - {name: alice, email: alice@example.com}
sources:
  - name: chat
    scheme: standard-webhooks
    secrets: [%q]
    handlers: [approval.decision]
`, chatSecret)})
	pid := srv.cmd.Process.Pid

	// What an attacker can have for free: a pre-sign-in cookie and its form token.
	signin := srv.do(t, "GET", "/ui/signin", "", "", "")
	signin.wantStatus(t, http.StatusOK)
	csrf := regexp.MustCompile(`name="csrf" value="([^"]*)"`).FindSubmatch(signin.body)
	var pre string
	for _, c := range (&http.Response{Header: signin.header}).Cookies() {
		if c.Name == "approvald_pre" {
			pre = c.Value
		}
	}
	if csrf == nil || pre == "" {
		t.Fatalf("the sign-in page gave no form token or no pre-sign-in cookie")
	}
	formStart := "csrf=" + string(csrf[1]) + "&token="
	signed, err := webhook.SignStandard(chatSecret, "msg_held", time.Now(), []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}

	const perEndpoint = 300
	type attack struct {
		path    string
		header  string
		declare int // the Content-Length sent
		send    int // the bytes of body actually sent; fewer than declared, so the server waits
	}
	formHeader := "Content-Type: application/x-www-form-urlencoded\r\nCookie: approvald_pre=" + pre + "\r\n"
	var hookHeader strings.Builder
	for name, values := range signed {
		hookHeader.WriteString(name + ": " + values[0] + "\r\n")
	}
	hookHeader.WriteString("Content-Type: application/json\r\n")
	attacks := []attack{
		{"/ui/signin/token", formHeader, 2 << 20, 256 << 10},
		{"/ui/signin/email", formHeader, 2 << 20, 256 << 10},
		{"/ui/signin/link", formHeader, 2 << 20, 256 << 10},
		// The source's max_body is the default, 1 MiB: within it, all but the last byte.
		{"/v1/inbox/chat", hookHeader.String(), DefaultSourceMaxBody, DefaultSourceMaxBody - 1},
	}
	filler := bytes.Repeat([]byte("a"), 1<<20)
	copy(filler, formStart)

	var conns []net.Conn
	var mu sync.Mutex
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// Every connection writes its headers and what it sends of its body, then is done: its
	// write returned (all taken by the kernel) or failed (the server answered and closed).
	var sent sync.WaitGroup
	start := make(chan struct{})
	for _, a := range attacks {
		for range perEndpoint {
			sent.Go(func() {
				<-start
				c, err := net.Dial("tcp", srv.addr)
				if err != nil {
					t.Errorf("dial: %v", err)
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				c.SetWriteDeadline(time.Now().Add(30 * time.Second))
				head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: approvald\r\n%sContent-Length: %d\r\n\r\n", a.path, a.header, a.declare)
				if _, err := c.Write([]byte(head)); err != nil {
					return
				}
				for left := a.send; left > 0; {
					n, err := c.Write(filler[:min(left, len(filler))])
					if err != nil {
						return
					}
					left -= n
				}
			})
		}
	}
	close(start)
	sent.Wait()

	// While they are held, an operator's request is answered.
	client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for range 10 {
		req, _ := http.NewRequest("GET", "http://"+srv.addr+"/v1/approvals", nil)
		req.Header.Set("Authorization", "Bearer "+reader)
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("GET /v1/approvals during the hold: %v", err)
			break
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
		case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
		default:
			t.Errorf("GET /v1/approvals during the hold: status %d (Retry-After %q), want 200, or 503 with Retry-After",
				resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}

	peak, now := residentMemory(t, pid)
	t.Logf("server memory with %d held connections: peak %d MiB, now %d MiB", len(attacks)*perEndpoint, peak>>20, now>>20)
	if peak >= heldMemoryLimit {
		t.Errorf("server resident memory peaked at %d MiB, want under %d MiB", peak>>20, heldMemoryLimit>>20)
	}
}

// residentMemory returns the process's peak resident memory (VmHWM) and its current one
// (VmRSS), in bytes, from /proc/PID/status.
func residentMemory(t *testing.T, pid int) (peak, now int64) {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Skipf("no /proc status for the server: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmHWM" && name != "VmRSS") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", name, value, err)
		}
		if name == "VmHWM" {
			peak = kb << 10
		} else {
			now = kb << 10
		}
	}
	if peak == 0 || now == 0 {
		t.Fatalf("/proc/%d/status has no VmHWM or VmRSS", pid)
	}
	return peak, now
}
