package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/doctor"
)

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
		t.Errorf("fluffy-core without the client: %+v", c)
	}
	lone := touch("fluffy")
	if c := binariesCheck(lone); c.Status != doctor.Warn {
		t.Errorf("a lone full build named fluffy: %+v", c)
	}
	if c := binariesCheck(core); c.Status != doctor.OK || !strings.Contains(c.Detail, dir) {
		t.Errorf("fluffy-core with the client beside it: %+v", c)
	}
}

// The sandbox server check fails on a socket directory another user
// could use, with the fix, and says off when the server is turned off.
func TestServerCheck(t *testing.T) {
	core := filepath.Join(t.TempDir(), "fluffy-core")
	if err := os.WriteFile(core, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	run := t.TempDir()
	app := func(env ...string) *App {
		return &App{Self: core, Cwd: run, Environ: append([]string{"HOME=" + run, "XDG_CONFIG_HOME=" + run, "XDG_RUNTIME_DIR=" + run, "TMPDIR=" + run}, env...)}
	}
	t.Setenv("XDG_RUNTIME_DIR", run) // sandboxd.SocketPath reads the process environment
	if c := serverCheck(app()); c.Status != doctor.OK || !strings.Contains(c.Detail, "not running") {
		t.Errorf("fresh: %+v", c)
	}
	if err := os.Chmod(filepath.Join(run, "fluffy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if c := serverCheck(app()); c.Status != doctor.Fail || !strings.Contains(c.Detail, "open to group or others") || !strings.Contains(c.Fix, "chmod 700") {
		t.Errorf("a socket directory open to others: %+v", c)
	}
	if c := serverCheck(app("FLUFFY_SANDBOX_SERVER=off")); c.Status != doctor.OK || !strings.HasPrefix(c.Detail, "off") {
		t.Errorf("turned off: %+v", c)
	}
}
