package catalog_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/catalog"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct{ in, p, n, err string }{
		{"anthropic/claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5", ""},
		{"openrouter/anthropic/claude-sonnet-4-5", "openrouter", "anthropic/claude-sonnet-4-5", ""},
		{"replay/./demo.jsonl", "replay", "./demo.jsonl", ""},
		{"claude", "", "", "want provider/name"},
		{"anthropic/", "", "", "want provider/name"},
		{"acme/x", "", "", `unknown provider "acme"`},
	} {
		p, n, err := catalog.Split(tc.in)
		if tc.err != "" {
			if !errors.Is(err, catalog.ErrModel) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Split(%q) err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || p != tc.p || n != tc.n {
			t.Errorf("Split(%q) = %q, %q, %v", tc.in, p, n, err)
		}
	}
}

func TestAddress(t *testing.T) {
	ollama, _ := catalog.Lookup("ollama")
	for _, tc := range []struct {
		host, want string
	}{
		{"", "http://127.0.0.1:11434/v1/"},
		{"10.1.2.3:11434", "http://10.1.2.3:11434/v1/"},
		{"https://ollama.example/", "https://ollama.example/v1/"},
		{"http://h:1/v1", "http://h:1/v1/"},
	} {
		e := map[string]string{}
		if tc.host != "" {
			e["OLLAMA_HOST"] = tc.host
		}
		if got := ollama.Address(catalog.Options{Env: env(e)}); got != tc.want {
			t.Errorf("OLLAMA_HOST=%q: %q, want %q", tc.host, got, tc.want)
		}
	}
	openai, _ := catalog.Lookup("openai")
	o := catalog.Options{Env: env(map[string]string{"OPENAI_BASE_URL": "http://from-env/"}), BaseURLs: map[string]string{"openai": "http://from-config/"}}
	if got := openai.Address(o); got != "http://from-config/" {
		t.Errorf("configuration should win over the environment, got %q", got)
	}
}

func TestOpenNeedsKey(t *testing.T) {
	for _, model := range []string{"anthropic/x", "openai/x", "gemini/x", "openrouter/x"} {
		if _, _, err := catalog.Open(t.Context(), model, catalog.Options{Env: env(nil)}); err == nil || !strings.Contains(err.Error(), "no API key") {
			t.Errorf("Open(%s) without key: %v", model, err)
		}
	}
	if _, _, err := catalog.Open(t.Context(), "openai-compat/x", catalog.Options{Env: env(nil)}); err == nil || !strings.Contains(err.Error(), "no base URL") {
		t.Errorf("openai-compat without a base URL: %v", err)
	}
	p, name, err := catalog.Open(t.Context(), "replay/demo", catalog.Options{})
	if err != nil || p == nil || name != "demo" {
		t.Errorf("replay/demo: %v", err)
	}
}

// TestOpenTalksToConfiguredURL opens providers from model strings and
// environment only, and checks the request reaches the configured
// address with the key from the environment.
func TestOpenTalksToConfiguredURL(t *testing.T) {
	body, err := os.ReadFile("../anthropic/testdata/text.sse")
	if err != nil {
		t.Fatal(err)
	}
	var gotKey string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotKey = r.Header.Get("X-Api-Key")
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(body)
	}))
	defer ts.Close()
	p, name, err := catalog.Open(t.Context(), "anthropic/claude-sonnet-4-5", catalog.Options{
		Env: env(map[string]string{"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": ts.URL}),
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := llm.Collect(p.Stream(t.Context(), llm.Request{Model: name, Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{llm.Text("hi")}}}}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if gotKey != "sk-ant-test" || !strings.HasPrefix(resp.Message.Text(), "Hello") {
		t.Errorf("key %q, text %q", gotKey, resp.Message.Text())
	}
}
