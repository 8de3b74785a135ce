package cli

import (
	"testing"

	"github.com/spf13/pflag"
)

func TestFrontRuns(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"sandbox", "run", "--", "/bin/true"}, true},
		{[]string{"sandbox", "run", "--help"}, true},
		{[]string{"--home", "/h", "--debug", "sandbox", "run", "true"}, true},
		{[]string{"--set=sandbox.memory=1G", "--config", "c.yaml", "--log-level=warn", "sandbox", "run", "true"}, true},
		{[]string{"version"}, true},
		{[]string{"version", "--json"}, true},
		{[]string{"--debug", "version"}, true},
		{nil, false},                       // interactive session
		{[]string{"fix the tests"}, false}, // a task
		{[]string{"sandbox"}, false},       // help of the group
		{[]string{"sandbox", "diff", "--changeset", "d"}, false},
		{[]string{"sandbox", "gc"}, false},
		{[]string{"--help"}, false},
		{[]string{"-h", "sandbox", "run"}, false}, // unknown shorthand: fluffy-core says so
		{[]string{"session", "ls"}, false},
		{[]string{"--home", "sandbox", "run"}, false}, // "sandbox" is --home's value
		{[]string{"run", "sandbox"}, false},
		{[]string{"kernel", "version"}, false},
	} {
		if got := FrontRuns(tc.args); got != tc.want {
			t.Errorf("FrontRuns(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestFrontRunsKnowsGlobalFlags: every global flag of the command tree,
// before 'sandbox run', keeps the command line with the front build (a
// new global flag FrontRuns does not know would silently send every
// 'sandbox run' using it to fluffy-core).
func TestFrontRunsKnowsGlobalFlags(t *testing.T) {
	root := NewRoot(&App{})
	n := 0
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		n++
		args := []string{"--" + f.Name}
		if f.Value.Type() != "bool" {
			args = append(args, "value")
		}
		args = append(args, "sandbox", "run", "--", "/bin/true")
		if !FrontRuns(args) {
			t.Errorf("FrontRuns(%q) = false: teach it --%s", args, f.Name)
		}
	})
	if n == 0 {
		t.Fatal("no global flags seen")
	}
}
