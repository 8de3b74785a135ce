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

func TestModelEndpointRule(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	none := env(nil)
	tests := []struct {
		model    string
		baseURLs map[string]string
		env      func(string) (string, bool)
		want     string
		wantErr  string
	}{
		{model: "openai/gpt-5", env: none, want: "api.openai.com:443"},
		{model: "anthropic/claude-sonnet-4-5", env: none, want: "api.anthropic.com:443"},
		{model: "ollama/qwen3", env: none, want: "127.0.0.1:11434"},
		{model: "ollama/qwen3", env: env(map[string]string{"OLLAMA_HOST": "gpu-box:8080"}), want: "gpu-box:8080"},
		{model: "openai/gpt-5", baseURLs: map[string]string{"openai": "http://10.1.2.3:8000/v1"}, env: none, want: "10.1.2.3:8000"},
		{model: "replay/demo", env: none, want: ""},
		{model: "openai-compat/x", env: none, want: ""},
		{model: "openai/gpt-5", baseURLs: map[string]string{"openai": "ftp://x/"}, env: none, wantErr: "scheme must be http or https"},
		{model: "nonsense", env: none, wantErr: "want provider/name"},
	}
	for _, tt := range tests {
		got, err := modelEndpointRule(tt.model, tt.baseURLs, tt.env)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err = %v, want %q", tt.model, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s %v: %q, %v; want %q", tt.model, tt.baseURLs, got, err, tt.want)
		}
	}
}
