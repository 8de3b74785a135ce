package host

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// Trial runs a plugin as a session would (its sandbox, its limits, its
// capabilities, the same MCP client) without installing it: `fluffy
// plugin test`. It starts dir's server once, lists its tools, and runs
// cases against them, each call through the tool fluffy would register
// (its arguments checked against the schema, its result capped and
// labelled). o's Store is replaced by one holding only this plugin (its
// pins are those of this start); a nil Audit records nothing; a server
// that exits is not restarted. The error is for a trial that could not
// be set up; a server that did not answer is the report's Err.
func Trial(ctx context.Context, o Options, m plugin.Manifest, dir string, cases []plugin.TestCase) (plugin.TestReport, error) {
	rep := plugin.TestReport{Manifest: m}
	st := &trialStore{rec: plugin.Record{Manifest: m, Dir: dir, State: plugin.Enabled}}
	o.Store = st
	if o.Audit == nil {
		o.Audit = discardAudit{}
	}
	o.Restart = Restart{Max: 1}
	o.Offer = nil
	h, err := New(o)
	if err != nil {
		return rep, err
	}
	defer h.Close()
	rep.Runtime = m.Sandbox.Runtime
	if rep.Runtime == "" {
		rep.Runtime = h.o.DefaultRuntime
		if m.Run.Image != "" && h.o.Images != nil {
			rep.Runtime = "docker" // as newServer runs it
		}
	}
	reg := tool.NewRegistry()
	r := h.StartOne(ctx, st.rec, reg)
	rep.Tools = st.pinned()
	for _, held := range r.Held {
		rep.Refused = append(rep.Refused, held.Tool+": "+held.Reason)
	}
	if r.Err != nil {
		rep.Err = r.Err
		return rep, nil
	}
	for _, c := range cases {
		rep.Results = append(rep.Results, runCase(ctx, reg, m.Name, c))
	}
	return rep, nil
}

// runCase calls c's tool and checks its answer.
func runCase(ctx context.Context, reg *tool.Registry, name string, c plugin.TestCase) plugin.TestResult {
	res := plugin.TestResult{Case: c}
	regName := c.Tool
	if !strings.HasPrefix(regName, "mcp.") {
		regName = RegistryName(name, c.Tool)
	}
	tl, err := reg.Lookup(regName)
	if err != nil {
		res.Why = fmt.Sprintf("no tool %s: %v", regName, err)
		return res
	}
	args, err := tl.Decode(c.Arguments)
	if err != nil {
		res.Why = fmt.Sprintf("arguments: %v", err)
		return res
	}
	out, err := tl.Run(ctx, args)
	if err != nil {
		res.Why = fmt.Sprintf("call: %v", err)
		return res
	}
	res.Output = string(out.Output)
	switch {
	case out.IsError != c.Error:
		if c.Error {
			res.Why = "the call succeeded; the case expects a tool error"
		} else {
			res.Why = "the call answered a tool error"
		}
	case c.Expect != "" && !regexp.MustCompile(c.Expect).MatchString(res.Output):
		// ReadTests compiled it already.
		res.Why = fmt.Sprintf("the result does not match %q", c.Expect)
	default:
		res.Pass = true
	}
	return res
}

// trialStore holds the one plugin on trial.
type trialStore struct {
	mu   sync.Mutex // guards the fields below
	rec  plugin.Record
	pins []plugin.ToolPin
}

func (s *trialStore) List(context.Context) ([]plugin.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []plugin.Record{s.rec}, nil
}

func (s *trialStore) Get(_ context.Context, name string) (plugin.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if name != s.rec.Manifest.Name {
		return plugin.Record{}, fmt.Errorf("%w: %s", plugin.ErrNotFound, name)
	}
	return s.rec, nil
}

func (s *trialStore) SetState(_ context.Context, name string, st plugin.State, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if name != s.rec.Manifest.Name {
		return fmt.Errorf("%w: %s", plugin.ErrNotFound, name)
	}
	s.rec.State, s.rec.Reason = st, reason
	return nil
}

func (s *trialStore) PinTools(_ context.Context, _ string, pins []plugin.ToolPin) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pins = slices.Clone(pins)
	return nil
}

func (s *trialStore) Pins(context.Context, string) ([]plugin.ToolPin, error) {
	return s.pinned(), nil
}

func (s *trialStore) pinned() []plugin.ToolPin {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.pins)
	slices.SortFunc(out, func(a, b plugin.ToolPin) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// discardAudit records nothing: a trial is no session.
type discardAudit struct{}

func (discardAudit) Append(context.Context, audit.Entry) (uint64, error) { return 0, nil }
func (discardAudit) Flush(context.Context) error                         { return nil }
