package kernel

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/llm"
)

// Sub-agents (docs/subagents.md): a session spawns a child through its
// sessions.spawn tool. The child is a kernel session like any other, run
// by the kernel as it runs every session, in a tree: it can only narrow
// what its parent has (tools, policy, budget), inherits its parent's
// untrusted mark, writes into a change set of its own, and every audit
// entry of its session names its parent and root.

// The refusals of a sessions.* request; each is a *SpawnError whose
// Unwrap returns one of them, audited as session.refused.
var (
	// ErrSpawnTool: the child asked for a tool its parent lacks.
	ErrSpawnTool = errors.New("kernel: a sub-agent may only have tools its parent has")
	// ErrSpawnPolicy: the child's rules would loosen its parent's policy
	// (an allow rule) or do not compile.
	ErrSpawnPolicy = errors.New("kernel: a sub-agent's policy may only tighten its parent's")
	// ErrSpawnBudget: the child asked for more than its parent has left.
	ErrSpawnBudget = errors.New("kernel: a sub-agent's budget must fit in what its parent has left")
	// ErrSpawnDepth: the tree would grow deeper than sessions.max_depth.
	ErrSpawnDepth = errors.New("kernel: the sub-agent depth limit is reached")
	// ErrSpawnFanOut: the parent has spawned sessions.max_children already.
	ErrSpawnFanOut = errors.New("kernel: the sub-agent fan-out limit is reached")
	// ErrScope: the session asked about is not one of the caller's
	// descendants (a sibling, a parent, an unrelated session).
	ErrScope = errors.New("kernel: a session sees only its own sub-agents")
)

// SpawnError is a refused sessions.* request: Op ("spawn", "history",
// "send"), the rule it broke (Code, Err) and, for the model, Reason.
type SpawnError struct {
	Op     string
	Code   string
	Reason string
	Target string // the session asked about (history, send)
	Tool   string // the tool asked for (ErrSpawnTool)
	Err    error
}

func (e *SpawnError) Error() string { return e.Err.Error() + ": " + e.Reason }
func (e *SpawnError) Unwrap() error { return e.Err }

// The codes of session.refused, by error.
var refusalCodes = map[error]string{
	ErrSpawnTool: "tool", ErrSpawnPolicy: "policy", ErrSpawnBudget: "budget",
	ErrSpawnDepth: "depth", ErrSpawnFanOut: "fanout", ErrScope: "scope",
}

// SubagentLimits bound the trees of sub-agents (config sessions.*).
type SubagentLimits struct {
	// MaxDepth is how deep a tree may grow below its top-level session;
	// 0 refuses every spawn.
	MaxDepth int
	// MaxChildren is the most sub-agents one session may spawn.
	MaxChildren int
}

// Budget is what a sub-agent may spend, carved out of its parent's
// remaining budget. A zero member sets no limit of the child's own (the
// kernel's limits still apply); a spawn never leaves one zero where the
// parent has a limit.
type Budget struct {
	Turns  int     `json:"turns,omitempty"`
	Tokens int     `json:"tokens,omitempty"`
	Cost   float64 `json:"cost,omitempty"`
	// Time is the child's wall time per run; it never reaches past the
	// parent's run's own end.
	Time time.Duration `json:"time,omitempty"`
}

// Narrowing is what a sub-agent was given: the whole of its tool set,
// the policy layers it runs under beside the workspace's policy (its
// ancestors' and its own, outermost first; each only tightens), and its
// budget. The daemon side (ToolsFactory) builds the child's tools from it.
type Narrowing struct {
	Tools  []string `json:"tools"`
	Policy []string `json:"policy,omitempty"`
	Budget Budget   `json:"budget"`
}

// SpawnParams are a sessions.spawn request.
type SpawnParams struct {
	// Parent is the calling session.
	Parent string
	Task   string
	// Tools is the child's tool set; empty takes all of ParentTools.
	Tools []string
	// ParentTools is the parent's tool set as its router offers it now.
	ParentTools []string
	// Policy is the child's own rules, a policy file's text (YAML or
	// JSON); "" adds none. Options.CheckPolicy judges it.
	Policy string
	// Budget is asked of the parent's remaining budget; a zero member
	// takes half of what the parent has left of it.
	Budget Budget
}

