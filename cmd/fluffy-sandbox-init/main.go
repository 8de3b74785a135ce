// Command fluffy-sandbox-init is the native sandbox's init (package
// nsinit) as a small binary of its own, installed beside fluffy: the
// fluffy binary starts it for every sandboxed command, and a small static
// binary starts in a fraction of the time the whole of fluffy takes. It
// is not meant to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
)

func main() {
	if nsinit.IsStage1() {
		os.Exit(nsinit.Stage1Main())
	}
	if !nsinit.IsInit() {
		fmt.Fprintln(os.Stderr, "fluffy-sandbox-init is started by fluffy (fluffy sandbox run); it is not a command of its own")
		os.Exit(2)
	}
	os.Exit(nsinit.Main())
}
