// Package buildinfo owns what the binary knows about its own build: the
// version and commit stamped in by the linker (see the Makefile), with the
// Go toolchain's build information as the fallback.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Set at link time: -X github.com/fluffy-agent/fluffy/internal/buildinfo.version=...
// These are the only package-level variables fluffy has, and nothing writes
// them at run time.
var (
	version = ""
	commit  = ""
)

// Info describes this build.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// Get returns the build information.
func Get() Info {
	i := Info{Version: version, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && i.Commit == "" {
				i.Commit = s.Value
			}
		}
	}
	if i.Version == "" {
		i.Version = "dev"
	}
	if i.Commit == "" {
		i.Commit = "unknown"
	}
	return i
}
