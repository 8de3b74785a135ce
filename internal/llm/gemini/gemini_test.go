package gemini_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/gemini"
	"github.com/fluffy-agent/fluffy/internal/llm/llmtest"
)

var backend = llmtest.Backend{
	New: func(t testing.TB, baseURL string) llm.Provider {
		p, err := gemini.New(t.Context(), gemini.Options{APIKey: "test-key", BaseURL: baseURL, HTTPClient: &http.Client{}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	},
	Model:       "gemini-2.5-pro",
	Ext:         "sse",
	ContentType: "text/event-stream",
	ErrorBody: func(status int) string {
		st := map[int]string{400: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}[status]
		return fmt.Sprintf(`{"error":{"code":%d,"message":"test error","status":%q}}`, status, st)
	},
	PathSuffix: "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
	AuthHeader: "X-Goog-Api-Key",
	AuthValue:  "test-key",
	Env:        []string{"GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION"},
}

func TestSuite(t *testing.T) { llmtest.Run(t, backend) }

func BenchmarkStream(b *testing.B) {
	body := llmtest.Repeat("", `data: {"candidates":[{"content":{"parts":[{"text":"Hello, world. "}],"role":"model"},"index":0}],"modelVersion":"gemini-2.5-pro"}`+"\r\n\r\n",
		`data: {"candidates":[{"content":{"parts":[{"text":"."}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":1000,"totalTokenCount":1010},"modelVersion":"gemini-2.5-pro"}`+"\r\n\r\n", 1000)
	llmtest.Bench(b, backend, body)
}
