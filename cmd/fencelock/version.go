package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

const versionUsage = `Usage: fencelock version [--json]
       fencelock --version

Prints the module version fencelock was built as ("(devel)" for a build
from a source tree), the commit it was built from and that commit's time
when the build recorded them, and the Go version.
`

// buildVersion is what the binary knows of its own build.
type buildVersion struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"` // built from a tree with uncommitted changes
	Go       string `json:"go"`
}

// readVersion reads the build info the Go toolchain stamped into the
// binary: the module version, and with a build from a git checkout the
// vcs.* settings.
func readVersion() buildVersion {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return stamped(versionOf(bi), stampVersion, stampCommit)
}

// stampVersion and stampCommit are set by a release build that cannot rely
// on the toolchain's VCS stamping (a source tarball, -buildvcs=false):
//
//	go build -trimpath -ldflags "-X main.stampVersion=v0.1.0 -X main.stampCommit=$(git rev-parse HEAD)" ./cmd/fencelock
//
// When set they win over the build info.
var stampVersion, stampCommit string

func stamped(v buildVersion, version, commit string) buildVersion {
	if version != "" {
		v.Version = version
	}
	if commit != "" {
		v.Commit = commit
		v.Modified = false
	}
	return v
}

func versionOf(bi *debug.BuildInfo) buildVersion {
	v := buildVersion{Version: "(devel)", Go: runtime.Version()}
	if bi == nil {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func (v buildVersion) String() string {
	s := "fencelock " + v.Version
	if v.Commit != "" {
		s += " commit " + v.Commit
		if v.Modified {
			s += " (modified)"
		}
		if v.Time != "" {
			s += " of " + v.Time
		}
	}
	return s + " " + v.Go
}

func runVersion(_ context.Context, e *env, args []string) error {
	f := newFlags(e, "version", versionUsage)
	asJSON := f.Bool("json", false, "print the version as JSON")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	v := readVersion()
	if *asJSON {
		return writeJSON(e.stdout, v)
	}
	_, err = fmt.Fprintln(e.stdout, v)
	return err
}
