package wiring

import (
	"io"
	"log/slog"
	"strings"
	"testing"
)

const netRules = "rules:\n" +
	"  - id: local-api\n    effect: allow\n    match: {action: net, host: \"127.0.0.1:8080\"}\n" +
	"  - id: no-evil\n    effect: block\n    message: not that one\n    match: {action: net, host: \"evil.test\"}\n"

// TestSessionNetDecide: each destination is decided by the live policy
// in force when the request arrives: an allow by a rule lets it through,
// block and approve refuse it naming the rule (approve saying how the
// person can allow it), and an edit that drops the rule refuses the next
// request.
func TestSessionNetDecide(t *testing.T) {
	f := newLiveFixture(t, false)
	f.write(t, netRules)
	n := &sessionNet{u: f.live.u, live: f.live, ws: f.ws, session: "s1", log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := t.Context()
	if v := n.decide(ctx, "127.0.0.1", 8080); !v.Allow || v.Rule != "local-api" {
		t.Fatalf("allowed host: %+v", v)
	}
	if v := n.decide(ctx, "127.0.0.1", 8081); v.Allow || v.Rule != "default.network" || !strings.Contains(v.Reason, `host: "127.0.0.1:8081"`) {
		t.Fatalf("host no rule allows: %+v", v)
	}
	if v := n.decide(ctx, "evil.test", 80); v.Allow || v.Rule != "no-evil" || v.Reason != "not that one" {
		t.Fatalf("blocked host: %+v", v)
	}
	f.write(t, "rules: []\n")
	if v := n.decide(ctx, "127.0.0.1", 8080); v.Allow {
		t.Fatalf("after the rule was removed: %+v", v)
	}
	// No rule names a host: no proxy at all.
	eg, err := n.egress(ctx, "c1")
	if err != nil || eg != nil {
		t.Fatalf("egress without a host rule: %v, %v; want none", eg, err)
	}
}

func TestNamesLoopback(t *testing.T) {
	for pats, want := range map[string]bool{
		"127.0.0.1:8080":    true,
		"127.0.0.2":         true,
		"localhost:*":       true,
		"127.*:80":          true,
		"api.example.com":   false,
		"*.example.com:443": false,
		"10.0.0.1:80":       false,
	} {
		if got := namesLoopback(strings.Fields(pats)); got != want {
			t.Errorf("namesLoopback(%q) = %v, want %v", pats, got, want)
		}
	}
}
