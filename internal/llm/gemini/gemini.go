// Package gemini is the llm.Provider for Google's Gemini API, built on the
// official SDK (google.golang.org/genai).
//
// The SDK reads GOOGLE_API_KEY, GEMINI_API_KEY, GOOGLE_GEMINI_BASE_URL
// and the Vertex variables when the config leaves them unset; this
// package always sets the backend, the key and the base URL explicitly,
// which the SDK then uses instead. The SDK's automatic stream
// continuation is turned off, so that a broken stream is reported (and
// retried by llm.Retry only when no output was produced).
//
// Gemini sends each function call whole, often without an id: the
// assembler assigns "call_<n>". Thought signatures on function calls are
// kept on the tool call block and sent back, as the API requires.
package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strings"

	"google.golang.org/genai"

	"github.com/fluffy-agent/fluffy/internal/llm"
)

// DefaultBaseURL is the Gemini API's address.
const DefaultBaseURL = "https://generativelanguage.googleapis.com/"

// Options configure the provider. APIKey is required.
type Options struct {
	APIKey string
	// BaseURL overrides DefaultBaseURL.
	BaseURL string
	// HTTPClient is the base client (nil: a default one).
	HTTPClient *http.Client
}

// Provider talks to the Gemini API.
type Provider struct {
	client *genai.Client
}

var _ llm.Provider = (*Provider)(nil)

// New returns a provider. It makes no request.
func New(ctx context.Context, o Options) (*Provider, error) {
	if o.APIKey == "" {
		return nil, errors.New("gemini: no API key")
	}
	base := o.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	c, err := genai.NewClient(ctx, &genai.ClientConfig{
		APIKey:      o.APIKey,
		Backend:     genai.BackendGeminiAPI,
		HTTPClient:  llm.ObservingClient(o.HTTPClient),
		HTTPOptions: genai.HTTPOptions{BaseURL: base, APIVersion: "v1beta"},
	})
	if err != nil {
		return nil, fmt.Errorf("gemini: %w", err)
	}
	return &Provider{client: c}, nil
}

// Stream implements llm.Provider.
func (p *Provider) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		ctx, _ := llm.WithExchange(ctx)
		contents, cfg, err := Params(req)
		if err != nil {
			yield(llm.Event{}, &llm.Error{Provider: "gemini", Err: err})
			return
		}
		d := decoder{}
		started := false
		for resp, err := range p.client.Models.GenerateContentStream(ctx, req.Model, contents, cfg) {
			if err != nil {
				yield(llm.Event{}, classify(ctx, err, started))
				return
			}
			evs, err := d.response(resp)
			if err != nil {
				yield(llm.Event{}, llm.Classify(ctx, "gemini", err, started))
				return
			}
			for _, ev := range evs {
				started = true
				if !yield(ev, nil) {
					return
				}
			}
		}
		if d.finish == "" {
			yield(llm.Event{}, llm.Classify(ctx, "gemini", errors.New("stream ended without a finish reason"), started))
			return
		}
		evs := []llm.Event{}
		if d.usage != nil {
			evs = append(evs, llm.Event{Type: llm.EventUsage, Usage: d.usage})
		}
		stop := mapStop(d.finish)
		if stop == llm.StopEnd && d.n > 0 {
			stop = llm.StopToolUse // Gemini says STOP after function calls
		}
		evs = append(evs, llm.Event{Type: llm.EventStop, Stop: stop, Text: string(d.finish)})
		for _, ev := range evs {
			if !yield(ev, nil) {
				return
			}
		}
	}
}

func classify(ctx context.Context, err error, started bool) *llm.Error {
	e := llm.Classify(ctx, "gemini", err, started)
	var api genai.APIError
	if errors.As(err, &api) && e.Status == 0 && api.Code >= 400 {
		// An error object inside a 200 stream.
		e.Status = api.Code
		e.Transient = !started && llm.RetryableStatus(api.Code)
	}
	return e
}

type decoder struct {
	asm    llm.Assembler
	n      int
	finish genai.FinishReason
	usage  *llm.Usage
}

