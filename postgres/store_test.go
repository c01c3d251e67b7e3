package postgres_test

import (
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/storetest"
)

// TestConformance runs the shared store suite on PostgreSQL, one fresh schema per case.
func TestConformance(t *testing.T) {
	testdb.PostgresURL(t) // skip (or fail, when required) once, not in every case
	storetest.Exercise(t, func(t *testing.T, o storetest.Options) approval.Store {
		return testdb.OpenWith(t, testdb.Postgres, testdb.Options{Now: o.Now})
	})
}
