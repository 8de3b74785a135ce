package matrix

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/config"
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
		{"no secret", func(m *config.Matrix) { m.TokenEnv = "" }, "serve.matrix[0].token_env: one of token_env or token_file is required"},
		{"both secrets", func(m *config.Matrix) { m.TokenFile = "/x" }, "token_env and token_file are both set"},
		{"unset variable", func(m *config.Matrix) { m.TokenEnv = "NOPE" }, "environment variable NOPE is not set"},
		{"bad homeserver", func(m *config.Matrix) { m.Homeserver = "matrix.example.org" }, "serve.matrix[0].homeserver"},
		{"bad user", func(m *config.Matrix) { m.UserID = "bot" }, "serve.matrix[0].user_id"},
		{"no principals", func(m *config.Matrix) { m.Principals = nil }, "serve.matrix[0].principals: required"},
		{"bad principal", func(m *config.Matrix) { m.Principals = []string{"ana@example.org"} }, "principals[0]"},
		{"bot as principal", func(m *config.Matrix) { m.Principals = []string{"@bot:example.org"} }, "the bot's own account"},
		{"bad room", func(m *config.Matrix) { m.Rooms = []string{"ops"} }, "rooms[0]"},
		{"bad name", func(m *config.Matrix) { m.Name = "Bad Name" }, "serve.matrix[0].name"},
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