func (d *decoder) response(r *genai.GenerateContentResponse) ([]llm.Event, error) {
	var evs []llm.Event
	if u := r.UsageMetadata; u != nil {
		cached := int(u.CachedContentTokenCount)
		d.usage = &llm.Usage{InputTokens: int(u.PromptTokenCount) - cached + int(u.ToolUsePromptTokenCount),
			OutputTokens: int(u.CandidatesTokenCount) + int(u.ThoughtsTokenCount), CacheReadTokens: cached}
	}
	if r.PromptFeedback != nil && r.PromptFeedback.BlockReason != "" {
		d.finish = genai.FinishReasonSafety
	}
	if len(r.Candidates) == 0 {
		return nil, nil
	}
	c := r.Candidates[0]
	if c.Content != nil {
		for _, part := range c.Content.Parts {
			switch {
			case part.FunctionCall != nil:
				fc := part.FunctionCall
				args, err := json.Marshal(fc.Args)
				if err != nil {
					return nil, err
				}
				if fc.Args == nil {
					args = []byte("{}")
				}
				i := d.n
				d.n++
				evs = append(evs, d.asm.Start(i, fc.ID, fc.Name), d.asm.Delta(i, string(args)))
				if len(part.ThoughtSignature) > 0 {
					d.asm.SetSignature(i, part.ThoughtSignature)
				}
				end, err := d.asm.End(i)
				if err != nil {
					return nil, err
				}
				evs = append(evs, end)
			case part.Text != "" && !part.Thought:
				evs = append(evs, llm.Event{Type: llm.EventText, Text: part.Text})
			}
		}
	}
	if c.FinishReason != "" && c.FinishReason != genai.FinishReasonUnspecified {
		d.finish = c.FinishReason
	}
	return evs, nil
}

func mapStop(r genai.FinishReason) llm.StopReason {
	switch r {
	case genai.FinishReasonStop:
		return llm.StopEnd
	case genai.FinishReasonMaxTokens:
		return llm.StopMaxTokens
	case genai.FinishReasonSafety, genai.FinishReasonRecitation, genai.FinishReasonBlocklist,
		genai.FinishReasonProhibitedContent, genai.FinishReasonSPII:
		return llm.StopRefusal
	}
	return llm.StopOther
}

// Params builds the SDK request for req.
func Params(req llm.Request) ([]*genai.Content, *genai.GenerateContentConfig, error) {
	off := false
	cfg := &genai.GenerateContentConfig{AutomaticContinuation: &off}
	if req.MaxTokens > 0 {
		cfg.MaxOutputTokens = int32(req.MaxTokens)
	}
	if req.System != "" {
		cfg.SystemInstruction = genai.NewContentFromText(req.System, genai.RoleUser)
	}
	if len(req.Tools) > 0 {
		t := &genai.Tool{}
		for _, tool := range req.Tools {
			var schema any
			if len(tool.Schema) > 0 {
				if err := json.Unmarshal(tool.Schema, &schema); err != nil {
					return nil, nil, err
				}
			}
			t.FunctionDeclarations = append(t.FunctionDeclarations, &genai.FunctionDeclaration{
				Name: tool.Name, Description: tool.Description, ParametersJsonSchema: schema})
		}
		cfg.Tools = []*genai.Tool{t}
	}
	var contents []*genai.Content
	for _, m := range req.Messages {
		c := &genai.Content{Role: genai.RoleUser}
		if m.Role == llm.RoleAssistant {
			c.Role = genai.RoleModel
		}
		for _, b := range m.Content {
			switch b.Type {
			case llm.BlockText:
				if b.Text != "" {
					c.Parts = append(c.Parts, &genai.Part{Text: b.Text})
				}
			case llm.BlockToolCall:
				var args map[string]any
				if len(b.Args) > 0 {
					if err := json.Unmarshal(b.Args, &args); err != nil {
						return nil, nil, fmt.Errorf("tool call %s: %w", b.ID, err)
					}
				}
				c.Parts = append(c.Parts, &genai.Part{FunctionCall: &genai.FunctionCall{ID: wireID(b.ID), Name: b.Name, Args: args}, ThoughtSignature: b.Signature})
			case llm.BlockToolResult:
				key := "output"
				if b.IsError {
					key = "error"
				}
				c.Parts = append(c.Parts, &genai.Part{FunctionResponse: &genai.FunctionResponse{ID: wireID(b.ID), Name: b.Name, Response: map[string]any{key: b.Text}}})
			case llm.BlockImage:
				c.Parts = append(c.Parts, &genai.Part{InlineData: &genai.Blob{MIMEType: b.MediaType, Data: b.Data}})
			}
		}
		contents = append(contents, c)
	}
	return contents, cfg, nil
}

// wireID drops the ids the assembler made up ("call_<n>") for calls that
// came without one: the API matches those responses by name and order.
func wireID(id string) string {
	if rest, ok := strings.CutPrefix(id, "call_"); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
		return ""
	}
	return id
}
