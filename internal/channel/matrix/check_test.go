package matrix

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/secret"
	"github.com/fluffy-agent/fluffy/internal/units"
)

func goodAccount() config.Matrix {
	return config.Matrix{Homeserver: "https://matrix.example.org", UserID: "@bot:example.org", TokenEnv: "MX_TOKEN",
		Principals: []string{"@ana:example.org"}, Rooms: []string{"!abc:example.org", "#ops:example.org"}, Line: 7, Column: 5}
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestCheck(t *testing.T) {
	where := config.Origin{File: "/home/me/.config/fluffy/config.yaml"}
	set := env(map[string]string{"MX_TOKEN": "syt_abc"})
	if errs := Check([]config.Matrix{goodAccount()}, where, set); len(errs) != 0 {
		t.Fatalf("a good account: %v", errs)
	}
	for _, tc := range []struct {
		name string
		edit func(*config.Matrix)
		want string
	}{
		{"no secret", func(m *config.Matrix) { m.TokenEnv = "" }, "serve.matrix[0].token: one of token (a secret reference), token_env or token_file is required"},
		{"both secrets", func(m *config.Matrix) { m.TokenFile = "/x" }, "more than one of token, token_env and token_file"},
		{"reference and variable", func(m *config.Matrix) { m.Token = "secret://age/mx" }, "more than one of token, token_env and token_file"},
		{"not a reference", func(m *config.Matrix) { m.TokenEnv, m.Token = "", "syt_pasted_token" }, "serve.matrix[0].token:"},
		{"unset reference variable", func(m *config.Matrix) { m.TokenEnv, m.Token = "", "env:NOPE" }, "serve.matrix[0].token: "},
		{"unset variable", func(m *config.Matrix) { m.TokenEnv = "NOPE" }, "environment variable NOPE is not set"},
		{"bad homeserver", func(m *config.Matrix) { m.Homeserver = "matrix.example.org" }, "serve.matrix[0].homeserver"},
		{"bad user", func(m *config.Matrix) { m.UserID = "bot" }, "serve.matrix[0].user_id"},
		{"no principals", func(m *config.Matrix) { m.Principals = nil }, "serve.matrix[0].principals: required"},
		{"bad principal", func(m *config.Matrix) { m.Principals = []string{"ana@example.org"} }, "principals[0]"},
		{"bot as principal", func(m *config.Matrix) { m.Principals = []string{"@bot:example.org"} }, "the bot's own account"},
		{"bad room", func(m *config.Matrix) { m.Rooms = []string{"ops"} }, "rooms[0]"},
		{"bad name", func(m *config.Matrix) { m.Name = "Bad Name" }, "serve.matrix[0].name"},
		{"verification too short", func(m *config.Matrix) { m.VerifyTimeout = units.Duration(10 * time.Second) }, "serve.matrix[0].verify_timeout: 10s: want 30s to 10m"},
		{"verification too long", func(m *config.Matrix) { m.VerifyTimeout = units.Duration(time.Hour) }, "serve.matrix[0].verify_timeout: 1h: want 30s to 10m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := goodAccount()
			tc.edit(&m)
			errs := Check([]config.Matrix{m}, where, set)
			if len(errs) == 0 {
				t.Fatal("no error")
			}
			got := errors.Join(errs...).Error()
			if !strings.Contains(got, tc.want) || !strings.Contains(got, "config.yaml:7:5") {
				t.Fatalf("got %q, want %q at config.yaml:7:5", got, tc.want)
			}
		})
	}
	t.Run("duplicate names", func(t *testing.T) {
		errs := Check([]config.Matrix{goodAccount(), goodAccount()}, where, set)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), `"matrix" is also the name of serve.matrix[0]`) {
			t.Fatalf("got %v", errs)
		}
	})
}

func TestReadSecretFileMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte("syt_secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := goodAccount()
	m.TokenEnv, m.TokenFile = "", p
	_, err := ReadSecret(m, nil)
	if !errors.Is(err, ErrSecret) || !strings.Contains(err.Error(), "chmod 600") || strings.Contains(err.Error(), "syt_secret") {
		t.Fatalf("a 0644 token file: %v", err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSecret(m, nil)
	if err != nil || got != "syt_secret" {
		t.Fatalf("got %q, %v", got, err)
	}
	m.TokenFile = "~/token"
	got, err = ReadSecret(m, env(map[string]string{"HOME": filepath.Dir(p)}))
	if err != nil || got != "syt_secret" {
		t.Fatalf("~/token: got %q, %v", got, err)
	}
}

// TestTokenReference: a token reference resolves through env: and file:
// here and through the daemon's backends otherwise; without them such a
// reference is refused (the configuration check takes its form only).
func TestTokenReference(t *testing.T) {
	ctx := t.Context()
	set := env(map[string]string{"MX_TOKEN": "syt_abc"})
	m := goodAccount()
	m.TokenEnv, m.Token = "", "env:MX_TOKEN"
	if got, err := resolveToken(ctx, m, set, nil); err != nil || got != "syt_abc" {
		t.Fatalf("env: reference: %q, %v", got, err)
	}
	m.Token = "secret://age/mx"
	if _, err := resolveToken(ctx, m, set, nil); !errors.Is(err, secret.ErrDaemonOnly) || !errors.Is(err, ErrSecret) {
		t.Fatalf("an age reference without the daemon's backends: %v", err)
	}
	var asked secret.Ref
	other := func(_ context.Context, r secret.Ref) ([]byte, error) { asked = r; return []byte("syt_from_age\n"), nil }
	if got, err := resolveToken(ctx, m, set, other); err != nil || got != "syt_from_age" || asked.Backend != "age" || asked.Path != "mx" {
		t.Fatalf("through the daemon's backends: %q, %v (asked %+v)", got, err, asked)
	}
	if errs := Check([]config.Matrix{m}, config.Origin{File: "c.yaml"}, set); len(errs) != 0 {
		t.Fatalf("the check of an age reference takes its form only: %v", errs)
	}
}
