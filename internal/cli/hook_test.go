package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/channel/webhook"
	"github.com/fluffy-agent/fluffy/internal/config"
)

// acceptSink takes every delivery.
type acceptSink struct{ refused []channel.Refusal }

func (s *acceptSink) Deliver(context.Context, channel.Inbound) (string, error) { return "s-1", nil }
func (s *acceptSink) Answer(context.Context, channel.Answer) error             { return nil }
func (s *acceptSink) Ready(string, bool, error)                                {}
func (s *acceptSink) Record(_ context.Context, r channel.Refusal) error {
	s.refused = append(s.refused, r)
	return nil
}

// TestHookSign signs a payload with 'fluffy hook sign' for a hook of each
// scheme and sends it, with the printed headers, to that hook: it is
// accepted.
func TestHookSign(t *testing.T) {
	dir := t.TempDir()
	cfgDir := filepath.Join(dir, "config", "fluffy")
	os.MkdirAll(cfgDir, 0o700)
	os.WriteFile(filepath.Join(cfgDir, "config.yaml"), []byte(`serve:
  webhooks:
    - name: gh
      secret: env:GH_SECRET
      signature: github
    - name: deploy
      secret: env:DEPLOY_SECRET
      signature: fluffy
`), 0o600)
	payload := filepath.Join(dir, "payload.json")
	os.WriteFile(payload, []byte(`{"action":"opened"}`), 0o600)
	environ := []string{"HOME=" + dir, "FLUFFY_HOME=" + filepath.Join(dir, "data"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "config"),
		"GH_SECRET=gh-secret-0123456789", "DEPLOY_SECRET=deploy-secret-0123456789"}
	lookup := func(k string) (string, bool) {
		for _, kv := range environ {
			if name, v, ok := strings.Cut(kv, "="); ok && name == k {
				return v, true
			}
		}
		return "", false
	}
	for _, tc := range []struct{ name, scheme, secret string }{{"gh", webhook.SchemeGitHub, "env:GH_SECRET"}, {"deploy", webhook.SchemeFluffy, "env:DEPLOY_SECRET"}} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			a := &App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Cwd: dir, Self: "/nonexistent/fluffy-core", Environ: environ}
			if code := Main(t.Context(), a, []string{"hook", "sign", tc.name, "--body", "payload.json", "--event", "ping"}); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			h, err := webhook.New(config.Webhook{Name: tc.name, Secret: tc.secret, Signature: tc.scheme},
				webhook.Options{StateDir: t.TempDir(), LookupEnv: lookup, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			srv := httptest.NewServer(h.Handler(&acceptSink{}))
			defer srv.Close()
			body, _ := os.ReadFile(payload)
			req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+h.Pattern(), bytes.NewReader(body))
			for line := range strings.Lines(out.String()) {
				k, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
				if !ok {
					t.Fatalf("not a header line: %q", line)
				}
				req.Header.Set(k, v)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("status %d %s for headers:\n%s", resp.StatusCode, b, out.String())
			}
		})
	}
	var errOut bytes.Buffer
	a := &App{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &errOut, Cwd: dir, Self: "/nonexistent/fluffy-core", Environ: environ}
	if code := Main(t.Context(), a, []string{"hook", "sign", "nope", "--body", "payload.json"}); code != ExitUsage {
		t.Errorf("unknown hook: exit %d, want %d (%s)", code, ExitUsage, errOut.String())
	}
}
