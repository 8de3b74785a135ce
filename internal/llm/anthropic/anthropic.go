// Package anthropic is the llm.Provider for Anthropic's Messages API, built
// on the official SDK (github.com/anthropics/anthropic-sdk-go).
//
// The client is built with option.WithoutEnvironmentDefaults, so the SDK
// reads none of ANTHROPIC_* itself: the key and base URL come only from
// Options. The SDK's own retries are off; retrying is llm.Retry's job,
// which knows when output has started. The system prompt and the tool
// definitions are marked for prompt caching (one breakpoint after the
// last tool, one after the system prompt).
package anthropic

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"iter"
	"net/http"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/fluffy-agent/fluffy/internal/llm"
)

// DefaultBaseURL is the API's address.
const DefaultBaseURL = "https://api.anthropic.com/"

// DefaultMaxTokens is used when a request sets none (the API requires one).
const DefaultMaxTokens = 8192

// Options configure the provider. APIKey is required.
type Options struct {
	APIKey string
	// BaseURL overrides DefaultBaseURL.
	BaseURL string
	// HTTPClient is the base client (nil: a default one).
	HTTPClient *http.Client
}

// Provider talks to the Messages API.
type Provider struct {
	msgs sdk.MessageService
}

var _ llm.Provider = (*Provider)(nil)

// New returns a provider. It makes no request.
func New(o Options) (*Provider, error) {
	if o.APIKey == "" {
		return nil, errors.New("anthropic: no API key")
	}
	base := o.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	client := sdk.NewClient(
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(base),
		option.WithAPIKey(o.APIKey),
		option.WithHTTPClient(llm.ObservingClient(o.HTTPClient)),
		option.WithMaxRetries(0),
	)
	return &Provider{msgs: client.Messages}, nil
}

// Stream implements llm.Provider.
func (p *Provider) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		ctx, _ := llm.WithExchange(ctx)
		params, err := Params(req)
		if err != nil {
			yield(llm.Event{}, &llm.Error{Provider: "anthropic", Err: err})
			return
		}
		stream := p.msgs.NewStreaming(ctx, params)
		defer stream.Close()
		d := decoder{}
		started := false
		for stream.Next() {
			evs, err := d.event(stream.Current())
			if err != nil {
				yield(llm.Event{}, llm.Classify(ctx, "anthropic", err, started))
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
			e := llm.Classify(ctx, "anthropic", err, started)
			if !started && strings.Contains(err.Error(), "overloaded_error") {
				e.Transient = true
			}
			yield(llm.Event{}, e)
			return
		}
		if !d.stopped {
			yield(llm.Event{}, llm.Classify(ctx, "anthropic", errors.New("stream ended before message_stop"), started))
		}
	}
}

// decoder turns SDK stream events into llm events.
type decoder struct {
	asm     llm.Assembler
	usage   llm.Usage
	stop    llm.StopReason
	raw     string
	stopped bool
	// tools marks content-block indexes that are tool_use blocks.
	tools map[int64]bool
}

func (d *decoder) event(ev sdk.MessageStreamEventUnion) ([]llm.Event, error) {
	switch ev.Type {
	case "message_start":
		u := ev.Message.Usage
		d.usage = llm.Usage{InputTokens: int(u.InputTokens), OutputTokens: int(u.OutputTokens),
			CacheReadTokens: int(u.CacheReadInputTokens), CacheWriteTokens: int(u.CacheCreationInputTokens)}
		return nil, nil
	case "content_block_start":
		if ev.ContentBlock.Type == "tool_use" {
			if d.tools == nil {
				d.tools = map[int64]bool{}
			}
			d.tools[ev.Index] = true
			return []llm.Event{d.asm.Start(int(ev.Index), ev.ContentBlock.ID, ev.ContentBlock.Name)}, nil
		}
		if ev.ContentBlock.Type == "text" && ev.ContentBlock.Text != "" {
			return []llm.Event{{Type: llm.EventText, Text: ev.ContentBlock.Text}}, nil
		}
		return nil, nil
	case "content_block_delta":
		switch ev.Delta.Type {
		case "text_delta":
			return []llm.Event{{Type: llm.EventText, Text: ev.Delta.Text}}, nil
		case "input_json_delta":
			if !d.tools[ev.Index] {
				return nil, errors.New("input_json_delta for a block that is not a tool_use")
			}
			return []llm.Event{d.asm.Delta(int(ev.Index), ev.Delta.PartialJSON)}, nil
		}
		return nil, nil // thinking, citations: not surfaced
	case "content_block_stop":
		if d.tools[ev.Index] {
			delete(d.tools, ev.Index)
			e, err := d.asm.End(int(ev.Index))
			if err != nil {
				return nil, err
			}
			return []llm.Event{e}, nil
		}
		return nil, nil
	case "message_delta":
		u := ev.Usage
		// message_delta usage is cumulative; input fields may be absent.
		if u.JSON.InputTokens.Valid() {
			d.usage.InputTokens = int(u.InputTokens)
		}
		if u.JSON.CacheReadInputTokens.Valid() {
			d.usage.CacheReadTokens = int(u.CacheReadInputTokens)
		}
		if u.JSON.CacheCreationInputTokens.Valid() {
			d.usage.CacheWriteTokens = int(u.CacheCreationInputTokens)
		}
		d.usage.OutputTokens = int(u.OutputTokens)
		d.raw = string(ev.Delta.StopReason)
		d.stop = mapStop(ev.Delta.StopReason)
		return nil, nil
	case "message_stop":
		if d.asm.Open() > 0 {
			return nil, errors.New("message_stop with a tool call still open")
		}
		d.stopped = true
		u := d.usage
		return []llm.Event{{Type: llm.EventUsage, Usage: &u}, {Type: llm.EventStop, Stop: d.stop, Text: d.raw}}, nil
	}
	return nil, nil // ping and future event types
}

