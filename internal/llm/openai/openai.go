// Package openai is the llm.Provider for OpenAI's Chat Completions API and
// every server that speaks it (Ollama, vLLM, OpenRouter, LM Studio), built
// on the official SDK (github.com/openai/openai-go/v3).
//
// Chat Completions rather than Responses: it is the one API the
// OpenAI-compatible servers implement, so one adapter serves them all; its
// streamed tool calls carry an index that makes parallel calls and split
// arguments unambiguous; and fluffy keeps the conversation itself, so the
// Responses API's server-side state brings nothing.
//
// The SDK's client constructor reads OPENAI_* variables on its own; this
// package builds the chat service directly with explicit options instead,
// so only Options count. The SDK's retries are off (llm.Retry does that).
package openai

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"iter"
	"net/http"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/fluffy-agent/fluffy/internal/llm"
)

// DefaultBaseURL is OpenAI's API.
const DefaultBaseURL = "https://api.openai.com/v1/"

// Options configure the provider.
type Options struct {
	// Name is the provider name used in errors ("openai", "ollama", ...);
	// default "openai".
	Name string
	// APIKey is required unless NoKey is set (local servers).
	APIKey string
	NoKey  bool
	// BaseURL overrides DefaultBaseURL.
	BaseURL string
	// HTTPClient is the base client (nil: a default one).
	HTTPClient *http.Client
}

// Provider talks to a Chat Completions endpoint.
type Provider struct {
	name string
	chat sdk.ChatCompletionService
}

var _ llm.Provider = (*Provider)(nil)

// New returns a provider. It makes no request.
func New(o Options) (*Provider, error) {
	if o.Name == "" {
		o.Name = "openai"
	}
	key := o.APIKey
	if key == "" {
		if !o.NoKey {
			return nil, errors.New(o.Name + ": no API key")
		}
		key = "none"
	}
	base := o.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	chat := sdk.NewChatCompletionService(
		option.WithBaseURL(base),
		option.WithAPIKey(key),
		option.WithHTTPClient(llm.ObservingClient(o.HTTPClient)),
		option.WithMaxRetries(0),
	)
	return &Provider{name: o.Name, chat: chat}, nil
}

// Stream implements llm.Provider.
func (p *Provider) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		ctx, _ := llm.WithExchange(ctx)
		params, err := Params(req)
		if err != nil {
			yield(llm.Event{}, &llm.Error{Provider: p.name, Err: err})
			return
		}
		stream := p.chat.NewStreaming(ctx, params)
		defer stream.Close()
		d := decoder{}
		started := false
		for stream.Next() {
			evs, err := d.chunk(stream.Current())
			if err != nil {
				yield(llm.Event{}, llm.Classify(ctx, p.name, err, started))
				return
			}
			for _, ev := range evs {
				started = true
				if !yield(ev, nil) {
					return
				}
			}
		}
		if err := stream.Err(); err != nil {
			yield(llm.Event{}, llm.Classify(ctx, p.name, err, started))
			return
		}
		evs, err := d.end()
		if err != nil {
			yield(llm.Event{}, llm.Classify(ctx, p.name, err, started))
			return
		}
		for _, ev := range evs {
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// decoder turns chunks into llm events. Chat Completions has no per-call
// end marker: calls end when the finish reason arrives. Usage comes in a
// last chunk with no choices (stream_options.include_usage).
type decoder struct {
	asm    llm.Assembler
	finish string
	usage  *llm.Usage
}

func (d *decoder) chunk(c sdk.ChatCompletionChunk) ([]llm.Event, error) {
	var evs []llm.Event
	if c.JSON.Usage.Valid() && (c.Usage.PromptTokens > 0 || c.Usage.CompletionTokens > 0) {
		cached := int(c.Usage.PromptTokensDetails.CachedTokens)
		d.usage = &llm.Usage{InputTokens: int(c.Usage.PromptTokens) - cached, OutputTokens: int(c.Usage.CompletionTokens), CacheReadTokens: cached}
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // fluffy asks for one choice
		}
		if ch.Delta.Content != "" {
			evs = append(evs, llm.Event{Type: llm.EventText, Text: ch.Delta.Content})
		}
		for _, tc := range ch.Delta.ToolCalls {
			i := int(tc.Index)
			if !d.asm.Started(i) {
				evs = append(evs, d.asm.Start(i, tc.ID, tc.Function.Name))
			}
			if tc.Function.Arguments != "" {
				evs = append(evs, d.asm.Delta(i, tc.Function.Arguments))
			}
		}
		if ch.FinishReason != "" {
			d.finish = ch.FinishReason
			ends, err := d.asm.EndAll()
			if err != nil {
				return nil, err
			}
			evs = append(evs, ends...)
		}
	}
	return evs, nil
}

