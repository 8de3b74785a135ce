package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/doctor"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/userenv"
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

// doctorCore reports the native sandbox's facilities by the names it
// uses, all present.
type doctorCore struct{ Core }

func (doctorCore) SandboxFacilities(context.Context, *userenv.Env) []sandbox.Facility {
	var out []sandbox.Facility
	for _, n := range []string{"userns", "overlay-userns", "landlock", "seccomp", "cgroup", "sandbox-init"} {
		out = append(out, sandbox.Facility{Name: n, Available: true})
	}
	return out
}

// Every check of 'fluffy doctor', the CLI's own included, carries a link
// to its section of docs/troubleshooting.md, and the section exists.
func TestDoctorLinks(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	a := &App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Cwd: dir, Self: filepath.Join(dir, "fluffy-core"), Core: doctorCore{},
		Environ: []string{"HOME=" + dir, "FLUFFY_HOME=" + filepath.Join(dir, "data"), "XDG_CONFIG_HOME=" + dir, "XDG_RUNTIME_DIR=" + dir, "PATH=/nonexistent"}}
	if code := Main(t.Context(), a, []string{"doctor", "--json"}); code != 0 && code != ExitFailure {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var rep doctor.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../" + doctor.TroubleshootingDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Checks {
		anchor, ok := strings.CutPrefix(c.Doc, doctor.TroubleshootingDoc+"#")
		if !ok {
			t.Errorf("check %q: doc %q", c.Name, c.Doc)
			continue
		}
		if !docHasAnchor(string(b), anchor) {
			t.Errorf("check %q: %s has no section #%s", c.Name, doctor.TroubleshootingDoc, anchor)
		}
	}
	for _, want := range []string{"fluffy.db", "backups", "oom protection", "audit log", "landlock"} {
		if !strings.Contains(out.String(), `"name": "`+want+`"`) {
			t.Errorf("no %q check in %s", want, out.String())
		}
	}
}

// docHasAnchor reports whether a "## " heading of doc has the GitHub
// anchor a.
func docHasAnchor(doc, a string) bool {
	for _, line := range strings.Split(doc, "\n") {
		h, ok := strings.CutPrefix(line, "## ")
		if !ok {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		if b.String() == a {
			return true
		}
	}
	return false
}
