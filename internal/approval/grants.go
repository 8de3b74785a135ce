package approval

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/policy/shell"
)

// Issuer mints capability tokens; *policy.Tokens satisfies it.
type Issuer interface {
	Issue(s policy.Scope, ttl time.Duration, uses int) (string, error)
}

// ErrNotExact is returned when an operation cannot be covered by tokens
// that match it exactly: a resource holding a pattern character (* ? or
// an argv element "..."), a command that is not known statically, or input
// files that could not be bound (Operation.Unbound). Such a step is simply
// asked again when it runs.
var ErrNotExact = errors.New("approval: the operation cannot be scoped exactly")

// GrantOptions configures Grants.
type GrantOptions struct {
	// Issuer mints the tokens (required).
	Issuer Issuer
	// TTL is how long a token lives (config approval.token_ttl); default
	// 30 minutes. Tokens also end with their session: the kernel ends a
	// closed or removed session here and in the policy Tokens.
	TTL time.Duration
	// Uses is how many times a step approved once may run (config
	// approval.token_uses); default 1.
	Uses int
	// SessionUses is how many times a step approved "for session" may
	// run on its token; default 1000.
	SessionUses int
	// MaxPerSession bounds the tokens held for one session; the oldest
	// are dropped first. Default 256.
	MaxPerSession int
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Grants turns the approved steps of a request into capability tokens
// scoped to each step's exact operation, and holds them per session so
// the kernel can present them with the session's next operations. The
// policy engine, not Grants, decides whether a token covers an operation:
// an operation with another path, argv or host is not covered and is
// asked again.
type Grants struct {
	opts GrantOptions

	mu   sync.Mutex // guards held
	held map[string][]heldToken
}

type heldToken struct {
	tok string
	exp time.Time
	key string // scopeKey of the token's scope
}

// scopeKey identifies an exact scope, to pick the tokens worth presenting.
// The policy digest is left out: a token approved under another policy is
// presented, and the engine refuses it saying why (the policy changed).
func scopeKey(s policy.Scope) string {
	s.Policy = ""
	b, _ := json.Marshal(s)
	return string(b)
}

// NewGrants checks opts and returns a Grants.
func NewGrants(opts GrantOptions) (*Grants, error) {
	if opts.Issuer == nil {
		return nil, errors.New("approval: Grants needs an Issuer")
	}
	if opts.TTL <= 0 {
		opts.TTL = 30 * time.Minute
	}
	if opts.Uses <= 0 {
		opts.Uses = 1
	}
	if opts.SessionUses <= 0 {
		opts.SessionUses = 1000
	}
	if opts.MaxPerSession <= 0 {
		opts.MaxPerSession = 256
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Grants{opts: opts, held: map[string][]heldToken{}}, nil
}

// Scopes returns the token scopes that cover op exactly: one per atom the
// policy engine decides (each path, host and command, and each file a
// command's redirection writes), with the atom's own action, each bound to
// op's whole signature. It fails with ErrNotExact when a resource would be
// read as a pattern or op's input files could not all be bound.
func Scopes(op operation.Operation) ([]policy.Scope, error) {
	if op.Session.ID == "" {
		return nil, fmt.Errorf("%w: no session", ErrNotExact)
	}
	if strings.ContainsAny(op.Tool, "*?") || op.Tool == "" {
		return nil, fmt.Errorf("%w: tool %q", ErrNotExact, op.Tool)
	}
	if op.Unbound != "" {
		return nil, fmt.Errorf("%w: %s", ErrNotExact, op.Unbound)
	}
	// Every token binds the whole operation (its signature), not only
	// the atom it names: the same argv with other environment, directory,
	// redirections, arguments or file content is asked again.
	base := policy.Scope{Session: op.Session.ID, Tool: op.Tool, Action: op.Action, Op: op.Signature()}
	var out []policy.Scope
	addPath := func(action operation.Action, p string) error {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsAny(p, "*?\x00") {
			return fmt.Errorf("%w: path %q", ErrNotExact, p)
		}
		s := base
		s.Action, s.Path = action, p
		out = append(out, s)
		return nil
	}
	for _, p := range op.Paths {
		if err := addPath(op.Action, p.Abs); err != nil {
			return nil, err
		}
	}
	for _, h := range op.Hosts {
		if h.Name == "" || strings.ContainsAny(h.Name, "*?:\x00") {
			return nil, fmt.Errorf("%w: host %q", ErrNotExact, h.Name)
		}
		s := base
		s.Host = h.Name
		if h.Port != 0 {
			s.Host += ":" + strconv.Itoa(h.Port)
		}
		out = append(out, s)
	}
	cmds := op.Commands
	if len(cmds) == 0 {
		switch {
		case op.CommandLine != "":
			var err error
			if cmds, err = shell.Parse(op.CommandLine); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrNotExact, err)
			}
		case len(op.Argv) > 0:
			cmds = shell.Expand(op.Argv)
		}
	}
	ws := op.Session.Workspace
	for _, c := range cmds {
		if c.Dynamic || len(c.Argv) == 0 {
			return nil, fmt.Errorf("%w: command %q is not known statically", ErrNotExact, c.Argv)
		}
		for _, a := range c.Argv {
			if a == "..." || strings.ContainsAny(a, "*?\x00") {
				return nil, fmt.Errorf("%w: argument %q", ErrNotExact, a)
			}
		}
		s := base
		s.Argv = append([]string(nil), c.Argv...)
		out = append(out, s)
		for _, w := range c.Writes {
			if !filepath.IsAbs(w) {
				if ws == "" {
					return nil, fmt.Errorf("%w: relative redirection %q without a workspace", ErrNotExact, w)
				}
				w = filepath.Join(ws, w)
			} else {
				w = filepath.Clean(w)
			}
			if err := addPath(operation.Write, w); err != nil {
				return nil, err
			}
		}
	}
	if len(out) == 0 {
		out = append(out, base)
	}
	return out, nil
}

