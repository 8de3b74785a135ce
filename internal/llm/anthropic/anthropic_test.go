package anthropic_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/anthropic"
	"github.com/fluffy-agent/fluffy/internal/llm/llmtest"
)

var backend = llmtest.Backend{
	New: func(t testing.TB, baseURL string) llm.Provider {
		p, err := anthropic.New(anthropic.Options{APIKey: "test-key", BaseURL: baseURL, HTTPClient: &http.Client{}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	},
	Model:       "claude-sonnet-4-5",
	Ext:         "sse",
	ContentType: "text/event-stream",
	ErrorBody: func(status int) string {
		typ := map[int]string{400: "invalid_request_error", 429: "rate_limit_error", 500: "api_error", 503: "overloaded_error"}[status]
		return fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":"test error %d"}}`, typ, status)
	},
	PathSuffix: "/v1/messages",
	AuthHeader: "X-Api-Key",
	AuthValue:  "test-key",
	Env:        []string{"ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_CUSTOM_HEADERS", "ANTHROPIC_PROFILE"},
}

func TestSuite(t *testing.T) { llmtest.Run(t, backend) }

func BenchmarkStream(b *testing.B) {
	body := llmtest.Repeat(
		`event: message_start
data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

`, `event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello, world. "}}

`, `event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":1000}}

event: message_stop
data: {"type":"message_stop"}

`, 1000)
	llmtest.Bench(b, backend, body)
}

// TestOverloadedInStream: Anthropic can answer 200 and then send an
// overloaded error event before any content; that is retried.
func TestOverloadedInStream(t *testing.T) {
	var bodies [][]byte
	for _, name := range []string{"overloaded.sse", "text.sse"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	n := 0
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(bodies[min(n, 1)])
		n++
	}))
	defer ts.Close()
	p, err := anthropic.New(anthropic.Options{APIKey: "k", BaseURL: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	var waits []time.Duration
	r := llm.Retry(p, llm.RetryOptions{Sleep: func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }})
	resp, err := llm.Collect(r.Stream(t.Context(), llmtest.Request("claude-sonnet-4-5")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || len(waits) != 1 || !strings.HasPrefix(resp.Message.Text(), "Hello") {
		t.Errorf("requests %d, waits %v, text %q", n, waits, resp.Message.Text())
	}
}
