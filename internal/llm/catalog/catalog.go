// Package catalog knows fluffy's model providers: their names, the
// environment variables that hold their keys and addresses, and how to
// open one from a "provider/name" model string. It is the only package
// that imports every backend; the agent sees only llm.Provider.
//
// Keys and base URLs are read here, from the environment the caller
// passes, and handed to the backends explicitly: no SDK reads the process
// environment on its own.
package catalog

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/anthropic"
	"github.com/fluffy-agent/fluffy/internal/llm/gemini"
	"github.com/fluffy-agent/fluffy/internal/llm/openai"
	"github.com/fluffy-agent/fluffy/internal/llm/replay"
)

// Info describes a provider.
type Info struct {
	Name string
	// KeyEnv lists the variables holding the key, first found wins.
	KeyEnv []string
	// KeyOptional is set for servers that need no key (local ones).
	KeyOptional bool
	// NoKey is set for providers that never use one.
	NoKey bool
	// BaseURLEnv is the variable that overrides the address, if any.
	BaseURLEnv string
	// BaseURL is the default address ("" when one must be configured).
	BaseURL string
	About   string
}

// Providers lists every provider, in display order.
func Providers() []Info {
	return []Info{
		{Name: "anthropic", KeyEnv: []string{"ANTHROPIC_API_KEY"}, BaseURLEnv: "ANTHROPIC_BASE_URL", BaseURL: anthropic.DefaultBaseURL, About: "Anthropic Messages API"},
		{Name: "openai", KeyEnv: []string{"OPENAI_API_KEY"}, BaseURLEnv: "OPENAI_BASE_URL", BaseURL: openai.DefaultBaseURL, About: "OpenAI Chat Completions"},
		{Name: "gemini", KeyEnv: []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"}, BaseURLEnv: "GOOGLE_GEMINI_BASE_URL", BaseURL: gemini.DefaultBaseURL, About: "Google Gemini API"},
		{Name: "ollama", KeyOptional: true, KeyEnv: []string{"OLLAMA_API_KEY"}, BaseURLEnv: "OLLAMA_HOST", BaseURL: "http://127.0.0.1:11434/v1/", About: "Ollama (OpenAI-compatible)"},
		{Name: "openrouter", KeyEnv: []string{"OPENROUTER_API_KEY"}, BaseURLEnv: "OPENROUTER_BASE_URL", BaseURL: "https://openrouter.ai/api/v1/", About: "OpenRouter (OpenAI-compatible)"},
		{Name: "openai-compat", KeyOptional: true, KeyEnv: []string{"OPENAI_COMPAT_API_KEY"}, BaseURLEnv: "OPENAI_COMPAT_BASE_URL", About: "any OpenAI-compatible server (vLLM, LM Studio...); set its base URL"},
		{Name: "replay", NoKey: true, About: "scripted conversation from a JSONL file (replay/demo, replay/./script.jsonl)"},
	}
}

// Lookup returns the provider called name.
func Lookup(name string) (Info, bool) {
	for _, p := range Providers() {
		if p.Name == name {
			return p, true
		}
	}
	return Info{}, false
}

// ErrModel is a malformed or unknown model string.
var ErrModel = errors.New("invalid model")

// Split parses "provider/name". The name may itself contain slashes
// (openrouter/anthropic/claude-sonnet-4-5, replay/./demo.jsonl).
func Split(model string) (provider, name string, err error) {
	provider, name, ok := strings.Cut(model, "/")
	if !ok || provider == "" || name == "" {
		return "", "", fmt.Errorf("%w %q: want provider/name, e.g. anthropic/claude-sonnet-4-5", ErrModel, model)
	}
	if _, known := Lookup(provider); !known {
		var names []string
		for _, p := range Providers() {
			names = append(names, p.Name)
		}
		return "", "", fmt.Errorf("%w %q: unknown provider %q (known: %s)", ErrModel, model, provider, strings.Join(names, ", "))
	}
	return provider, name, nil
}

// Options say where keys and addresses come from.
type Options struct {
	// Env looks a variable up (os.LookupEnv, or the App's environment).
	Env func(string) (string, bool)
	// BaseURLs overrides addresses by provider name (configuration).
	BaseURLs map[string]string
	// HTTPClient is the base HTTP client (nil: a default one).
	HTTPClient *http.Client
	// Retry bounds the retries wrapped around network providers.
	Retry llm.RetryOptions
}

// Key returns the provider's key from the environment and the variable
// it came from.
func (i Info) Key(env func(string) (string, bool)) (value, from string) {
	for _, k := range i.KeyEnv {
		if v, ok := env(k); ok && v != "" {
			return v, k
		}
	}
	return "", ""
}

// Address returns the base URL to use: configuration, then the
// environment, then the default.
func (i Info) Address(o Options) string {
	if u := o.BaseURLs[i.Name]; u != "" {
		return u
	}
	if i.BaseURLEnv != "" && o.Env != nil {
		if v, ok := o.Env(i.BaseURLEnv); ok && v != "" {
			if i.Name == "ollama" {
				return ollamaURL(v)
			}
			return v
		}
	}
	return i.BaseURL
}

// ollamaURL turns OLLAMA_HOST (host, host:port or a URL) into the
// OpenAI-compatible endpoint.
func ollamaURL(host string) string {
	if !strings.Contains(host, "://") {
		host = "http://" + host
	}
	host = strings.TrimSuffix(host, "/")
	if !strings.HasSuffix(host, "/v1") {
		host += "/v1"
	}
	return host + "/"
}

// Open returns the provider for model and the model's name within it.
// Network providers come wrapped in llm.Retry.
func Open(ctx context.Context, model string, o Options) (llm.Provider, string, error) {
	pname, name, err := Split(model)
	if err != nil {
		return nil, "", err
	}
	if o.Env == nil {
		o.Env = func(string) (string, bool) { return "", false }
	}
	info, _ := Lookup(pname)
	key, _ := info.Key(o.Env)
	if key == "" && !info.KeyOptional && !info.NoKey {
		return nil, "", fmt.Errorf("%s: no API key: set %s", pname, strings.Join(info.KeyEnv, " or "))
	}
	base := info.Address(o)
	var p llm.Provider
	switch pname {
	case "replay":
		s, err := replay.Load(name)
		if err != nil {
			return nil, "", err
		}
		return replay.New(s), name, nil
	case "anthropic":
		p, err = anthropic.New(anthropic.Options{APIKey: key, BaseURL: base, HTTPClient: o.HTTPClient})
	case "gemini":
		p, err = gemini.New(ctx, gemini.Options{APIKey: key, BaseURL: base, HTTPClient: o.HTTPClient})
	default: // openai and the compatible servers
		if base == "" {
			return nil, "", fmt.Errorf("%s: no base URL: set %s or llm.base_urls.%s", pname, info.BaseURLEnv, pname)
		}
		p, err = openai.New(openai.Options{Name: pname, APIKey: key, NoKey: info.KeyOptional, BaseURL: base, HTTPClient: o.HTTPClient})
	}
	if err != nil {
		return nil, "", err
	}
	return llm.Retry(p, o.Retry), name, nil
}
