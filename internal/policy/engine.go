package policy

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy/shell"
)

// DefaultRules is the default rule set, shipped as readable YAML.
//
//go:embed default.yaml
var DefaultRules []byte

// DefaultRulesName is the name the default rule set is reported under.
const DefaultRulesName = "(default rules)"

// Options configure an Engine. All fields are optional.
type Options struct {
	// Default is the effect when no rule matches (config policy.default);
	// zero means Approve.
	Default Effect
	// Protected is what the built-in rules protect.
	Protected Protected
	// Home is the user's home directory, for ~ in path patterns and
	// command arguments.
	Home string
	// Classifier judges classify rules. Nil makes every classify rule
	// fail closed (see docs/policy.md).
	Classifier Classifier
	// Tokens validates presented capability tokens. Nil ignores them.
	Tokens *Tokens
	// HostRules are default-layer rules generated from configuration
	// (net.registries), before the default rule set's.
	HostRules []HostRule
	// ExtensionSteps and ExtensionTimeout limit one call of a Starlark
	// decide(op); zero means 100,000 steps and 50ms.
	ExtensionSteps   uint64
	ExtensionTimeout time.Duration
}

// Engine decides operations. It is safe for concurrent use; build a new
// one (Compile) to change rules.
type Engine struct {
	opts      Options
	protected protectedSet
	secret    protectedSet
	layered   *group // user and project rules, extensions
	defaults  *group // the default rule set
	all       []*rule
	classes   *classCache
	exec      *execTable // the exec-capable table: user, project, then embedded
	digest    string     // see Digest
}

// group is an ordered list of rules with an index by tool and action.
type group struct {
	rules   []*rule
	byTool  map[string][]int // rules naming this exact tool
	anyTool []int            // rules with no tool or a glob

	mu    sync.RWMutex // guards cache
	cache map[candKey][]int
}

type candKey struct {
	tool   string
	action operation.Action
}

const maxIndexCache = 4096

func newGroup(rules []*rule) *group {
	g := &group{rules: rules, byTool: map[string][]int{}, cache: map[candKey][]int{}}
	for i, r := range rules {
		if r.match == nil || len(r.match.tools) == 0 || r.toolGlobs {
			g.anyTool = append(g.anyTool, i)
		}
		for _, t := range r.exactTools {
			if l := g.byTool[t]; len(l) == 0 || l[len(l)-1] != i {
				g.byTool[t] = append(l, i)
			}
		}
	}
	return g
}

// candidates returns, in rule order, the rules that may match tool and
// action: the index lookup is O(1) after the first call per pair.
func (g *group) candidates(tool string, action operation.Action) []int {
	key := candKey{tool, action}
	g.mu.RLock()
	v, ok := g.cache[key]
	g.mu.RUnlock()
	if ok {
		return v
	}
	var out []int
	add := func(l []int) {
		for _, i := range l {
			r := g.rules[i]
			if r.match != nil && len(r.match.actions) > 0 && !slices.Contains(r.match.actions, action) {
				continue
			}
			if r.toolGlobs && !r.exactToolMatch(tool) && !anyGlob(r.match.tools, tool) {
				continue
			}
			out = append(out, i)
		}
	}
	add(g.byTool[tool])
	add(g.anyTool)
	slices.Sort(out)
	out = slices.Compact(out)
	g.mu.Lock()
	if len(g.cache) < maxIndexCache {
		g.cache[key] = out
	}
	g.mu.Unlock()
	return out
}

func (r *rule) exactToolMatch(tool string) bool { return slices.Contains(r.exactTools, tool) }

