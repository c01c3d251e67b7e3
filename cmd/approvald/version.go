package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

var _ command = (*VersionCommand)(nil)

// VersionCommand prints the version of the binary.
type VersionCommand struct {
	stdout io.Writer
	stderr io.Writer
}

// NewVersionCommand returns a VersionCommand writing to the given streams.
func NewVersionCommand(stdout, stderr io.Writer) *VersionCommand {
	return &VersionCommand{stdout: stdout, stderr: stderr}
}

// ParseFlags parses the flags. --config and --database-url are accepted, like on every
// subcommand, so that scripts can pass the same flags everywhere, but the version needs
// neither.
func (c *VersionCommand) ParseFlags(ctx context.Context, args []string) error {
	fs := newFlagSet("approvald version", versionUsage, c.stderr)
	var cf configFlags
	cf.register(fs)
	return parseFlags(fs, args)
}

// Run prints the version.
func (c *VersionCommand) Run(ctx context.Context) error {
	info, _ := debug.ReadBuildInfo()
	_, err := fmt.Fprintln(c.stdout, "approvald "+version(info))
	return err
}

// Close does nothing: the version opens nothing.
func (c *VersionCommand) Close() error { return nil }

// Set by the linker for builds outside a git checkout (the container image's): go build
// -ldflags "-X main.buildVersion=v1.2.0 -X main.buildCommit=$(git rev-parse HEAD)". They win
// over what the Go toolchain recorded.
var (
	buildVersion string
	buildCommit  string
)

// version describes a build: the module version ("dev" for a build that has none), then the
// VCS revision when the build recorded one.
func version(info *debug.BuildInfo) string {
	if buildVersion != "" || buildCommit != "" {
		v := cmp.Or(buildVersion, "dev")
		if buildCommit != "" {
			v += " (revision " + buildCommit + ")"
		}
		return v
	}
	v := "dev"
	if info == nil {
		return v
	}
	if info.Main.Version != "" && info.Main.Version != "(devel)" {
		v = info.Main.Version
	}
	var revision, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if revision != "" {
		v += " (revision " + revision
		if modified == "true" {
			v += ", modified"
		}
		v += ")"
	}
	return v
}

const versionUsage = `Usage: approvald version

Prints the version of the binary.

Flags:
`
