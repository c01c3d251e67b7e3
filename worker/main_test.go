package worker_test

import (
	"flag"
	"os"
	"testing"
)

// TestMain runs eight of the package's parallel tests at once, unless -parallel says
// otherwise: they spend most of their time waiting (a call held open, a lease renewed in real
// time, a retry's backoff), a tenth of it on the CPU, so the default of one test per core
// left the cores idle.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", "8"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
