package cli

import (
	"testing"

	"github.com/spf13/pflag"

	"github.com/fluffy-agent/fluffy/internal/sandboxd"
)

// TestForwardableKnowsGlobalFlags: every global flag of the command tree,
// before 'sandbox run', keeps the command line forwardable to the sandbox
// server (a new global flag that sandboxd.Forwardable does not know would
// silently send every 'sandbox run' using it to a fluffy-core process).
func TestForwardableKnowsGlobalFlags(t *testing.T) {
	root := NewRoot(&App{})
	n := 0
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		n++
		args := []string{"--" + f.Name}
		if f.Value.Type() != "bool" {
			args = append(args, "value")
		}
		args = append(args, "sandbox", "run", "--", "/bin/true")
		if !sandboxd.Forwardable(args) {
			t.Errorf("sandboxd.Forwardable(%q) = false: teach it --%s", args, f.Name)
		}
	})
	if n == 0 {
		t.Fatal("no global flags seen")
	}
}