func (d *decoder) end() ([]llm.Event, error) {
	if d.finish == "" {
		return nil, errors.New("stream ended without a finish reason")
	}
	var evs []llm.Event
	if d.usage != nil {
		evs = append(evs, llm.Event{Type: llm.EventUsage, Usage: d.usage})
	}
	return append(evs, llm.Event{Type: llm.EventStop, Stop: mapStop(d.finish), Text: d.finish}), nil
}

func mapStop(r string) llm.StopReason {
	switch r {
	case "stop":
		return llm.StopEnd
	case "tool_calls", "function_call":
		return llm.StopToolUse
	case "length":
		return llm.StopMaxTokens
	case "content_filter":
		return llm.StopRefusal
	}
	return llm.StopOther
}

// Params builds the SDK request for req.
func Params(req llm.Request) (sdk.ChatCompletionNewParams, error) {
	p := sdk.ChatCompletionNewParams{
		Model:         shared.ChatModel(req.Model),
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)},
	}
	if req.MaxTokens > 0 {
		p.MaxCompletionTokens = sdk.Int(int64(req.MaxTokens))
	}
	if req.System != "" {
		p.Messages = append(p.Messages, sdk.SystemMessage(req.System))
	}
	for _, t := range req.Tools {
		var schema map[string]any
		if len(t.Schema) > 0 {
			if err := json.Unmarshal(t.Schema, &schema); err != nil {
				return p, err
			}
		}
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: schema}
		if t.Description != "" {
			fd.Description = sdk.String(t.Description)
		}
		p.Tools = append(p.Tools, sdk.ChatCompletionFunctionTool(fd))
	}
	for _, m := range req.Messages {
		if m.Role == llm.RoleAssistant {
			a := sdk.ChatCompletionAssistantMessageParam{}
			if t := m.Text(); t != "" {
				a.Content.OfString = sdk.String(t)
			}
			for _, c := range m.ToolCalls() {
				args := string(c.Args)
				if args == "" {
					args = "{}"
				}
				a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{ID: c.ID,
						Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: args}}})
			}
			p.Messages = append(p.Messages, sdk.ChatCompletionMessageParamUnion{OfAssistant: &a})
			continue
		}
		// Tool results become tool messages, which must come right after
		// the assistant message; other blocks form one user message.
		var parts []sdk.ChatCompletionContentPartUnionParam
		for _, b := range m.Content {
			switch b.Type {
			case llm.BlockToolResult:
				content := b.Text
				if b.IsError {
					content = "error: " + content
				}
				p.Messages = append(p.Messages, sdk.ToolMessage(content, b.ID))
			case llm.BlockText:
				parts = append(parts, sdk.TextContentPart(b.Text))
			case llm.BlockImage:
				parts = append(parts, sdk.ImageContentPart(sdk.ChatCompletionContentPartImageImageURLParam{
					URL: "data:" + b.MediaType + ";base64," + base64.StdEncoding.EncodeToString(b.Data)}))
			}
		}
		switch {
		case len(parts) == 1 && parts[0].OfText != nil:
			p.Messages = append(p.Messages, sdk.UserMessage(parts[0].OfText.Text))
		case len(parts) > 0:
			p.Messages = append(p.Messages, sdk.UserMessage(parts))
		}
	}
	return p, nil
}
