package sqldb_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestNoDriverShadowsTx: a driver's transaction (ruleTx, which embeds sqldb.Tx) declares no
// method that sqldb.Tx also has. A statement a driver specialises is one sqldb.Tx does not
// hold, so that deleting the driver's method fails to compile (var _ approval.Tx) instead of
// silently falling back to the shared SQL (docs/architecture.md, "Layers").
func TestNoDriverShadowsTx(t *testing.T) {
	shared := methods(t, ".", "Tx")
	for _, driver := range []string{"../../sqlite", "../../postgres"} {
		var shadowed []string
		for name := range methods(t, driver, "ruleTx") {
			if shared[name] {
				shadowed = append(shadowed, name)
			}
		}
		sort.Strings(shadowed)
		if len(shadowed) > 0 {
			t.Errorf("%s: ruleTx shadows sqldb.Tx's %s: got methods of both, want the shared SQL under a name of its own",
				driver, strings.Join(shadowed, ", "))
		}
	}
}

// methods returns the exported methods declared on the type named recv (value or pointer
// receiver) in the non-test Go files of dir.
func methods(t *testing.T, dir, recv string) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	found := map[string]bool{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", e.Name(), err)
		}
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || !fn.Name.IsExported() {
				continue
			}
			typ := fn.Recv.List[0].Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			if id, ok := typ.(*ast.Ident); ok && id.Name == recv {
				found[fn.Name.Name] = true
			}
		}
	}
	if len(found) == 0 {
		t.Fatalf("%s: no methods of %s found", dir, recv)
	}
	return found
}
