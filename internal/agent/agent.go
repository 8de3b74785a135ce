// Package agent owns fluffy's agent loop: context → model → tool calls →
// results, until the model stops or a limit is reached.
//
// The loop talks to a model through llm.Provider and to tools through
// [Tools], a small interface declared here and implemented by the tool
// router (which applies every gate, sandbox and audit step; the loop
// never runs anything itself). It keeps the conversation in a [Session]
// that is always consistent — every tool call has its result — so a run
// stopped by a limit, an error or Ctrl-C can be resumed by calling Run
// again. It keeps each request within a context budget: older turns are
// summarized (or noted) and dropped, large tool results are truncated
// with a note, and the system prompt and the task are never dropped.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// Tools is how the loop reaches the tool router.
//
// Definitions lists the tools the model may call. Call runs one call
// through the router and returns what the model should see: a refused,
// invalid or failed call is a Result with IsError set and a reason the
// model can act on, not an error. An error means the runtime could not
// process the call at all (for example the audit log cannot be written);
// the loop then stops and fails closed. Call must honour ctx.
type Tools interface {
	Definitions() []llm.Tool
	Call(ctx context.Context, call llm.ToolCall) (Result, error)
}

// Result is a tool call's outcome as the model will see it.
type Result struct {
	Content string
	IsError bool
	// Decision is the router's gate summary ("allow: rule r12"), for
	// events and the audit trail; the model does not see it.
	Decision string
}

// Limits bound one Run. Zero values mean no limit, except as noted.
type Limits struct {
	MaxTurns  int           // model calls
	MaxTokens int           // input + output tokens, all calls
	MaxCost   float64       // US dollars
	MaxTime   time.Duration // wall time
	// ContextTokens is the budget of one request (default 150,000).
	ContextTokens int
	// ToolResultBytes truncates each tool result (default 32 KiB).
	ToolResultBytes int
}

// Handed is what a session gave its sub-agents out of its budget.
type Handed struct {
	Turns  int
	Tokens int
	Cost   float64
}

// Options configure an Agent. Provider, Model and Tools are required.
type Options struct {
	Provider llm.Provider
	Model    string
	// ProviderName names the provider on model spans
	// (gen_ai.provider.name: "anthropic", "openai", "replay"...).
	ProviderName string
	Tools        Tools
	System       string
	Limits       Limits
	// Price prices usage for MaxCost and events.
	Price llm.Price
	// MaxResponseTokens bounds each response (0: the provider's default).
	MaxResponseTokens int
	// Summarizer summarizes what falls out of the context window; nil
	// uses Provider. Set NoSummary to only note the omission.
	Summarizer llm.Provider
	NoSummary  bool
	// Handed, optional, returns what the session has handed on to its
	// sub-agents (their budgets, docs/subagents.md), asked before every
	// model call: it counts against Limits as the session's own use
	// does, so a parent never spends what its children were given.
	Handed func() Handed
	// OnEvent receives events synchronously; it must not block long.
	OnEvent func(Event)
	// Tracer traces each model call (nil: none).
	Tracer *telemetry.Tracer
	Logger *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Agent runs the loop. It holds no per-session state and may serve
// several sessions one at a time each.
type Agent struct {
	o Options
}

// New checks o and returns an Agent.
func New(o Options) (*Agent, error) {
	if o.Provider == nil || o.Tools == nil || o.Model == "" {
		return nil, errors.New("agent: Provider, Model and Tools are required")
	}
	if o.Limits.ContextTokens <= 0 {
		o.Limits.ContextTokens = 150000
	}
	if o.Limits.ToolResultBytes <= 0 {
		o.Limits.ToolResultBytes = 32 << 10
	}
	if o.Summarizer == nil {
		o.Summarizer = o.Provider
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Agent{o: o}, nil
}

// Session is one conversation. Messages[0] is the task. The zero value
// is not usable: start one with NewSession.
type Session struct {
	Messages []llm.Message `json:"messages"`
	Usage    llm.Usage     `json:"usage"`
	Cost     float64       `json:"cost"`
	Turns    int           `json:"turns"`
	// Summary covers Messages[1:Summarized] once the window has moved.
	Summary    string `json:"summary,omitempty"`
	Summarized int    `json:"summarized,omitempty"`
	// ratio calibrates the estimator with the provider's counts.
	ratio float64
}

// NewSession starts a conversation with the task.
func NewSession(task string) *Session {
	return &Session{Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{llm.Text(task)}}}}
}

