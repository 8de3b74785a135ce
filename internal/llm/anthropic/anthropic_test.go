package anthropic_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/anthropic"
	"github.com/fluffy-agent/fluffy/internal/llm/llmtest"
)

func TestSuite(t *testing.T) {
	llmtest.Run(t, llmtest.Backend{
		New: func(t *testing.T, baseURL string) llm.Provider {
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
	})
}