// Compile builds an engine from the default rule set and the given
// sources (the user's file, then the project's). It is all or nothing: on
// any error it returns nil and every problem found, each naming file,
// line and column.
func Compile(opts Options, sources ...Source) (*Engine, error) {
	if opts.Default == 0 {
		opts.Default = Approve
	}
	env, err := newCELEnv()
	if err != nil {
		return nil, err
	}
	e := &Engine{
		opts:      opts,
		protected: newProtectedSet(opts.Protected.Paths),
		secret:    newProtectedSet(opts.Protected.Secret),
		classes:   newClassCache(),
		digest:    digestOf(opts, sources),
	}
	var errs []error
	defSrc := Source{Name: DefaultRulesName, Layer: LayerDefault, Data: DefaultRules}
	defFile, derrs := parseSource(defSrc, env, opts.Home)
	errs = append(errs, derrs...)
	defExec, xerrs := parseExecSource(Source{Name: ExecTableName, Layer: LayerDefault, Data: ExecTable})
	errs = append(errs, xerrs...)
	hostRules, herrs := compileHostRules(opts.HostRules)
	errs = append(errs, herrs...)
	var layered []*rule
	trust := false
	files := make([]*file, len(sources))
	for i, src := range sources {
		if src.Layer != LayerUser && src.Layer != LayerProject {
			errs = append(errs, fmt.Errorf("%s: %w: layer must be user or project", src.Name, ErrInvalid))
			continue
		}
		f, ferrs := parseSource(src, env, opts.Home)
		errs = append(errs, ferrs...)
		files[i] = f
		if f != nil && src.Layer == LayerUser && f.trustProjectAllow {
			trust = true
		}
	}
	for i, f := range files {
		if f == nil {
			continue
		}
		src := sources[i]
		for _, r := range f.rules {
			if src.Layer == LayerProject && r.effect == Allow && !trust {
				errs = append(errs, &Error{File: src.Name, Line: r.line, Column: r.col, Rule: r.id,
					Msg: "a project policy may only tighten (approve, block); allow rules need trust_project_allow: true in your user policy file"})
			}
		}
		layered = append(layered, f.rules...)
		for _, x := range f.extensions {
			ext, err := compileExtension(src, x, e.extLimits())
			if err != nil {
				errs = append(errs, err)
				continue
			}
			r := &rule{id: "ext:" + x.name, layer: src.Layer, source: src.Name, line: x.line, col: x.col, ext: ext, match: &matcher{}}
			r.index()
			layered = append(layered, r)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w:\n%w", ErrInvalid, errors.Join(errs...))
	}
	ids := map[string]string{}
	for _, r := range layered {
		if prev, ok := ids[r.id]; ok {
			errs = append(errs, &Error{File: r.source, Line: r.line, Column: r.col, Rule: r.id, Msg: "rule id already used in " + prev})
		}
		ids[r.id] = r.origin()
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w:\n%w", ErrInvalid, errors.Join(errs...))
	}
	e.exec = newExecTable()
	for _, f := range files {
		if f != nil && f.exec != nil {
			e.exec.add(f.exec)
		}
	}
	e.exec.add(defExec)
	e.layered = newGroup(layered)
	defRules := append(hostRules, defFile.rules...)
	e.defaults = newGroup(defRules)
	e.all = append(slices.Clone(layered), defRules...)
	return e, nil
}

// Digest names the effective policy: a SHA-256 over everything Compile
// read that decides (the default rules and exec-capable table, each
// source's name, layer, text and extensions, the fallback effect, the
// protected paths, the home directory and the extension limits), hex. Two engines with the same
// digest decide alike. A capability token and an approval "for session"
// carry the digest of the policy they were given under, and count only
// under that policy.
func (e *Engine) Digest() string { return e.digest }

// digestOf computes Digest: each field is length-prefixed, so no two
// inputs encode alike.
func digestOf(opts Options, sources []Source) string {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	str := func(s string) { field([]byte(s)) }
	str("fluffy.policy.digest.v1")
	field(DefaultRules)
	field(ExecTable)
	str(opts.Default.String())
	str(opts.Home)
	for _, l := range [][]string{opts.Protected.Paths, opts.Protected.Secret} {
		str(strconv.Itoa(len(l)))
		for _, p := range l {
			str(p)
		}
	}
	str(strconv.FormatUint(opts.ExtensionSteps, 10))
	str(opts.ExtensionTimeout.String())
	str(strconv.FormatBool(opts.Classifier != nil))
	digestHostRules(opts.HostRules, str)
	str(strconv.Itoa(len(sources)))
	for _, src := range sources {
		str(src.Name)
		str(string(src.Layer))
		field(src.Data)
		names := slices.Sorted(maps.Keys(src.Extensions))
		str(strconv.Itoa(len(names)))
		for _, n := range names {
			str(n)
			field(src.Extensions[n])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func parseSource(src Source, env *celEnv, home string) (*file, []error) {
	l := &loader{src: src, env: env, home: home}
	f := l.parseFile()
	if len(l.errs) > 0 {
		return nil, l.errs
	}
	return f, nil
}

// parseExecSource reads the embedded exec-capable table.
func parseExecSource(src Source) (*execTable, []error) {
	l := &loader{src: src}
	var doc yaml.Node
	if err := yaml.Unmarshal(src.Data, &doc); err != nil {
		return nil, []error{fmt.Errorf("%s: %w", src.Name, err)}
	}
	t := l.parseExecTable(doc.Content[0])
	if len(l.errs) > 0 {
		return nil, l.errs
	}
	return t, nil
}

func (e *Engine) extLimits() extLimits {
	l := extLimits{steps: e.opts.ExtensionSteps, timeout: e.opts.ExtensionTimeout}
	if l.steps == 0 {
		l.steps = 100_000
	}
	if l.timeout == 0 {
		l.timeout = 50 * time.Millisecond
	}
	return l
}

// RuleInfo describes one effective rule, for explain.
type RuleInfo struct {
	ID          string `json:"id"`
	Effect      string `json:"effect"`
	Layer       Layer  `json:"layer"`
	Source      string `json:"source"`
	Description string `json:"description,omitempty"`
}

// Rules lists the effective rules in evaluation order: built-in, user,
// project, default.
func (e *Engine) Rules() []RuleInfo {
	var out []RuleInfo
	for _, b := range Builtins() {
		out = append(out, RuleInfo{ID: b.ID, Effect: b.Effect.String(), Layer: LayerBuiltin, Source: "built in", Description: b.Message})
	}
	for _, r := range e.all {
		eff := r.effect.String()
		switch {
		case r.ext != nil:
			eff = "extension"
		case r.classify != "":
			eff += " (classify)"
		}
		desc := r.description
		if desc == "" {
			desc = r.message
		}
		out = append(out, RuleInfo{ID: r.id, Effect: eff, Layer: r.layer, Source: r.origin(), Description: desc})
	}
	return out
}

// HostPatterns are the host matchers ("name:port" globs) of the rules
// that may let a destination through (effect allow or approve), in
// evaluation order. None means no host can be reached whatever is asked,
// and a session's commands need no network at all.
func (e *Engine) HostPatterns() []string {
	var out []string
	for _, r := range e.all {
		if r.match == nil || (r.effect != Allow && r.effect != Approve) {
			continue
		}
		for _, h := range r.match.hosts {
			out = append(out, h.raw)
		}
	}
	return out
}

// Default returns the effect used when nothing matches.
func (e *Engine) Default() Effect { return e.opts.Default }

// Decide evaluates op. It never fails: an error inside a rule makes the
// engine fail closed and is reported in the matches. Presented tokens that
// turn approve into allow are used up (one use each) by this call.
func (e *Engine) Decide(ctx context.Context, op operation.Operation) Decision {
	return e.decide(ctx, &op, false)
}

// Explain is Decide that also evaluates the default rule set where a
// user or project rule already decided (reported as Shadowed), and does not
// use tokens up.
func (e *Engine) Explain(ctx context.Context, op operation.Operation) Decision {
	return e.decide(ctx, &op, true)
}

type atomResult struct {
	effect   Effect
	deciding Match
	builtin  Effect
	a        *atom
}

func (e *Engine) decide(ctx context.Context, op *operation.Operation, explain bool) Decision {
	if id, detail := malformed(op); id != "" {
		return Decision{Effect: Block, Rule: id, Layer: LayerBuiltin, Reason: builtinMessage(id) + ": " + detail, Subject: op.Tool, Policy: e.digest,
			Matched: []Match{{Rule: id, Effect: Block, Layer: LayerBuiltin, Subject: op.Tool, Message: detail}}}
	}
	ws := op.Session.Workspace
	var abuf [4]atom // most operations have one atom: keep them off the heap
	atoms := e.atoms(op, ws, abuf[:0])
	// Most atoms match one or two rules; more grow the slice.
	matched := make([]Match, 0, 2*len(atoms))
	var rbuf [4]atomResult
	results := rbuf[:0]
	for i := range atoms {
		results = append(results, e.decideAtom(ctx, op, &atoms[i], ws, explain, &matched))
	}
	d := Decision{Matched: matched, Policy: e.digest}
	stale := e.applyTokens(op, results, &d, explain)
	best := -1
	for i, r := range results {
		if best < 0 || r.effect > results[best].effect {
			best = i
		}
	}
	r := results[best]
	d.Effect = r.effect
	d.Rule = r.deciding.Rule
	d.Layer = r.deciding.Layer
	d.Source = r.deciding.Source
	d.Reason = r.deciding.Message
	d.Subject = r.deciding.Subject
	if d.Reason == "" {
		d.Reason = fmt.Sprintf("rule %s: %s", d.Rule, d.Effect)
	}
	if r.a.via != "" && d.Effect > Allow {
		d.Reason = r.a.via + ": " + d.Reason
	}
	if stale && d.Effect == Approve {
		d.Reason += " (" + policyChanged + ")"
	}
	return d
}

// policyChanged is said when an approval given under another policy is
// presented: it does not count, and the person is asked again.
const policyChanged = "an earlier approval does not count: the policy changed since this approval"

// atoms splits op into the parts decided one by one.
func (e *Engine) atoms(op *operation.Operation, ws string, out []atom) []atom {
	for _, p := range op.Paths {
		out = append(out, atom{action: op.Action, path: p.Abs, inWS: p.InWorkspace && ws != "" && within(p.Abs, ws)})
	}
	for i := range op.Hosts {
		out = append(out, atom{action: op.Action, host: &op.Hosts[i]})
	}
	cmds := op.Commands
	if len(cmds) == 0 {
		switch {
		case op.CommandLine != "":
			cmds, _ = shell.Parse(op.CommandLine) // a parse error is a Dynamic command
		case len(op.Argv) > 0:
			cmds = shell.Expand(op.Argv)
		}
	}
	for i := range cmds {
		out = e.cmdAtoms(op, &cmds[i], "", ws, 0, out)
	}
	if len(out) == 0 {
		out = append(out, atom{action: op.Action})
	}
	return out
}

// cmdAtoms appends the atoms of one command: the command, its redirection
// targets, and — through the exec-capable table — the commands it can be
// told to run, each judged on its own like the commands of sh -c.
func (e *Engine) cmdAtoms(op *operation.Operation, c *operation.Command, via, ws string, depth int, out []atom) []atom {
	a := atom{action: op.Action, cmd: c, via: via}
	var f execFinding
	if e.exec != nil {
		f = e.exec.analyse(c)
	}
	a.exec = f.code
	if len(op.AgentWritten) > 0 {
		base := ws
		if d := c.Dir; d != "" {
			if filepath.IsAbs(d) {
				base = d
			} else if ws != "" {
				base = filepath.Join(ws, d)
			}
		}
		a.written = runsWritten(&f, op.AgentWritten, base)
	}
	if len(f.nested) > 0 && depth >= maxExecDepth && a.exec == "" {
		a.exec = fmt.Sprintf("commands nested deeper than %d through exec-capable arguments", maxExecDepth)
	}
	out = append(out, a)
	for _, w := range c.Writes {
		p := w
		if !filepath.IsAbs(p) && ws != "" {
			p = filepath.Join(ws, p)
		} else if filepath.IsAbs(p) {
			p = filepath.Clean(p)
		}
		out = append(out, atom{action: operation.Write, path: p, inWS: ws != "" && filepath.IsAbs(p) && within(p, ws), via: via})
	}
	if depth >= maxExecDepth {
		return out
	}
	for _, n := range f.nested {
		for j := range n.cmds {
			nc := &n.cmds[j]
			if c.Dir != "" {
				if nc.Dir == "" {
					nc.Dir = c.Dir
				} else if !filepath.IsAbs(nc.Dir) {
					nc.Dir = filepath.Join(c.Dir, nc.Dir)
				}
			}
			if c.Dynamic && !nc.Dynamic {
				nc.Dynamic, nc.Unresolved = true, c.Unresolved
			}
			if len(nc.Writes) > 0 && !nc.Dynamic {
				// Normalization did not see these targets: they are
				// not canonical (symlinks unresolved).
				nc.Dynamic, nc.Unresolved = true, "a redirection in a command run through an exec-capable argument is not resolved"
			}
			out = e.cmdAtoms(op, nc, n.via, ws, depth+1, out)
		}
	}
	return out
}

func strongest(ms []Match) (Match, bool) {
	best, ok := Match{}, false
	for _, m := range ms {
		if m.Shadowed {
			continue
		}
		if !ok || m.Effect > best.Effect {
			best, ok = m, true
		}
	}
	return best, ok
}

func (e *Engine) decideAtom(ctx context.Context, op *operation.Operation, a *atom, ws string, explain bool, ms *[]Match) atomResult {
	start := len(*ms)
	e.builtinAtom(op, a, ws, ms)
	bEnd := len(*ms)
	ev := &evalCtx{op: op, a: a, ws: ws}
	e.evalGroup(ctx, e.layered, ev, false, ms)
	lEnd := len(*ms)
	var layer Match
	if m, ok := strongest((*ms)[bEnd:lEnd]); ok {
		layer = m
		if explain {
			e.evalGroup(ctx, e.defaults, ev, true, ms)
		}
	} else {
		e.evalGroup(ctx, e.defaults, ev, false, ms)
		if m, ok := strongest((*ms)[lEnd:]); ok {
			layer = m
		} else {
			layer = Match{Rule: "fallback", Effect: e.opts.Default, Layer: LayerFallback, Subject: a.subject(),
				Message: "no rule matches " + a.subject() + "; the configured default (policy.default) is " + e.opts.Default.String()}
		}
	}
	if a.exec != "" && layer.Layer == LayerFallback {
		// No rule said exec_capable: true; the configured default does
		// not speak for code nobody can see.
		layer = Match{Rule: RuleExecCapable, Effect: max(Approve, e.opts.Default), Layer: LayerBuiltin, Subject: a.subject(),
			Message: a.exec + "; a person must look at it (an allow rule covers it only with exec_capable: true)"}
		*ms = append(*ms, layer)
	}
	res := atomResult{effect: layer.Effect, deciding: layer, a: a}
	if bm, ok := strongest((*ms)[start:bEnd]); ok {
		res.builtin = bm.Effect
		if bm.Effect >= layer.Effect {
			res.effect, res.deciding = bm.Effect, bm
		}
	}
	return res
}

// noStrings is the empty list CEL and Starlark see for absent lists;
// never appended to.
var noStrings = []string{}

// evalCtx carries one atom through the rules; the CEL view is built on
// first use.
type evalCtx struct {
	op  *operation.Operation
	a   *atom
	ws  string
	cel *CELOp
}

func (ev *evalCtx) celOp() *CELOp {
	if ev.cel != nil {
		return ev.cel
	}
	c := &CELOp{Tool: ev.op.Tool, Action: string(ev.a.action), Path: ev.a.path, InWorkspace: ev.a.inWS,
		Size: ev.op.Size, Tags: ev.op.Tags,
		Session: CELSession{ID: ev.op.Session.ID, Mode: ev.op.Session.Mode, State: ev.op.Session.State, Workspace: ev.op.Session.Workspace,
			Untrusted: ev.op.Session.Untrusted, UntrustedSource: ev.op.Session.UntrustedSource}}
	if c.Tags == nil {
		c.Tags = noStrings
	}
	c.Argv, c.Env = noStrings, noStrings
	if cmd := ev.a.cmd; cmd != nil {
		if cmd.Argv != nil {
			c.Argv = cmd.Argv
		}
		if cmd.Env != nil {
			c.Env = cmd.Env
		}
		c.Wrapper, c.Dynamic = cmd.Wrapper, cmd.Dynamic
		c.ExecCapable, c.AgentWritten = ev.a.exec != "", ev.a.written
	}
	if h := ev.a.host; h != nil {
		c.Host, c.Port = h.Name, int64(h.Port)
	}
	ev.cel = c
	return c
}

func (e *Engine) evalGroup(ctx context.Context, g *group, ev *evalCtx, shadowed bool, out *[]Match) {
	for _, i := range g.candidates(ev.op.Tool, ev.a.action) {
		r := g.rules[i]
		m, ok := e.evalRule(ctx, r, ev)
		if !ok {
			continue
		}
		m.Shadowed = shadowed
		*out = append(*out, m)
	}
}

// evalRule reports whether r matches the atom, and how. Errors fail
// closed: an approve or block rule whose condition cannot be evaluated
// matches; an allow rule does not.
func (e *Engine) evalRule(ctx context.Context, r *rule, ev *evalCtx) (Match, bool) {
	strict := r.effect == Allow
	if strict && ev.a.exec != "" && (r.match == nil || r.match.execCapable == nil || !*r.match.execCapable) {
		return Match{}, false // allowing a program is not allowing the code it is told to run
	}
	if r.match != nil && !r.match.matches(ev.op, ev.a, ev.ws, strict) {
		return Match{}, false
	}
	for _, x := range r.except {
		if x.matches(ev.op, ev.a, ev.ws, !strict) {
			return Match{}, false
		}
	}
	m := Match{Rule: r.id, Effect: r.effect, Layer: r.layer, Source: r.origin(), Subject: ev.a.subject(), Message: r.message}
	failed := func(err error) (Match, bool) {
		m.Error = err.Error()
		return m, r.effect != Allow
	}
	if r.when != nil {
		ok, err := r.when.eval(ev.celOp())
		if err != nil {
			return failed(fmt.Errorf("when: %w", err))
		}
		if !ok {
			return Match{}, false
		}
	}
	if r.classify != "" {
		ok, err := e.classify(ctx, r, ev)
		if err != nil {
			return failed(err)
		}
		if !ok {
			return Match{}, false
		}
	}
	if r.ext != nil {
		eff, msg, err := r.ext.decide(ctx, ev.celOp())
		if err != nil {
			m.Effect = Approve
			m.Error = err.Error()
			m.Message = "extension failed; a person must decide"
			return m, true
		}
		if eff == 0 || eff == Allow && ev.a.exec != "" {
			return Match{}, false
		}
		m.Effect, m.Message = eff, msg
	}
	if m.Message == "" {
		m.Message = r.description
	}
	return m, true
}
