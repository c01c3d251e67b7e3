package sqlite_test

import (
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/storetest"
)

// TestConformance runs the shared store suite on SQLite.
func TestConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T, o storetest.Options) approval.Store {
		return testdb.OpenWith(t, testdb.SQLite, testdb.Options{Now: o.Now})
	})
}
