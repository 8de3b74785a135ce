//go:build !fluffy_front

package cli

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/doctor"
)

// The built-in rules protect every fluffy binary installed together, not
// only the one running: the front build (fluffy), the full build
// (fluffy-core) and the sandbox init.
func TestPolicyProtectsEveryBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "opt", "bin")
	a := &App{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard, Cwd: dir,
		Self:    filepath.Join(bin, "fluffy-core"),
		Environ: []string{"HOME=" + dir, "FLUFFY_HOME=" + filepath.Join(dir, "data"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "config")}}
	opts, err := a.policyOptions()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"fluffy", "fluffy-core", "fluffy-sandbox-init"} {
		if p := filepath.Join(bin, name); !slices.Contains(opts.Protected.Paths, p) {
			t.Errorf("%s is not protected; protected: %q", p, opts.Protected.Paths)
		}
	}
}

func TestBinariesCheck(t *testing.T) {
	dir := t.TempDir()
	touch := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	core := touch("fluffy-core")
	if c := binariesCheck(core); c.Status != doctor.Warn || c.Fix == "" {
		t.Errorf("fluffy-core without a front build: %+v", c)
	}
	lone := touch("fluffy")
	if c := binariesCheck(lone); c.Status != doctor.Warn {
		t.Errorf("a lone full build named fluffy: %+v", c)
	}
	if c := binariesCheck(core); c.Status != doctor.OK || !strings.Contains(c.Detail, dir) {
		t.Errorf("fluffy-core with the front build beside it: %+v", c)
	}
}