// Spawn creates a sub-agent of p.Parent, paused until run (RunMessage,
// or Start below). Every refusal is a *SpawnError, audited as
// session.refused against the parent.
func (k *Kernel) Spawn(ctx context.Context, p SpawnParams) (Info, error) {
	parent, err := k.Get(ctx, p.Parent)
	if err != nil {
		return Info{}, err
	}
	if parent.Status == StatusClosed {
		return Info{}, fmt.Errorf("%w: %s", ErrClosed, parent.ID)
	}
	if strings.TrimSpace(p.Task) == "" {
		return Info{}, errors.New("kernel: a sub-agent needs a task")
	}
	// One spawn at a time: the limits counted and the child stored
	// together, so two spawns cannot both take the last of a budget.
	k.spawnMu.Lock()
	defer k.spawnMu.Unlock()
	n, serr := k.narrow(ctx, parent, p)
	if serr != nil {
		return Info{}, k.refuse(ctx, parent.ID, serr)
	}
	root := parent.Root
	if root == "" {
		root = parent.ID
	}
	child, err := k.create(ctx, CreateParams{Workspace: parent.Workspace, Task: p.Task, Model: parent.Model, Kind: parent.Kind},
		&spawned{parent: parent, root: root, narrowing: n, policy: p.Policy})
	if err != nil {
		return Info{}, err
	}
	return child, nil
}

