package sqlite_test

import (
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/storetest"
)

// TestConformance runs the shared store suite on SQLite.
func TestConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T, now func() time.Time) approval.Store {
		return testdb.Open(t, testdb.SQLite, now)
	})
}
