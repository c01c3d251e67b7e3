package httpapi_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/sqlite"
)

// TestReadyz_SQLiteDiskFull: SQLite on a file system with no space left answers reads but
// takes no writes, and is not ready; once space is freed /readyz answers 200 within a second,
// with no restart. The file system is a small tmpfs of the test's own, which needs the
// privilege to mount one (root in a container that allows it); the test is skipped without it.
func TestReadyz_SQLiteDiskFull(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("mount a tmpfs for the full disk: %v (needs CAP_SYS_ADMIN)", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	ctx := context.Background()
	s, err := sqlite.Open(ctx, "file:"+filepath.Join(dir, "approvald.db"))
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	f := setup(t, testdb.SQLite, func(cfg *httpapi.Config) { cfg.Store = s })
	f.wantReady(t)

	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	f.clock.Advance(httpapi.WriteProbeEvery)
	f.wantNotWriting(t)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	f.wantNotWriting(t) // the check's answer is kept for a second
	f.clock.Advance(httpapi.WriteProbeEvery)
	f.wantReady(t)
}

// fill writes path until the file system it is on has no space left.
func fill(t *testing.T, path string) {
	t.Helper()
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := file.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: got %v, want ENOSPC", path, err)
			}
			break
		}
	}
	// A few bytes may still fit after the last whole chunk failed.
	for {
		if _, err := file.Write(chunk[:512]); err != nil {
			return
		}
	}
}
