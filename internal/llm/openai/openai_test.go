package openai_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/llmtest"
	"github.com/fluffy-agent/fluffy/internal/llm/openai"
)

var backend = llmtest.Backend{
	New: func(t testing.TB, baseURL string) llm.Provider {
		p, err := openai.New(openai.Options{APIKey: "test-key", BaseURL: baseURL + "/v1", HTTPClient: &http.Client{}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	},
	Model:       "gpt-5",
	Ext:         "sse",
	ContentType: "text/event-stream",
	ErrorBody: func(status int) string {
		return fmt.Sprintf(`{"error":{"message":"test error %d","type":"invalid_request_error","param":null,"code":null}}`, status)
	},
	PathSuffix: "/v1/chat/completions",
	AuthHeader: "Authorization",
	AuthValue:  "Bearer test-key",
	Env:        []string{"OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "OPENAI_CUSTOM_HEADERS"},
}

func TestSuite(t *testing.T) { llmtest.Run(t, backend) }

func BenchmarkStream(b *testing.B) {
	chunk := func(delta string) string {
		return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1763776000,"model":"gpt-5","choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":null}]}` + "\n\n"
	}
	body := llmtest.Repeat(chunk(`{"role":"assistant","content":""}`), chunk(`{"content":"Hello, world. "}`),
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1763776000,"model":"gpt-5","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`+"\n\n"+
			`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1763776000,"model":"gpt-5","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":1000,"total_tokens":1010}}`+"\n\ndata: [DONE]\n\n", 1000)
	llmtest.Bench(b, backend, body)
}

func TestNoKey(t *testing.T) {
	if _, err := openai.New(openai.Options{}); err == nil {
		t.Error("New without a key succeeded")
	}
	if _, err := openai.New(openai.Options{Name: "ollama", NoKey: true, BaseURL: "http://127.0.0.1:11434/v1"}); err != nil {
		t.Errorf("a keyless local server was refused: %v", err)
	}
}

// TestCompatibleServer plays what a local OpenAI-compatible server sends:
// whole arguments, no tool call ids, no usage chunk, no key.
func TestCompatibleServer(t *testing.T) {
	body, err := os.ReadFile("testdata/compat_noid.sse")
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(body)
	}))
	defer ts.Close()
	p, err := openai.New(openai.Options{Name: "ollama", NoKey: true, BaseURL: ts.URL + "/v1/"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := llm.Collect(p.Stream(t.Context(), llmtest.Request("qwen3")), nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.Message.ToolCalls()
	if len(calls) != 2 || calls[0].ID != "call_1" || calls[1].ID != "call_2" || string(calls[1].Args) != `{"path":"go.sum"}` {
		t.Errorf("calls = %+v", calls)
	}
	if resp.Stop != llm.StopToolUse || resp.Usage.Total() != 0 {
		t.Errorf("stop %q, usage %+v", resp.Stop, resp.Usage)
	}
}