// narrow decides what the child of parent may have, or why it may not
// be spawned.
func (k *Kernel) narrow(ctx context.Context, parent Info, p SpawnParams) (*Narrowing, *SpawnError) {
	lim := k.o.Subagents
	if parent.Depth+1 > lim.MaxDepth {
		return nil, &SpawnError{Op: "spawn", Err: ErrSpawnDepth,
			Reason: fmt.Sprintf("session %s is at depth %d and sessions.max_depth is %d", parent.ID, parent.Depth, max(lim.MaxDepth, 0))}
	}
	var children int
	if err := k.o.DB.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE parent = ?`, parent.ID).Scan(&children); err != nil {
		return nil, &SpawnError{Op: "spawn", Err: ErrSpawnFanOut, Reason: "the sub-agents spawned so far cannot be counted: " + err.Error()}
	}
	if children >= lim.MaxChildren {
		return nil, &SpawnError{Op: "spawn", Err: ErrSpawnFanOut,
			Reason: fmt.Sprintf("session %s has spawned %d sub-agents and sessions.max_children is %d", parent.ID, children, max(lim.MaxChildren, 0))}
	}
	tools, serr := narrowTools(parent, p)
	if serr != nil {
		return nil, serr
	}
	n := &Narrowing{Tools: tools}
	if parent.Narrowing != nil {
		n.Policy = slices.Clone(parent.Narrowing.Policy)
	}
	if p.Policy != "" {
		if k.o.CheckPolicy == nil {
			return nil, &SpawnError{Op: "spawn", Err: ErrSpawnPolicy, Reason: "this kernel cannot check a sub-agent's rules, so it takes none"}
		}
		if err := k.o.CheckPolicy([]byte(p.Policy)); err != nil {
			return nil, &SpawnError{Op: "spawn", Err: ErrSpawnPolicy, Reason: err.Error()}
		}
		n.Policy = append(n.Policy, p.Policy)
	}
	b, serr := k.carve(ctx, parent, p.Budget)
	if serr != nil {
		return nil, serr
	}
	n.Budget = b
	return n, nil
}

// narrowTools is the child's tool set: a subset of the parent's tools
// as its router offers them and, for a parent that is itself a child,
// of the set it was given.
func narrowTools(parent Info, p SpawnParams) ([]string, *SpawnError) {
	has := func(name string) bool {
		if !slices.Contains(p.ParentTools, name) {
			return false
		}
		return parent.Narrowing == nil || slices.Contains(parent.Narrowing.Tools, name)
	}
	want := p.Tools
	if len(want) == 0 {
		// All the parent has: what its router offers that it was given.
		want = slices.DeleteFunc(slices.Clone(p.ParentTools), func(t string) bool { return !has(t) })
	}
	var out []string
	for _, t := range want {
		if !has(t) {
			return nil, &SpawnError{Op: "spawn", Err: ErrSpawnTool, Tool: t,
				Reason: fmt.Sprintf("the tool %q is not in session %s's tool set", t, parent.ID)}
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// Remaining is what session id has left of its budget: its limits less
// what it used and what it handed to its sub-agents. A member is -1
// where the session has no limit. Time is not carved: it is the time left
// before ctx's deadline (the calling run's end), -1 without one.
func (k *Kernel) Remaining(ctx context.Context, info Info) (Budget, error) {
	l := k.limitsOf(ctx, info)
	handed, err := k.handed(ctx, info.ID)
	if err != nil {
		return Budget{}, err
	}
	left := func(limit, used int) int {
		if limit <= 0 {
			return -1
		}
		return max(limit-used, 0)
	}
	r := Budget{
		Turns:  left(l.MaxTurns, info.Turns+handed.Turns),
		Tokens: left(l.MaxTokens, info.Usage.Total()+handed.Tokens),
		Cost:   -1,
		Time:   -1,
	}
	if l.MaxCost > 0 {
		r.Cost = math.Max(l.MaxCost-info.Cost-handed.Cost, 0)
	}
	if d, ok := ctx.Deadline(); ok {
		r.Time = max(time.Until(d), 0)
	}
	if l.MaxTime > 0 && (r.Time < 0 || l.MaxTime < r.Time) {
		r.Time = l.MaxTime
	}
	return r, nil
}

// carve takes the child's budget out of parent's remaining one.
func (k *Kernel) carve(ctx context.Context, parent Info, ask Budget) (Budget, *SpawnError) {
	left, err := k.Remaining(ctx, parent)
	if err != nil {
		return Budget{}, &SpawnError{Op: "spawn", Err: ErrSpawnBudget, Reason: "the parent's remaining budget cannot be read: " + err.Error()}
	}
	over := func(what string, asked, has any) *SpawnError {
		return &SpawnError{Op: "spawn", Err: ErrSpawnBudget,
			Reason: fmt.Sprintf("%s: asked for %v, session %s has %v left", what, asked, parent.ID, has)}
	}
	var b Budget
	pick := func(what string, asked, has int) (int, *SpawnError) {
		switch {
		case has < 0:
			return max(asked, 0), nil
		case asked > has:
			return 0, over(what, asked, has)
		case asked > 0:
			return asked, nil
		case has < 1:
			return 0, over(what, "some", 0)
		}
		return max(has/2, 1), nil
	}
	var serr *SpawnError
	if b.Turns, serr = pick("turns", ask.Turns, left.Turns); serr != nil {
		return Budget{}, serr
	}
	if b.Tokens, serr = pick("tokens", ask.Tokens, left.Tokens); serr != nil {
		return Budget{}, serr
	}
	switch {
	case left.Cost < 0:
		b.Cost = max(ask.Cost, 0)
	case ask.Cost > left.Cost:
		return Budget{}, over("cost (US$)", ask.Cost, left.Cost)
	case ask.Cost > 0:
		b.Cost = ask.Cost
	case left.Cost == 0:
		return Budget{}, over("cost (US$)", "some", 0)
	default:
		b.Cost = left.Cost / 2
	}
	switch {
	case left.Time < 0:
		b.Time = max(ask.Time, 0)
	case ask.Time > left.Time:
		return Budget{}, over("time", ask.Time.Round(time.Second), left.Time.Round(time.Second))
	case ask.Time > 0:
		b.Time = ask.Time
	case left.Time == 0:
		return Budget{}, over("time", "some", 0)
	default:
		b.Time = left.Time
	}
	return b, nil
}

// handed is the sum of the budgets session id gave its sub-agents.
func (k *Kernel) handed(ctx context.Context, id string) (Budget, error) {
	rows, err := k.o.DB.QueryContext(ctx, `SELECT narrowing FROM sessions WHERE parent = ?`, id)
	if err != nil {
		return Budget{}, fmt.Errorf("kernel: read session %s's sub-agents: %w", id, err)
	}
	defer rows.Close()
	var sum Budget
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return Budget{}, err
		}
		var n Narrowing
		if err := json.Unmarshal([]byte(s), &n); err != nil {
			return Budget{}, fmt.Errorf("kernel: a sub-agent of %s has an unreadable budget: %w", id, err)
		}
		sum.Turns += n.Budget.Turns
		sum.Tokens += n.Budget.Tokens
		sum.Cost += n.Budget.Cost
	}
	return sum, rows.Err()
}

// limitsOf is the limits a run of info works under: the kernel's,
// tightened by the run's (WithRunLimits) and, for a sub-agent, by its
// budget.
func (k *Kernel) limitsOf(ctx context.Context, info Info) agent.Limits {
	l := limitsFor(ctx, k.o.Limits)
	if info.Narrowing == nil {
		return l
	}
	b := info.Narrowing.Budget
	if b.Turns > 0 && (l.MaxTurns == 0 || b.Turns < l.MaxTurns) {
		l.MaxTurns = b.Turns
	}
	if b.Tokens > 0 && (l.MaxTokens == 0 || b.Tokens < l.MaxTokens) {
		l.MaxTokens = b.Tokens
	}
	if b.Cost > 0 && (l.MaxCost == 0 || b.Cost < l.MaxCost) {
		l.MaxCost = b.Cost
	}
	if b.Time > 0 && (l.MaxTime == 0 || b.Time < l.MaxTime) {
		l.MaxTime = b.Time
	}
	return l
}

// handedFunc is the agent's view of what session id handed on, asked
// before every model call; when it cannot be read the parent stops
// (fail closed: it cannot know what it may still spend).
func (k *Kernel) handedFunc(ctx context.Context, id string) func() agent.Handed {
	return func() agent.Handed {
		h, err := k.handed(context.WithoutCancel(ctx), id)
		if err != nil {
			k.log.ErrorContext(ctx, "read the budgets handed to sub-agents; stopping the session", "session", id, "err", err)
			return agent.Handed{Turns: math.MaxInt32, Tokens: math.MaxInt32, Cost: math.Inf(1)}
		}
		return agent.Handed{Turns: h.Turns, Tokens: h.Tokens, Cost: h.Cost}
	}
}

// refuse audits a refusal against session caller and returns it.
func (k *Kernel) refuse(ctx context.Context, caller string, e *SpawnError) error {
	e.Code = refusalCodes[e.Err]
	k.log.InfoContext(ctx, "sub-agent request refused", "session", caller, "op", e.Op, "code", e.Code, "reason", e.Reason)
	if _, err := k.o.Audit.Append(ctx, audit.Entry{Session: caller, Kind: audit.KindSessionRefused, Actor: "kernel",
		Payload: audit.SessionRefused{Op: e.Op, Code: e.Code, Reason: e.Reason, Target: e.Target, Tool: e.Tool}}); err != nil {
		return fmt.Errorf("kernel: audit session.refused: %w", err)
	}
	return e
}

// spawned is what create needs to make a session a sub-agent.
type spawned struct {
	parent    Info
	root      string
	narrowing *Narrowing
	policy    string // the child's own rules
}

// spawnRecord is the session.spawn entry of child.
func (s *spawned) record() audit.SessionSpawn {
	p := audit.SessionSpawn{Parent: s.parent.ID, Depth: s.parent.Depth + 1, Tools: s.narrowing.Tools,
		Budget: audit.SpawnBudget{Turns: s.narrowing.Budget.Turns, Tokens: s.narrowing.Budget.Tokens, Cost: s.narrowing.Budget.Cost,
			TimeMS: s.narrowing.Budget.Time.Milliseconds()}}
	if s.policy != "" {
		h := sha256.Sum256([]byte(s.policy))
		p.Policy = hex.EncodeToString(h[:])
	}
	return p
}

// Children returns the sub-agents of session id, oldest first.
func (k *Kernel) Children(ctx context.Context, id string) ([]Info, error) {
	return k.queryInfos(ctx, selectInfo+` WHERE parent = ? ORDER BY created_at, id`, id)
}

// Descendant returns session id when it is a descendant of ancestor
// (a child, a grandchild, ...); anything else — the ancestor itself,
// its parent, a sibling, an unrelated or unknown session — is a
// *SpawnError wrapping ErrScope, audited against ancestor.
func (k *Kernel) Descendant(ctx context.Context, op, ancestor, id string) (Info, error) {
	scope := func() error {
		return k.refuse(ctx, ancestor, &SpawnError{Op: op, Err: ErrScope, Target: id,
			Reason: fmt.Sprintf("session %s is not a sub-agent of session %s", id, ancestor)})
	}
	info, err := k.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return Info{}, scope()
	}
	if err != nil {
		return Info{}, err
	}
	for cur, n := info, 0; cur.Parent != "" && n < maxTreeWalk; n++ {
		if cur.Parent == ancestor {
			return info, nil
		}
		if cur, err = k.Get(ctx, cur.Parent); err != nil {
			if errors.Is(err, ErrNotFound) {
				break
			}
			return Info{}, err
		}
	}
	return Info{}, scope()
}

// Transcript returns session id's conversation as its caller may read
// it: only a descendant of caller (Descendant). A caller that reads an
// untrusted sub-agent's words becomes untrusted itself, before it sees
// them (docs/provenance.md).
func (k *Kernel) Transcript(ctx context.Context, caller, id string) (Info, []llm.Message, error) {
	info, err := k.Descendant(ctx, "history", caller, id)
	if err != nil {
		return Info{}, nil, err
	}
	if err := k.inheritUp(ctx, caller, info); err != nil {
		return Info{}, nil, err
	}
	st, err := k.loadState(ctx, id)
	if err != nil {
		return Info{}, nil, err
	}
	return info, st.Agent.Messages, nil
}

// inheritUp marks caller untrusted when the sub-agent whose words it is
// about to read is.
func (k *Kernel) inheritUp(ctx context.Context, caller string, child Info) error {
	if child.Untrusted == "" {
		return nil
	}
	_, err := k.markUntrusted(ctx, caller, audit.SessionUntrusted{Cause: TaintSubagent, Source: "sub-agent " + child.ID})
	return err
}

// RunChild runs sub-agent id (a descendant of caller) with message ("":
// start or resume it) and returns how the run ended; the caller becomes
// untrusted first when the child is. With wait false it returns at once
// and the run goes on in the background (Stop cancels it as any run).
func (k *Kernel) RunChild(ctx context.Context, caller, id, message string, wait bool) (RunResult, error) {
	info, err := k.Descendant(ctx, "send", caller, id)
	if err != nil {
		return RunResult{}, err
	}
	if info.Status == StatusRunning {
		return RunResult{}, fmt.Errorf("%w: %s", ErrBusy, id)
	}
	if info.Status == StatusClosed {
		return RunResult{}, fmt.Errorf("%w: %s", ErrClosed, id)
	}
	if message != "" {
		// What the caller says carries what it has read.
		if src, ok := k.untrusted(ctx, caller); ok {
			if _, err := k.markUntrusted(ctx, id, audit.SessionUntrusted{Cause: TaintParent, Source: "parent " + caller + ": " + src}); err != nil {
				return RunResult{}, err
			}
		}
	}
	if !wait {
		// The child's run is its own: it outlives the call that started
		// it (Kernel.Stop cancels it with every run). It is registered
		// before this returns, so WaitChild finds it.
		started := make(chan struct{})
		ended := make(chan error, 1)
		k.bg.Add(1)
		go func() {
			defer k.bg.Done()
			_, err := k.runMessage(context.WithoutCancel(ctx), id, message, nil, func() { close(started) })
			ended <- err
		}()
		select {
		case <-started:
		case err := <-ended:
			select {
			case <-started: // it ran, and has ended already
			default:
				if err == nil {
					err = fmt.Errorf("kernel: sub-agent %s did not start", id)
				}
				return RunResult{}, err
			}
		}
		return RunResult{Session: id, Status: StatusRunning}, nil
	}
	res, err := k.RunMessage(ctx, id, message, nil)
	if err != nil {
		return res, err
	}
	after, err := k.Get(ctx, id)
	if err != nil {
		return res, err
	}
	return res, k.inheritUp(ctx, caller, after)
}

// mergeAfterRun offers sub-agent id's changes for merge after a run
// that ended paused (not by a fault of fluffy's, not cancelled); nil for
// a top-level session or nothing to merge. A failure is logged: the
// changes stay in the sub-agent's change set.
func (k *Kernel) mergeAfterRun(ctx context.Context, id string, status Status) *Merge {
	if status != StatusPaused || ctx.Err() != nil {
		return nil
	}
	info, err := k.Get(ctx, id)
	if err != nil || info.Parent == "" {
		return nil
	}
	m, err := k.offerMerge(ctx, info)
	if err != nil {
		k.log.ErrorContext(ctx, "a sub-agent's changes were not offered for merge", "session", id, "err", err)
	}
	return m
}

// WaitChild waits until sub-agent id's current run (if any) ends, or
// ctx does.
func (k *Kernel) WaitChild(ctx context.Context, id string) error {
	k.mu.Lock()
	r := k.running[id]
	k.mu.Unlock()
	if r == nil {
		return nil
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// untrusted reports session id's untrusted mark; an unreadable one
// counts as untrusted (fail closed).
func (k *Kernel) untrusted(ctx context.Context, id string) (string, bool) {
	info, err := k.Get(ctx, id)
	if err != nil {
		return "unknown (" + err.Error() + ")", true
	}
	return info.Untrusted, info.Untrusted != ""
}

// readNarrowing decodes a session row's narrowing column.
func readNarrowing(s string) (*Narrowing, error) {
	if s == "" {
		return nil, nil
	}
	var n Narrowing
	if err := json.Unmarshal([]byte(s), &n); err != nil {
		return nil, fmt.Errorf("kernel: a sub-agent's narrowing is unreadable: %w", err)
	}
	return &n, nil
}

// insertTree stores child's place in its tree within the transaction
// that creates it.
func insertTree(ctx context.Context, tx *sql.Tx, id string, s *spawned) error {
	b, err := json.Marshal(s.narrowing)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE sessions SET parent = ?, root = ?, depth = ?, narrowing = ?, untrusted = ? WHERE id = ?`,
		s.parent.ID, s.root, s.parent.Depth+1, string(b), inheritedTaint(s.parent), id)
	return err
}

// inheritedTaint is a child's untrusted mark at birth: its parent's,
// never cleared.
func inheritedTaint(parent Info) string {
	if parent.Untrusted == "" {
		return ""
	}
	return "parent " + parent.ID + ": " + parent.Untrusted
}

// closeChildren closes session id's sub-agents, deepest first, each
// cancelled first when it runs, their change sets discarded.
func (k *Kernel) closeChildren(ctx context.Context, id string) error {
	kids, err := k.Children(ctx, id)
	if err != nil {
		return err
	}
	for _, c := range kids {
		if c.Status == StatusClosed {
			continue
		}
		if k.Cancel(c.ID) {
			if err := k.WaitChild(ctx, c.ID); err != nil {
				return err
			}
		}
		if _, err := k.Close(ctx, CloseParams{ID: c.ID}); err != nil && !errors.Is(err, ErrClosed) {
			return fmt.Errorf("kernel: close sub-agent %s: %w", c.ID, err)
		}
	}
	return nil
}
