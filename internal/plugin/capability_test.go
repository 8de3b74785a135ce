package plugin

import (
	"errors"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/policy"
)

const testPolicy = `rules:
  - id: no-evil
    effect: block
    message: not this host
    match: {action: net, host: "evil.example"}
  - id: mcp-writes
    effect: approve
    match: {tool: "mcp.*", action: write}
  - id: mcp-reads
    effect: allow
    match: {tool: "mcp.*", action: read}
  - id: gh-wild
    effect: allow
    match: {action: net, host: "*.githubusercontent.com"}
`

func TestPreCheck(t *testing.T) {
	e, err := policy.Compile(policy.Options{Default: policy.Approve}, policy.Source{Name: "user.yaml", Layer: policy.LayerUser, Data: []byte(testPolicy)})
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest{Name: "gh", Network: []string{"api.github.com:443", "*.githubusercontent.com"},
		Credentials:  []Credential{{Ref: "secret://age/gh", As: "env", Name: "T"}},
		Capabilities: []Capability{CapReadWorkspace, CapWriteChangeSet, CapNetwork, CapSecrets, CapMessages}}
	checks, err := PreCheck(t.Context(), e, m, "/ws", "strict")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		c      Capability
		effect policy.Effect
		rule   string
	}{
		{CapReadWorkspace, policy.Allow, "mcp-reads"},
		{CapWriteChangeSet, policy.Approve, "mcp-writes"},
		{CapNetwork, policy.Approve, ""},
		{CapNetwork, policy.Allow, "gh-wild"},
		{CapSecrets, policy.Approve, ""},
		{CapMessages, policy.Approve, ""},
	}
	if len(checks) != len(want) {
		t.Fatalf("%d checks: %+v", len(checks), checks)
	}
	for i, w := range want {
		c := checks[i]
		if c.Capability != w.c || c.Decision.Effect != w.effect || (w.rule != "" && c.Decision.Rule != w.rule) {
			t.Errorf("check %d: %s %s: %s by %s, want %s by %s", i, c.Capability, c.What, c.Decision.Effect, c.Decision.Rule, w.effect, w.rule)
		}
	}
	m.Network = append(m.Network, "evil.example")
	if _, err := PreCheck(t.Context(), e, m, "/ws", "strict"); !errors.Is(err, ErrBlocked) {
		t.Fatalf("a blocked host: %v, want ErrBlocked", err)
	}
}
