package cli

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/netproxy"
)

func TestEgressRules(t *testing.T) {
	c := config.Net{
		Allow:     []string{"pypi.org"},
		Templates: map[string][]string{"integration-test": {"*.example.com"}, "ai-provider": {"api.anthropic.com"}},
	}
	got := strings.Join(egressRules(c, "integration-test", []string{"127.0.0.1:8080"}), " ")
	if got != "pypi.org *.example.com 127.0.0.1:8080" {
		t.Errorf("rules %q", got)
	}
	if got := egressRules(config.Net{}, "code-executor", nil); len(got) != 0 {
		t.Errorf("rules %q from nothing", got)
	}
}

type failingRecorder struct{ err error }

func (f failingRecorder) RecordEgress(context.Context, netproxy.Record) error { return f.err }

func TestCLIRecorder(t *testing.T) {
	var stderr, log strings.Builder
	boom := errors.New("audit down")
	r := &cliRecorder{stderr: &stderr, json: netproxy.NewJSONRecorder(&log), next: failingRecorder{boom}}
	allow := netproxy.Record{Method: "GET", Host: "a.example", Port: 80, Decision: netproxy.Allowed, Rule: "a.example"}
	deny := netproxy.Record{Method: "CONNECT", Host: "b.example", Port: 443, Decision: netproxy.Denied, Rule: "not-allowed", Reason: "b.example:443 is not on this sandbox's allow-list"}
	if err := r.RecordEgress(t.Context(), allow); !errors.Is(err, boom) {
		t.Errorf("a failing recorder's error was lost: %v", err)
	}
	r.RecordEgress(t.Context(), deny)
	if stderr.String() != "fluffy: egress: CONNECT b.example:443 deny (not-allowed: b.example:443 is not on this sandbox's allow-list)\n" {
		t.Errorf("stderr %q", stderr.String())
	}
	if n := strings.Count(log.String(), "\n"); n != 2 {
		t.Errorf("%d JSON lines", n)
	}
}
