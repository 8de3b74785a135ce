//go:build !amd64

package reaper

// Program returns the reaper's executable for this architecture, or nil.
func Program() []byte { return nil }
