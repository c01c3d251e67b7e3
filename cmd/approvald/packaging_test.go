package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/approvald/approval/internal/testdb"
)

// TestHealth: the health command the image's HEALTHCHECK runs answers 0 for a live server
// (alive and ready), 1 for an address nobody serves, and takes the address from
// APPROVALD_LISTEN as the image sets it.
func TestHealth(t *testing.T) {
	t.Parallel()
	srv := startServe(t, testdb.DSN(t, testdb.SQLite))
	for _, args := range [][]string{
		{"health", "--url", "http://" + srv.addr},
		{"health", "--ready", "--url", "http://" + srv.addr},
	} {
		if stdout, stderr, code := run(t, args...); code != 0 || !strings.Contains(stdout, "200 OK") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and 200 OK", args, code, stdout, stderr)
		}
	}
	_, port, _ := strings.Cut(srv.addr, ":")
	cmd := exec.Command(binary, "health")
	cmd.Env = append(os.Environ(), "APPROVALD_LISTEN=0.0.0.0:"+port)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("health with APPROVALD_LISTEN=0.0.0.0:%s: %v\n%s", port, err, out)
	}
	if _, stderr, code := run(t, "health", "--url", "http://127.0.0.1:1"); code != 1 || !strings.Contains(stderr, "refused") {
		t.Errorf("health on a closed port: exit %d, stderr %q; want 1 and the reason", code, stderr)
	}
}

// TestPackaging_SystemdUnit verifies deploy/approvald.service with systemd-analyze, pointing
// its ExecStart at the binary under test.
func TestPackaging_SystemdUnit(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-analyze is not installed: CI must check the unit, not skip it")
		}
		t.Skip("systemd-analyze is not installed")
	}
	unit, err := os.ReadFile("../../deploy/approvald.service")
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(binary)
	if err != nil {
		t.Fatal(err)
	}
	unit = regexp.MustCompile(`(?m)^ExecStart=/usr/local/bin/approvald`).ReplaceAll(unit, []byte("ExecStart="+abs))
	path := filepath.Join(t.TempDir(), "approvald.service")
	if err := os.WriteFile(path, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", path).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestPackaging_Compose checks deploy/compose.yaml's shape (no Docker daemon runs here): two
// approvald replicas on the PostgreSQL service behind the proxy's one port, and the image's
// HEALTHCHECK runs a command the binary has.
func TestPackaging_Compose(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
			DependsOn   any               `yaml:"depends_on"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatalf("parse compose.yaml: %v", err)
	}
	for _, name := range []string{"approvald-1", "approvald-2"} {
		s, ok := compose.Services[name]
		if !ok {
			t.Fatalf("no service %s", name)
		}
		if !strings.HasPrefix(s.Environment["APPROVALD_DATABASE_URL"], "postgres://") || s.Environment["APPROVALD_LISTEN"] != "0.0.0.0:8080" {
			t.Errorf("%s: environment %v, want PostgreSQL and 0.0.0.0:8080", name, s.Environment)
		}
	}
	if p := compose.Services["proxy"].Ports; len(p) != 1 || !strings.HasSuffix(p[0], ":8080") {
		t.Errorf("proxy ports %v, want one on 8080", p)
	}
	cfg, err := os.ReadFile("../../deploy/haproxy.cfg")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"approvald-1:8080", "approvald-2:8080"} {
		if !strings.Contains(string(cfg), name) {
			t.Errorf("haproxy.cfg does not route to %s", name)
		}
	}

	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`CMD \["/usr/local/bin/approvald", "([a-z]+)"\]`).FindSubmatch(dockerfile)
	if m == nil || string(m[1]) != "health" {
		t.Fatalf("Dockerfile: no HEALTHCHECK running approvald health")
	}
	if _, _, code := run(t, "health", "-h"); code != 0 {
		t.Errorf("approvald health -h: exit %d", code)
	}
	for _, want := range []string{"USER 65532", "CGO_ENABLED=0", "HEALTHCHECK"} {
		if !strings.Contains(string(dockerfile), want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}
