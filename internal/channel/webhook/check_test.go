package webhook

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/secret"
)

func TestResolveSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	good := write("good", "file-secret-0123456789\n", 0o600)
	crlf := write("crlf", "file-secret-0123456789\r\n", 0o400)
	groupRead := write("group", "file-secret-0123456789", 0o640)
	worldRead := write("world", "file-secret-0123456789", 0o604)
	empty := write("empty", "\n", 0o600)
	big := write("big", strings.Repeat("k", maxSecretFile+1), 0o600)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	lookup := env("SET", "env-secret-0123456789", "EMPTY", "")
	tests := []struct {
		ref  string
		want string // the key, or a fragment of the error
	}{
		{"env:SET", "env-secret-0123456789"},
		{"env:UNSET", "UNSET is not set"},
		{"env:EMPTY", "EMPTY is empty"},
		{"file:" + good, "file-secret-0123456789"},
		{"file:" + crlf, "file-secret-0123456789"},
		{"file:" + groupRead, "mode 0640"},
		{"file:" + worldRead, "mode 0604"},
		{"file:" + empty, "is empty"},
		{"file:" + big, "longer than"},
		{"file:" + fifo, "not a regular file"},
		{"file:" + filepath.Join(dir, "missing"), "no such file"},
		{"vault:x", "env:VAR or file:PATH"},
		{"secret://env/SET", "env-secret-0123456789"},
		{"secret://file" + good, "file-secret-0123456789"},
		{"secret://age/hook", "only the daemon resolves age references"},
		{"hunter2-the-key-itself", "not shown"},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			got, err := ResolveSecret(tt.ref, lookup)
			if err != nil {
				if !errors.Is(err, ErrSecret) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("err %v, want ErrSecret with %q", err, tt.want)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("the error shows what may be a key: %v", err)
				}
				return
			}
			if string(got) != tt.want {
				t.Errorf("key %q, want %q", got, tt.want)
			}
		})
	}
}

// TestCheckLocated loads a real configuration file and checks that each
// problem names the file, the entry's line and the key.
func TestCheckLocated(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "hook.key")
	os.WriteFile(secret, []byte("file-secret-0123456789"), 0o644)
	user := filepath.Join(dir, "user.yaml")
	os.WriteFile(user, []byte(`serve:
  listen: 127.0.0.1:8080
  webhooks:
    - name: github
      secret: env:GH_SECRET
      signature: github
    - name: deploy
      secret: file:`+secret+`
      signature: fluffy
      window: 48h
    - name: github
      secret: env:MISSING
      signature: gitlab
      max_body: 1GiB
`), 0o600)
	l, err := config.Load(config.Options{Env: env("HOME", dir), UserFile: user})
	if err != nil {
		t.Fatal(err)
	}
	errs := Check(l.Config.Serve.Webhooks, l.Origins["serve.webhooks"], env("GH_SECRET", "env-secret-0123456789"))
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	want := []string{
		user + ":7:7: serve.webhooks[1].window: 2d: want 1s to 1d (0: the default, 5m0s)",
		user + ":7:7: serve.webhooks[1].secret: " + secret + " has mode 0644",
		user + ":11:7: serve.webhooks[2].signature: \"gitlab\": want github or fluffy",
		user + ":11:7: serve.webhooks[2].max_body: 1GiB: want at most 32MiB (0: the default, 1MiB)",
		user + ":11:7: serve.webhooks[2].name: \"github\" is also the name of serve.webhooks[0]",
		user + ":11:7: serve.webhooks[2].secret: environment variable MISSING is not set",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d:\n got  %s\n want %s...", i, got[i], want[i])
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	for _, cfg := range []config.Webhook{
		{Name: "Bad/Name", Secret: "env:S", Signature: SchemeGitHub},
		{Name: "gh", Secret: "env:S", Signature: "none"},
		{Name: "gh", Secret: "env:UNSET", Signature: SchemeGitHub},
		{Name: "gh", Signature: SchemeGitHub},
	} {
		if h, err := New(cfg, Options{StateDir: dir, LookupEnv: env("S", "env-secret-0123456789")}); err == nil {
			h.Close()
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	if _, err := New(config.Webhook{Name: "gh", Secret: "env:S", Signature: SchemeGitHub}, Options{LookupEnv: env("S", "x")}); err == nil {
		t.Error("New without a state directory succeeded")
	}
}

// TestSecretOfTheDaemonsBackends: a hook's key may be in the age store or
// a vault; the check takes its reference's form, the hook resolves it
// through Options.Resolve (the daemon's backends), and without a
// resolver it is refused.
func TestSecretOfTheDaemonsBackends(t *testing.T) {
	hook := config.Webhook{Name: "deploy", Secret: "secret://age/deploy-key", Signature: SchemeFluffy}
	if errs := Check([]config.Webhook{hook}, config.Origin{}, nil); len(errs) != 0 {
		t.Errorf("Check: %v", errs)
	}
	if _, err := New(hook, Options{StateDir: t.TempDir()}); !errors.Is(err, ErrSecret) {
		t.Errorf("New without a resolver: %v", err)
	}
	var asked secret.Ref
	h, err := New(hook, Options{StateDir: t.TempDir(), Resolve: func(_ context.Context, r secret.Ref) ([]byte, error) {
		asked = r
		return []byte("key-from-the-age-store"), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if asked != (secret.Ref{Backend: "age", Path: "deploy-key"}) || string(h.secret) != "key-from-the-age-store" {
		t.Errorf("resolved %+v to %q", asked, h.secret)
	}
}