func mapStop(r sdk.StopReason) llm.StopReason {
	switch r {
	case sdk.StopReasonEndTurn, sdk.StopReasonStopSequence:
		return llm.StopEnd
	case sdk.StopReasonToolUse:
		return llm.StopToolUse
	case sdk.StopReasonMaxTokens, sdk.StopReasonModelContextWindowExceeded:
		return llm.StopMaxTokens
	case sdk.StopReasonRefusal:
		return llm.StopRefusal
	}
	return llm.StopOther
}

// Params builds the SDK request for req (exported for tests and tools
// that show what would be sent).
func Params(req llm.Request) (sdk.MessageNewParams, error) {
	max := req.MaxTokens
	if max <= 0 {
		max = DefaultMaxTokens
	}
	p := sdk.MessageNewParams{Model: sdk.Model(req.Model), MaxTokens: int64(max)}
	if req.System != "" {
		p.System = []sdk.TextBlockParam{{Text: req.System, CacheControl: sdk.NewCacheControlEphemeralParam()}}
	}
	for i, t := range req.Tools {
		var schema map[string]any
		if len(t.Schema) > 0 {
			if err := json.Unmarshal(t.Schema, &schema); err != nil {
				return p, err
			}
		}
		tp := &sdk.ToolParam{Name: t.Name, InputSchema: sdk.ToolInputSchemaParam{ExtraFields: map[string]any{}}}
		if t.Description != "" {
			tp.Description = sdk.String(t.Description)
		}
		for k, v := range schema {
			switch k {
			case "type":
			case "properties":
				tp.InputSchema.Properties = v
			case "required":
				list, _ := v.([]any)
				for _, r := range list {
					if s, ok := r.(string); ok {
						tp.InputSchema.Required = append(tp.InputSchema.Required, s)
					}
				}
			default:
				tp.InputSchema.ExtraFields[k] = v
			}
		}
		if i == len(req.Tools)-1 {
			tp.CacheControl = sdk.NewCacheControlEphemeralParam()
		}
		p.Tools = append(p.Tools, sdk.ToolUnionParam{OfTool: tp})
	}
	for _, m := range req.Messages {
		var blocks []sdk.ContentBlockParamUnion
		for _, b := range m.Content {
			switch b.Type {
			case llm.BlockText:
				if b.Text != "" {
					blocks = append(blocks, sdk.NewTextBlock(b.Text))
				}
			case llm.BlockToolCall:
				args := b.Args
				if len(args) == 0 {
					args = json.RawMessage("{}")
				}
				blocks = append(blocks, sdk.NewToolUseBlock(b.ID, args, b.Name))
			case llm.BlockToolResult:
				blocks = append(blocks, sdk.NewToolResultBlock(b.ID, b.Text, b.IsError))
			case llm.BlockImage:
				blocks = append(blocks, sdk.NewImageBlockBase64(b.MediaType, base64.StdEncoding.EncodeToString(b.Data)))
			}
		}
		if m.Role == llm.RoleAssistant {
			p.Messages = append(p.Messages, sdk.NewAssistantMessage(blocks...))
		} else {
			p.Messages = append(p.Messages, sdk.NewUserMessage(blocks...))
		}
	}
	return p, nil
}
