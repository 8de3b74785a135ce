package doctor

import (
	"context"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/secret"
)

type stateBackend secret.State

func (stateBackend) Lookup(context.Context, string) ([]byte, error) { return nil, secret.ErrNotFound }
func (s stateBackend) State(context.Context) (secret.State, string) {
	return secret.State(s), "why"
}

func TestSecretChecks(t *testing.T) {
	got := SecretChecks(t.Context(), map[string]secret.Backend{
		"b": stateBackend(secret.Locked), "a": stateBackend(secret.Unlocked), "c": stateBackend(secret.Unreachable),
	})
	want := []struct {
		name   string
		status Status
		detail string
	}{{"secrets: a", OK, "unlocked: why"}, {"secrets: b", Warn, "locked: why"}, {"secrets: c", Warn, "unreachable: why"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i, w := range want {
		if got[i].Name != w.name || got[i].Status != w.status || got[i].Detail != w.detail || got[i].Required {
			t.Errorf("check %d = %+v, want %+v", i, got[i], w)
		}
	}
}
