package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/approvald/approval/sqlite"
)

// TestFilesOwnerOnly: the database, its WAL and its shared-memory file are created 0600
// whatever the umask, and an existing database left readable by others (an older version
// created it 0644) is restricted when opened.
func TestFilesOwnerOnly(t *testing.T) {
	old := syscall.Umask(0o002) // the most permissive umask a user is likely to have
	defer syscall.Umask(old)

	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "approval s.db") // a space, escaped in the URI
	s, err := sqlite.Open(ctx, "file:"+filepath.ToSlash(filepath.Dir(path))+"/approval%20s.db")
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	MustCreateApproval(t, s, "ci-bot", "deploy-1") // a write: the WAL and SHM exist now
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatalf("stat: %v", err)
		}
		if perm := info.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s: mode %o, want 600", filepath.Base(p), perm)
		}
	}
	s.Close()

	older := filepath.Join(dir, "older.db")
	if err := os.WriteFile(older, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(older, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = sqlite.Open(ctx, older)
	if err != nil {
		t.Fatalf("open the older database: %v", err)
	}
	s.Close()
	if info, err := os.Stat(older); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("older database after open: %v, %v; want mode 600", info.Mode().Perm(), err)
	}
}
