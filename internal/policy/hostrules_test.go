package policy

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

func netOp(host string, port int) operation.Operation {
	return operation.Operation{Tool: "net.connect", Action: operation.Net, Hosts: []operation.Host{{Name: host, Port: port}}}
}

var registryRule = HostRule{ID: "default.registry.go", Description: "the Go module proxy (net.registries.go)",
	Hosts: []string{"proxy.golang.org:443", "sum.golang.org:443"}, Origin: "config net.registries.go (config.yaml:3)"}

// TestHostRules: a generated rule sends its hosts, and only those, to
// approval ahead of default.network; a user rule overrides it; explain
// and HostPatterns see it; it is part of the digest.
func TestHostRules(t *testing.T) {
	ctx := context.Background()
	opts := Options{HostRules: []HostRule{registryRule}}
	e := mustCompile(t, opts, "")
	d := e.Decide(ctx, netOp("proxy.golang.org", 443))
	if d.Effect != Approve || d.Rule != "default.registry.go" || d.Layer != LayerDefault || d.Source != registryRule.Origin {
		t.Fatalf("registry host: %+v", d)
	}
	for _, op := range []operation.Operation{netOp("proxy.golang.org", 80), netOp("evil.golang.org", 443), netOp("proxy.golang.org.evil.test", 443)} {
		if d := e.Decide(ctx, op); d.Rule != "default.network" {
			t.Fatalf("%v: decided by %s, want default.network", op.Hosts, d.Rule)
		}
	}
	if got := e.HostPatterns(); !slices.Equal(got, registryRule.Hosts) {
		t.Fatalf("HostPatterns = %q", got)
	}
	if i := slices.IndexFunc(e.Rules(), func(r RuleInfo) bool { return r.ID == "default.registry.go" }); i < 0 || e.Rules()[i].Source != registryRule.Origin {
		t.Fatalf("Rules() lacks the generated rule or its origin: %+v", e.Rules())
	}
	if e.Digest() == mustCompile(t, Options{}, "").Digest() {
		t.Fatal("the generated rule is not part of the digest")
	}
	user := mustCompile(t, opts, "rules:\n  - id: mine\n    effect: block\n    match: {action: net, host: \"proxy.golang.org\"}\n")
	if d := user.Decide(ctx, netOp("proxy.golang.org", 443)); d.Effect != Block || d.Rule != "mine" {
		t.Fatalf("user rule over the generated one: %+v", d)
	}
	if _, err := Compile(Options{HostRules: []HostRule{{ID: "x", Hosts: []string{"a.test:99999"}}}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad host: %v", err)
	}
}
