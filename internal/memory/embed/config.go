package embed

import (
	"context"
	"fmt"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/llm/catalog"
	"github.com/fluffy-agent/fluffy/internal/memory"
)

// Setting is the embedder memory.* configures, before it is made.
type Setting struct {
	// Provider is "local" or a provider's name.
	Provider string
	// Model is the provider's model (its default when not configured);
	// "" for local.
	Model string
	// BaseURL is the address texts are sent to; "" for local.
	BaseURL string
	// KeyFrom names the variable the key came from; "" for none.
	KeyFrom string
	key     string
}

// Local reports whether nothing leaves the machine.
func (s Setting) Local() bool { return s.Provider == "" || s.Provider == "local" }

// Resolve reads the setting from the configuration: the key of the
// provider's models (docs/models.md: OPENAI_API_KEY, GEMINI_API_KEY or
// GOOGLE_API_KEY, OLLAMA_API_KEY) from env, the address from
// memory.base_url, then llm.base_urls and the provider's variable
// (OLLAMA_HOST, ...), then its default.
func Resolve(c config.Config, env func(string) (string, bool)) Setting {
	s := Setting{Provider: c.Memory.Embeddings}
	if s.Local() {
		return s
	}
	s.Model = c.Memory.Model
	if s.Model == "" {
		s.Model = DefaultModel(s.Provider)
	}
	info, ok := catalog.Lookup(s.Provider)
	if !ok {
		return s
	}
	s.key, s.KeyFrom = info.Key(env)
	s.BaseURL = c.Memory.BaseURL
	if s.BaseURL == "" {
		s.BaseURL = info.Address(catalog.Options{Env: env, BaseURLs: c.LLM.BaseURLs})
	}
	return s
}

// Make returns the embedder: a new local model (each holder learns its
// own), or the provider's.
func (s Setting) Make(ctx context.Context) (memory.Embedder, error) {
	if s.Local() {
		return &memory.Local{}, nil
	}
	e, err := New(ctx, Options{Provider: s.Provider, Model: s.Model, BaseURL: s.BaseURL, APIKey: s.key})
	if err != nil {
		return nil, fmt.Errorf("memory.embeddings %s: %w", s.Provider, err)
	}
	return e, nil
}
