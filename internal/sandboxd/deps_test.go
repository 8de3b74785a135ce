package sandboxd

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsStayLight: the package is linked into the small fluffy
// client, whose start-up every forwarded command pays. It may use the
// standard library and golang.org/x/sys only, and of the standard library
// nothing that brings a network stack, TLS, a process launcher beyond os,
// or templates.
func TestImportsStayLight(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := []string{"net", "net/http", "crypto/tls", "os/exec", "text/template", "html/template", "database/sql"}
	n := 0
	for _, p := range strings.Fields(string(out)) {
		n++
		first, _, _ := strings.Cut(p, "/")
		switch {
		case p == "github.com/fluffy-agent/fluffy/internal/sandboxd":
		case strings.Contains(first, "."):
			if !strings.HasPrefix(p, "golang.org/x/sys/") {
				t.Errorf("imports %s: only the standard library and golang.org/x/sys are allowed", p)
			}
		default:
			for _, f := range forbidden {
				if p == f {
					t.Errorf("imports %s", p)
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("go list gave %d packages: broken", n)
	}
}
