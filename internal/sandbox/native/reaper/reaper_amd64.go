package reaper

import _ "embed"

//go:embed reaper_amd64.elf
var program []byte

// Program returns the reaper's executable for this architecture, or nil.
func Program() []byte { return program }
