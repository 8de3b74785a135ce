package wiring

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/plugin"
)

// TestPluginCredentials: a plugin's declared credential goes through the
// broker's declared-use path: the policy's secret operation allows it,
// it is recorded as secret.use for plugin:NAME (never the value), the
// server gets it in its environment and nothing else of the broker's,
// and the session's redaction strips it; a policy that blocks secrets
// refuses the start, recorded too.
func TestPluginCredentials(t *testing.T) {
	s := newSecretSession(t, allowSecrets, defaultUses, nil)
	ss := s.sec.forSession(s.live, s.cs.Workspace(), s.session, s.tee, nil, s.cs)
	creds := []plugin.Credential{{Ref: s.sec.uses[0].Ref.String(), As: "env", Name: "API_TOKEN"}}
	got, err := ss.plugin(t.Context(), "wc", creds)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Env, []string{"API_TOKEN=" + s.value}) || len(got.Mounts) != 0 {
		t.Fatalf("env %q, mounts %v", got.Env, got.Mounts)
	}
	if r := string(got.Redact([]byte("echo " + s.value))); strings.Contains(r, s.value) || !strings.Contains(r, "[REDACTED]") {
		t.Errorf("redacted: %q", r)
	}
	got.Close()
	var uses []audit.SecretUse
	for _, e := range s.tee.entries {
		if b, _ := json.Marshal(e.Payload); strings.Contains(string(b), s.value) {
			t.Errorf("audit %s holds the value: %s", e.Kind, b)
		}
		if p, ok := e.Payload.(audit.SecretUse); ok {
			uses = append(uses, p)
		}
	}
	if len(uses) != 1 || uses[0].Call != "plugin:wc" || uses[0].Decision != "allowed" || uses[0].Rule != "my-secrets" || uses[0].Name != "API_TOKEN" {
		t.Fatalf("secret.use %+v", uses)
	}
	// stdin is the server's MCP stream: refused before anything.
	if _, err := ss.plugin(t.Context(), "wc", []plugin.Credential{{Ref: creds[0].Ref, As: "stdin"}}); !errors.Is(err, ErrSecretRefused) {
		t.Errorf("stdin use: %v", err)
	}
}

// TestPluginCredentialsBlocked: the policy's secret operation decides a
// plugin's credentials as any other use: blocked, the server gets none.
func TestPluginCredentialsBlocked(t *testing.T) {
	block := "rules:\n  - id: no-secrets\n    effect: block\n    match:\n      action: secret\n"
	s := newSecretSession(t, block, defaultUses, nil)
	ss := s.sec.forSession(s.live, s.cs.Workspace(), s.session, s.tee, nil, s.cs)
	creds := []plugin.Credential{{Ref: s.sec.uses[0].Ref.String(), As: "env", Name: "API_TOKEN"}}
	if _, err := ss.plugin(t.Context(), "wc", creds); !errors.Is(err, ErrSecretRefused) {
		t.Fatalf("blocked use: %v", err)
	}
	var refused bool
	for _, e := range s.tee.entries {
		if p, ok := e.Payload.(audit.SecretUse); ok && p.Call == "plugin:wc" && p.Decision == "refused" && p.Rule == "no-secrets" {
			refused = true
		}
	}
	if !refused {
		t.Fatalf("no refusal recorded: %+v", s.tee.entries)
	}
}