// Reason says why Run returned.
type Reason string

// Reasons.
const (
	ReasonDone      Reason = "done"       // the model finished
	ReasonMaxTurns  Reason = "max_turns"  // limits
	ReasonMaxTokens Reason = "max_tokens" //
	ReasonMaxCost   Reason = "max_cost"   //
	ReasonMaxTime   Reason = "max_time"   //
	ReasonCancelled Reason = "cancelled"  // ctx was cancelled (Ctrl-C)
	ReasonTruncated Reason = "truncated"  // the response hit its token limit
	ReasonRefused   Reason = "refused"    // the provider refused to answer
)

// Outcome is how a Run ended.
type Outcome struct {
	Reason Reason
	// Text is the model's last text.
	Text string
}

// ErrRuntime wraps a tool runtime failure that stopped the loop.
var ErrRuntime = errors.New("tool runtime failure")

// Run continues s until the model stops, a limit is reached, ctx is
// cancelled, or an error occurs. Limits count from s's totals, so a
// resumed session keeps its budget. On every return s is consistent and
// can be resumed. Cancellation is an Outcome, not an error.
func (a *Agent) Run(ctx context.Context, s *Session) (Outcome, error) {
	if len(s.Messages) == 0 || s.Messages[0].Role != llm.RoleUser {
		return Outcome{}, errors.New("agent: a session starts with the task as a user message")
	}
	if last := s.Messages[len(s.Messages)-1]; last.Role == llm.RoleAssistant && len(last.ToolCalls()) == 0 {
		// The model already finished; resuming needs a new user message.
		return a.stop(s, ReasonDone, last.Text()), nil
	}
	start := a.o.Now()
	l := a.o.Limits
	var cancel context.CancelFunc = func() {}
	if l.MaxTime > 0 {
		ctx, cancel = context.WithDeadline(ctx, start.Add(l.MaxTime))
	}
	defer cancel()
	last := ""
	for {
		var h Handed
		if a.o.Handed != nil {
			h = a.o.Handed()
		}
		switch {
		case l.MaxTurns > 0 && s.Turns+h.Turns >= l.MaxTurns:
			return a.stop(s, ReasonMaxTurns, last), nil
		case l.MaxTokens > 0 && s.Usage.Total()+h.Tokens >= l.MaxTokens:
			return a.stop(s, ReasonMaxTokens, last), nil
		case l.MaxCost > 0 && s.Cost+h.Cost >= l.MaxCost:
			return a.stop(s, ReasonMaxCost, last), nil
		}
		if r, done := a.ended(ctx); done {
			return a.stop(s, r, last), nil
		}
		resp, err := a.turn(ctx, s)
		if err != nil {
			if r, done := a.ended(ctx); done {
				return a.stop(s, r, last), nil
			}
			return Outcome{Reason: ""}, err
		}
		last = resp.Message.Text()
		calls := resp.Message.ToolCalls()
		if len(calls) == 0 {
			switch resp.Stop {
			case llm.StopMaxTokens:
				return a.stop(s, ReasonTruncated, last), nil
			case llm.StopRefusal:
				return a.stop(s, ReasonRefused, last), nil
			}
			return a.stop(s, ReasonDone, last), nil
		}
		if err := a.runTools(ctx, s, calls); err != nil {
			if r, done := a.ended(ctx); done {
				return a.stop(s, r, last), nil
			}
			return Outcome{}, err
		}
	}
}

// ended reports whether ctx ended, and why.
func (a *Agent) ended(ctx context.Context) (Reason, bool) {
	switch {
	case ctx.Err() == nil:
		return "", false
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ReasonMaxTime, true
	}
	return ReasonCancelled, true
}

