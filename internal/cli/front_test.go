package cli

import "testing"

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
