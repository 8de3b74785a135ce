package cli

import (
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
	opts, err := a.user().PolicyOptions()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"fluffy", "fluffy-core", "fluffy-sandbox-init"} {
		if p := filepath.Join(bin, name); !slices.Contains(opts.Protected.Paths, p) {
			t.Errorf("%s is not protected; protected: %q", p, opts.Protected.Paths)
		}
	}
}