func (a *Agent) stop(s *Session, r Reason, text string) Outcome {
	a.emit(Event{Type: EventStop, Turn: s.Turns, Reason: r, Usage: s.Usage, Cost: s.Cost})
	return Outcome{Reason: r, Text: text}
}

func (a *Agent) emit(ev Event) {
	if a.o.OnEvent != nil {
		a.o.OnEvent(ev)
	}
}

// turn makes one model call and appends its message to s.
func (a *Agent) turn(ctx context.Context, s *Session) (llm.Response, error) {
	req, err := a.request(ctx, s)
	if err != nil {
		return llm.Response{}, err
	}
	s.Turns++
	a.emit(Event{Type: EventTurnStart, Turn: s.Turns})
	ctx, span := a.modelSpan(ctx, req, s.Turns)
	defer span.End()
	resp, err := llm.Collect(a.o.Provider.Stream(ctx, req), func(ev llm.Event) {
		switch ev.Type {
		case llm.EventText:
			a.emit(Event{Type: EventText, Turn: s.Turns, Text: ev.Text})
		case llm.EventToolCallEnd:
			a.emit(Event{Type: EventToolCall, Turn: s.Turns, Call: ev.Call})
		}
	})
	if err != nil {
		span.Fail(err)
		return resp, fmt.Errorf("model call (turn %d): %w", s.Turns, err)
	}
	a.modelSpanEnd(span, resp)
	est := llm.EstimateRequest(req)
	if in := resp.Usage.InputTokens + resp.Usage.CacheReadTokens + resp.Usage.CacheWriteTokens; in > 0 && est > 0 {
		s.ratio = float64(in) / float64(est)
	}
	s.Usage = s.Usage.Add(resp.Usage)
	cost := a.o.Price.Cost(resp.Usage)
	s.Cost += cost
	a.emit(Event{Type: EventUsage, Turn: s.Turns, Usage: resp.Usage, Cost: cost})
	if len(resp.Message.Content) > 0 {
		s.Messages = append(s.Messages, resp.Message)
	}
	a.emit(Event{Type: EventTurnEnd, Turn: s.Turns, Reason: Reason(resp.Stop)})
	return resp, nil
}

// interruption says, for the model, why ctx ended.
func interruption(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "the session's time limit was reached"
	}
	return "the user interrupted the session"
}

// runTools runs calls in order and appends their results. Whatever
// happens, every call gets a result, so the session stays consistent.
func (a *Agent) runTools(ctx context.Context, s *Session, calls []llm.ToolCall) error {
	results := make([]llm.Block, 0, len(calls))
	var failure error
	for _, c := range calls {
		var res Result
		switch {
		case failure != nil:
			res = Result{Content: "not run: an earlier tool call in this turn failed the runtime", IsError: true}
		case ctx.Err() != nil:
			res = Result{Content: "not run: " + interruption(ctx), IsError: true}
		default:
			var err error
			res, err = a.o.Tools.Call(ctx, c)
			if err != nil {
				if ctx.Err() != nil {
					res = Result{Content: "interrupted: " + interruption(ctx), IsError: true}
				} else {
					failure = fmt.Errorf("%w: %s (%s): %w", ErrRuntime, c.Name, c.ID, err)
					res = Result{Content: "the runtime failed to process this call; it did not complete", IsError: true}
				}
			}
		}
		content, cut := Truncate(res.Content, a.o.Limits.ToolResultBytes)
		if cut > 0 {
			a.o.Logger.InfoContext(ctx, "tool result truncated", "call", c.ID, "omitted_bytes", cut)
		}
		r := res
		a.emit(Event{Type: EventToolResult, Turn: s.Turns, Call: &c, Result: &r})
		results = append(results, llm.ToolResult(c.ID, c.Name, content, res.IsError))
	}
	s.Messages = append(s.Messages, llm.Message{Role: llm.RoleUser, Content: results})
	return failure
}