// Mint issues tokens for every step of req a person approved (steps the
// policy already allowed need none), each bound to policyDigest, the
// Digest of the policy engine that will check them: under other rules
// they do not count. It returns the tokens by step number and keeps them
// for Present. A step that cannot be scoped exactly gets no token (it
// will be asked again when it runs) and is listed in skipped; an Issuer
// failure is an error and nothing is kept.
func (g *Grants) Mint(req Request, policyDigest string) (tokens map[int][]string, skipped map[int]error, err error) {
	tokens, skipped = map[int][]string{}, map[int]error{}
	var minted []heldToken
	exp := g.opts.Now().Add(g.opts.TTL)
	for _, it := range req.Items {
		if it.Eval.Effect != EffectApprove || it.Decision.Verdict != Approved {
			continue
		}
		op := it.Op
		if op.Session.ID == "" {
			op.Session.ID = req.Session
		}
		if op.Session.ID != req.Session {
			skipped[it.N] = fmt.Errorf("%w: step names session %q, the request is for %q", ErrNotExact, op.Session.ID, req.Session)
			continue
		}
		scopes, serr := Scopes(op)
		if serr != nil {
			skipped[it.N] = serr
			continue
		}
		uses := g.opts.Uses
		if it.Decision.Scope == ScopeSession {
			uses = g.opts.SessionUses
		}
		for _, s := range scopes {
			s.Policy = policyDigest
			tok, ierr := g.opts.Issuer.Issue(s, g.opts.TTL, uses)
			if ierr != nil {
				return nil, nil, fmt.Errorf("approval: token for step %d: %w", it.N, ierr)
			}
			tokens[it.N] = append(tokens[it.N], tok)
			minted = append(minted, heldToken{tok: tok, exp: exp, key: scopeKey(s)})
		}
	}
	if len(minted) > 0 {
		g.mu.Lock()
		held := append(g.pruneLocked(req.Session), minted...)
		if n := len(held) - g.opts.MaxPerSession; n > 0 {
			held = held[n:]
		}
		g.held[req.Session] = held
		g.mu.Unlock()
	}
	return tokens, skipped, nil
}

// Present adds to op.Tokens the session's live tokens minted for one of
// op's exact scopes, for the policy engine to check (it alone decides
// whether they cover op). Tokens for other operations are not presented,
// so a Decide costs the same however many approvals a session holds.
func (g *Grants) Present(op *operation.Operation) {
	scopes, err := Scopes(*op)
	if err != nil {
		return // no token can cover it exactly: it is asked
	}
	want := make(map[string]bool, len(scopes))
	for _, s := range scopes {
		want[scopeKey(s)] = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, h := range g.pruneLocked(op.Session.ID) {
		if want[h.key] {
			op.Tokens = append(op.Tokens, h.tok)
		}
	}
}

// EndSession drops the session's tokens (revoke them in the policy
// Tokens too).
func (g *Grants) EndSession(session string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.held, session)
}

// pruneLocked drops expired tokens of session and returns the rest.
func (g *Grants) pruneLocked(session string) []heldToken {
	now := g.opts.Now()
	held := g.held[session]
	keep := held[:0]
	for _, h := range held {
		if now.Before(h.exp) {
			keep = append(keep, h)
		}
	}
	if len(keep) == 0 {
		delete(g.held, session)
		return nil
	}
	g.held[session] = keep
	return keep
}
