package wiring

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/channel/webhook"
	"github.com/fluffy-agent/fluffy/internal/config"
)

// readySink records a channel's Ready and ends its Run then.
type readySink struct {
	channel.Sink
	cancel context.CancelFunc
	ready  bool
}

func (s *readySink) Ready(_ string, ready bool, _ error) {
	s.ready = ready
	s.cancel()
}

// TestCorruptNonceStoreFailsTheHookNotTheDaemon: a webhook whose nonce
// store is corrupt is built as a channel whose Run fails with
// webhook.ErrCorruptNonceStore (the daemon's supervision shows it failing
// and retries it) and whose path answers 503; once the file is removed,
// the next Run opens the hook and reports it connected.
func TestCorruptNonceStoreFailsTheHookNotTheDaemon(t *testing.T) {
	state := t.TempDir()
	dir := filepath.Join(state, "hooks", "deploy")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	nonces := filepath.Join(dir, "nonces")
	if err := os.WriteFile(nonces, []byte("not a record\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := &config.Loaded{Config: config.Config{Serve: config.Serve{Webhooks: []config.Webhook{{Name: "deploy", Secret: "env:S", Signature: "fluffy"}}}}}
	env := func(k string) (string, bool) { return "0123456789abcdef0123456789abcdef", k == "S" }
	chans, err := serveChannels(l, channelDeps{log: slog.New(slog.NewTextHandler(io.Discard, nil)), state: state, now: time.Now, env: env})
	if err != nil {
		t.Fatalf("serveChannels: %v, want the daemon to start with the hook failing", err)
	}
	t.Cleanup(func() { closeChannels(chans) })
	var hc channel.HTTPChannel
	for _, c := range chans {
		if c.Name() == "deploy" {
			hc, _ = c.(channel.HTTPChannel)
		}
	}
	if hc == nil || hc.Pattern() != "/hooks/deploy" {
		t.Fatalf("channels %v: want an HTTP channel deploy at /hooks/deploy", chans)
	}
	ctx, cancel := context.WithCancel(t.Context())
	sink := &readySink{cancel: cancel}
	if err := hc.Run(ctx, sink); !errors.Is(err, webhook.ErrCorruptNonceStore) {
		t.Fatalf("Run: %v, want webhook.ErrCorruptNonceStore", err)
	}
	rec := httptest.NewRecorder()
	hc.Handler(sink).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/hooks/deploy", strings.NewReader("{}")))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a delivery while the hook is down: %d, want 503", rec.Code)
	}
	if err := os.Remove(nonces); err != nil {
		t.Fatal(err)
	}
	if err := hc.Run(ctx, sink); err != nil || !sink.ready {
		t.Fatalf("Run after the repair: %v, ready %v; want the hook connected", err, sink.ready)
	}
}
