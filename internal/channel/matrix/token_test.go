//go:build goolm

package matrix

import (
	"context"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/secret"
)

// A channel resolves its own token reference through the daemon's
// backends (the channel itself exists only with the goolm tag; the
// reference forms are checked in check_test.go, which builds without).
func TestChannelTokenReference(t *testing.T) {
	set := env(map[string]string{})
	m := goodAccount()
	m.TokenEnv, m.Token = "", "secret://age/mx"
	other := func(context.Context, secret.Ref) ([]byte, error) { return []byte("syt_from_age\n"), nil }
	c, err := New(m, Options{StateDir: t.TempDir(), LookupEnv: set, Resolve: other})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.secret(t.Context()); err != nil || got != "syt_from_age" {
		t.Fatalf("the channel's own secret: %q, %v", got, err)
	}
}
