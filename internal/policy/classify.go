package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Classifier judges natural-language rules ("messages to people not in
// USER.md need approval") against one atom of an operation. The
// model-backed implementation lives with the kernel; tests use a fake.
type Classifier interface {
	// Classify reports whether op falls under the rule's instruction. An
	// error means "no answer": the engine then fails closed (the rule
	// matches when its effect is approve or block, not when it is allow)
	// and does not cache the result. op is shared with the engine: the
	// classifier must neither modify it nor keep it after returning.
	Classify(ctx context.Context, instruction string, op *CELOp) (bool, error)
}

// ErrNoClassifier is the error of a classify rule when the engine has no
// classifier.
var ErrNoClassifier = errors.New("no classifier configured")

// classCache caches classifier answers per session, by (rule id,
// operation signature). Each session keeps at most maxClassPerSession
// answers; when full, the session's cache is emptied (simple, bounded).
type classCache struct {
	mu       sync.Mutex // guards sessions
	sessions map[string]map[string]bool
}

const maxClassPerSession = 4096

func newClassCache() *classCache { return &classCache{sessions: map[string]map[string]bool{}} }

func (c *classCache) get(session, key string) (bool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.sessions[session][key]
	return v, ok
}

func (c *classCache) put(session, key string, v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.sessions[session]
	if m == nil || len(m) >= maxClassPerSession {
		m = map[string]bool{}
		c.sessions[session] = m
	}
	m[key] = v
}

// ForgetSession drops the classifier answers cached for a session.
func (e *Engine) ForgetSession(session string) {
	e.classes.mu.Lock()
	defer e.classes.mu.Unlock()
	delete(e.classes.sessions, session)
}

// signature identifies what a classifier saw: every field of the view.
func signature(ruleID string, c *CELOp) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%t\x00%s\x00%d\x00%d\x00", ruleID, c.Tool, c.Action, c.Path, c.InWorkspace, c.Host, c.Port, c.Size)
	fmt.Fprintf(h, "%q\x00%q\x00%q\x00%t\x00%t\x00%s\x00%s", c.Argv, c.Env, c.Tags, c.Wrapper, c.Dynamic, c.Session.Mode, c.Session.State)
	fmt.Fprintf(h, "\x00%t\x00%t", c.ExecCapable, c.AgentWritten)
	return hex.EncodeToString(h.Sum(nil))
}

func (e *Engine) classify(ctx context.Context, r *rule, ev *evalCtx) (bool, error) {
	if e.opts.Classifier == nil {
		return false, ErrNoClassifier
	}
	view := ev.celOp()
	key := signature(r.id, view)
	if v, ok := e.classes.get(ev.op.Session.ID, key); ok {
		return v, nil
	}
	v, err := e.opts.Classifier.Classify(ctx, strings.TrimSpace(r.classify), view)
	if err != nil {
		return false, fmt.Errorf("classify: %w", err)
	}
	e.classes.put(ev.op.Session.ID, key, v)
	return v, nil
}
