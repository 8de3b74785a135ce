// Package embed owns the memory index's provider embedders: OpenAI's
// embeddings API through its official SDK (which also serves Ollama,
// through Ollama's OpenAI-compatible endpoint) and Gemini's through
// google.golang.org/genai. Each is a memory.Embedder: texts go to the
// provider in batches, and the vectors come back in the texts' order.
// Caching by content hash and re-embedding on a model change are the
// index's (internal/memory): a vector is stored under the Model name
// these embedders give, "openai:<model>", "ollama:<model>",
// "gemini:<model>".
package embed

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/genai"

	"github.com/fluffy-agent/fluffy/internal/memory"
)

// The providers.
const (
	OpenAI = "openai"
	Ollama = "ollama"
	Gemini = "gemini"
)

// Default models, by provider.
var defaultModels = map[string]string{
	OpenAI: "text-embedding-3-small",
	Ollama: "nomic-embed-text",
	Gemini: "gemini-embedding-001",
}

// Default addresses, by provider.
var defaultURLs = map[string]string{
	OpenAI: "https://api.openai.com/v1/",
	Ollama: "http://127.0.0.1:11434/v1/",
	Gemini: "https://generativelanguage.googleapis.com/",
}

// batch is how many texts one request carries: Gemini's batch endpoint
// takes at most 100; OpenAI's takes more, but a smaller request fails
// (and is retried) alone.
const batch = 64

// timeout bounds one request: a search waits for its query's vector, and
// a provider that does not answer must leave it to full text.
const timeout = 30 * time.Second

// ErrNoKey is New's error for a provider that needs a key and has none.
var ErrNoKey = errors.New("embed: no API key")

// ErrProvider is New's error for a provider it does not know.
var ErrProvider = errors.New("embed: unknown provider (want openai, gemini or ollama)")

// Options configure a provider embedder. Provider is required.
type Options struct {
	Provider string
	// Model is the provider's embedding model; "" takes the default
	// (DefaultModel).
	Model string
	// BaseURL overrides the provider's address.
	BaseURL string
	// APIKey is required for OpenAI and Gemini.
	APIKey string
	// HTTPClient is the base client (nil: a default one).
	HTTPClient *http.Client
}

// DefaultModel is the model a provider's embedder uses when none is
// configured.
func DefaultModel(provider string) string { return defaultModels[provider] }

// New returns the embedder o describes.
func New(ctx context.Context, o Options) (memory.Embedder, error) {
	if _, ok := defaultModels[o.Provider]; !ok {
		return nil, fmt.Errorf("%w: %q", ErrProvider, o.Provider)
	}
	if o.Model == "" {
		o.Model = defaultModels[o.Provider]
	}
	if o.BaseURL == "" {
		o.BaseURL = defaultURLs[o.Provider]
	}
	if o.APIKey == "" && o.Provider != Ollama {
		return nil, fmt.Errorf("%w for %s", ErrNoKey, o.Provider)
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	if o.Provider == Gemini {
		c, err := genai.NewClient(ctx, &genai.ClientConfig{APIKey: o.APIKey, Backend: genai.BackendGeminiAPI, HTTPClient: hc,
			HTTPOptions: genai.HTTPOptions{BaseURL: o.BaseURL, APIVersion: "v1beta", Timeout: new(timeout)}})
		if err != nil {
			return nil, fmt.Errorf("embed: gemini: %w", err)
		}
		return &gemini{c: c, model: o.Model}, nil
	}
	key := o.APIKey
	if key == "" {
		key = "ollama" // the SDK wants one; Ollama ignores it
	}
	base := o.BaseURL
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	c := openai.NewClient(option.WithBaseURL(base), option.WithAPIKey(key), option.WithHTTPClient(hc), option.WithMaxRetries(2), option.WithRequestTimeout(timeout))
	return &openaiEmbedder{c: c, provider: o.Provider, model: o.Model}, nil
}

// batches calls f on texts in slices of at most batch, and joins what it
// returns.
func batches(ctx context.Context, texts []string, f func(context.Context, []string) ([][]float32, error)) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for i := 0; i < len(texts); i += batch {
		part := texts[i:min(i+batch, len(texts))]
		vs, err := f(ctx, part)
		if err != nil {
			return nil, err
		}
		if len(vs) != len(part) {
			return nil, fmt.Errorf("embed: %d vectors for %d texts", len(vs), len(part))
		}
		out = append(out, vs...)
	}
	return out, nil
}

// openaiEmbedder is OpenAI's embeddings API, or Ollama's OpenAI-compatible
// one.
type openaiEmbedder struct {
	c               openai.Client
	provider, model string
}

func (e *openaiEmbedder) Model() string { return e.provider + ":" + e.model }

func (e *openaiEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return batches(ctx, texts, func(ctx context.Context, part []string) ([][]float32, error) {
		res, err := e.c.Embeddings.New(ctx, openai.EmbeddingNewParams{
			Input:          openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: part},
			Model:          openai.EmbeddingModel(e.model),
			EncodingFormat: openai.EmbeddingNewParamsEncodingFormatFloat,
		})
		if err != nil {
			return nil, fmt.Errorf("embed: %s: %w", e.provider, err)
		}
		out := make([][]float32, len(part))
		for _, d := range res.Data {
			if d.Index < 0 || int(d.Index) >= len(part) || out[d.Index] != nil {
				return nil, fmt.Errorf("embed: %s: answer has a bad index %d", e.provider, d.Index)
			}
			v := make([]float32, len(d.Embedding))
			for i, x := range d.Embedding {
				v[i] = float32(x)
			}
			out[d.Index] = v
		}
		for i, v := range out {
			if v == nil {
				return nil, fmt.Errorf("embed: %s: no vector for text %d", e.provider, i)
			}
		}
		return out, nil
	})
}

// gemini is the Gemini API's batch embedding endpoint.
type gemini struct {
	c     *genai.Client
	model string
}

func (e *gemini) Model() string { return Gemini + ":" + e.model }

func (e *gemini) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return batches(ctx, texts, func(ctx context.Context, part []string) ([][]float32, error) {
		contents := make([]*genai.Content, len(part))
		for i, t := range part {
			contents[i] = genai.NewContentFromText(t, genai.RoleUser)
		}
		res, err := e.c.Models.EmbedContent(ctx, e.model, contents, nil)
		if err != nil {
			return nil, fmt.Errorf("embed: gemini: %w", err)
		}
		out := make([][]float32, len(res.Embeddings))
		for i, em := range res.Embeddings {
			if em == nil {
				return nil, fmt.Errorf("embed: gemini: no vector for text %d", i)
			}
			out[i] = em.Values
		}
		return out, nil
	})
}
