package host

import (
	"context"
	"fmt"
	"regexp"
	"strings"

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
	rec := plugin.Record{Manifest: m, Dir: dir, State: plugin.Enabled}
	st := plugin.NewMemStore(rec)
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
	r := h.StartOne(ctx, rec, reg)
	rep.Tools, _ = st.Pins(ctx, m.Name)
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

// discardAudit records nothing: a trial is no session.
type discardAudit struct{}

func (discardAudit) Append(context.Context, audit.Entry) (uint64, error) { return 0, nil }
func (discardAudit) Flush(context.Context) error                         { return nil }
