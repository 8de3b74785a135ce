package arch

import (
	"os/exec"
	"strings"
	"testing"
)

// heavy are the packages the front build of cmd/fluffy (the 'fluffy'
// binary, a client of the sandbox server) must not link: each costs every
// sandboxed command start-up time (package initialisers, page-ins). The
// full build (fluffy-core) has them all.
var heavy = []string{
	"modernc.org/", "github.com/spf13/cobra", "go.yaml.in/", "net/http",
	module + "/internal/cli", module + "/internal/audit", module + "/internal/store", module + "/internal/config",
	module + "/internal/sandbox/native",
	"github.com/anthropics/", "github.com/openai/", "google.golang.org/genai", "google.golang.org/grpc",
	"github.com/moby/", "github.com/docker/", "cel.dev/", "github.com/go-git/",
	"github.com/google/jsonschema-go", "github.com/ergochat/", "maunium.net/", "go.mau.fi/",
	module + "/internal/kernel", module + "/internal/policy", module + "/internal/llm",
	module + "/internal/agent", module + "/internal/bootstrap", module + "/internal/sandbox/docker",
}

func deps(t *testing.T, tags string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	cmd := exec.Command(goBin, "list", "-deps", "-tags", tags, "./cmd/fluffy")
	cmd.Dir = moduleRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	return strings.Fields(string(out))
}

// TestFrontBuildStaysSmall fails when a change makes the front build link
// a heavy package (typically: the client side of internal/sandboxd
// importing more than the standard library's basics).
func TestFrontBuildStaysSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	count := func(list []string) map[string]int {
		n := map[string]int{}
		for _, p := range list {
			for _, h := range heavy {
				if strings.HasPrefix(p, h) {
					n[h]++
				}
			}
		}
		return n
	}
	// goolm: the Makefile's tag, which links the Matrix channel.
	front := count(deps(t, "fluffy_front,goolm"))
	for h, n := range front {
		t.Errorf("the front build links %d packages under %s", n, h)
	}
	// Not vacuous: the full build links every one of them.
	full := count(deps(t, "goolm"))
	for _, h := range heavy {
		if full[h] == 0 {
			t.Errorf("the full build links nothing under %s: update the list", h)
		}
	}
}
