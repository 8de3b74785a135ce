package main

import (
	"regexp"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	scriptCmds["capture"] = capture
}

// capture NAME REGEXP sets the environment variable NAME to the first
// submatch of REGEXP in the last command's stdout (a session id, say).
func capture(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: capture NAME REGEXP")
	}
	re, err := regexp.Compile(args[1])
	ts.Check(err)
	m := re.FindStringSubmatch(ts.ReadFile("stdout"))
	if len(m) < 2 {
		ts.Fatalf("capture: %q does not match stdout", args[1])
	}
	ts.Setenv(args[0], m[1])
}
