package arch

import (
	"sort"
	"strings"
	"testing"
)

// cliNever are the packages internal/cli must not depend on, directly or
// through another package: the CLI is flags, rendering and IPC calls.
// The daemon side (internal/wiring) links the sandbox backends, the tool
// router with its built-in tools and the egress proxy, and cmd/fluffy
// hands it to the CLI through small interfaces (cli.Core), as a client
// that never links the daemon. A CLI that linked them would again be
// where the wiring hides, and the small client build could not stay
// small.
var cliNever = []string{
	"internal/sandbox/native",
	"internal/sandbox/docker",
	"internal/tool/router",
	"internal/tool/builtin",
	"internal/netproxy",
	"internal/wiring",
}

// TestCLINeverLinksTheDaemon follows internal/cli's imports within the
// module, transitively, and fails on any package of cliNever (or below
// one), naming the chain that reaches it.
func TestCLINeverLinksTheDaemon(t *testing.T) {
	byPath := map[string]*pkg{}
	for _, p := range loadPackages(t) {
		byPath[strings.TrimPrefix(strings.TrimPrefix(p.path, module), "/")] = p
	}
	start := "internal/cli"
	if byPath[start] == nil {
		t.Fatal("internal/cli not found")
	}
	// Breadth first, remembering how each package was reached.
	via := map[string]string{start: ""}
	queue := []string{start}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		var next []string
		for imp := range byPath[cur].imports {
			rel, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			if _, seen := via[rel]; !seen {
				next = append(next, rel)
			}
		}
		sort.Strings(next)
		for _, rel := range next {
			via[rel] = cur
			if byPath[rel] != nil {
				queue = append(queue, rel)
			}
		}
	}
	if len(via) < 5 {
		t.Fatalf("internal/cli reaches only %d packages: the walk is broken", len(via))
	}
	for dep := range via {
		for _, never := range cliNever {
			if dep != never && !strings.HasPrefix(dep, never+"/") {
				continue
			}
			chain := []string{dep}
			for p := via[dep]; p != ""; p = via[p] {
				chain = append([]string{p}, chain...)
			}
			t.Errorf("internal/cli depends on %s (%s): the CLI must reach the daemon side only through cli.Core", dep, strings.Join(chain, " → "))
		}
	}
}
