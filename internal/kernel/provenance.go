package kernel

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/fluffy-agent/fluffy/internal/audit"
)

// Causes of a session's taint, as session.untrusted records them.
const (
	// TaintInbound: a message no principal wrote was delivered to the
	// session (MarkUntrusted).
	TaintInbound = "inbound"
	// TaintTool: the session read the result of a tool whose output is
	// untrusted (Provenance.MarkUntrusted).
	TaintTool = "tool"
	// TaintParent: a sub-agent spawned by an untrusted session inherits
	// its mark at birth.
	TaintParent = "parent"
	// TaintSubagent: the session read the words of an untrusted
	// sub-agent (its answer, its transcript).
	TaintSubagent = "subagent"
)

// MarkUntrusted records that session id has read untrusted data: the
// assistant daemon calls it before it runs a session on a message no
// principal wrote (channel.Inbound.Untrusted), with the message's label
// as source ("webhook github push"). From then on every operation of the
// session carries operation.Session.Untrusted, so policy sees
// op.session.untrusted (docs/provenance.md).
//
// The first mark is stored in fluffy.db (it survives a restart and a
// resume) and audited as session.untrusted, durable before MarkUntrusted
// returns; a session is never cleared, and later marks change nothing.
// It reports whether this call marked the session. ErrNotFound: no such
// session. Any other error means the mark may not be stored: the daemon
// must not run the session on the message then.
func (k *Kernel) MarkUntrusted(ctx context.Context, id, source string) (bool, error) {
	return k.markUntrusted(ctx, id, audit.SessionUntrusted{Cause: TaintInbound, Source: source})
}

func (k *Kernel) markUntrusted(ctx context.Context, id string, t audit.SessionUntrusted) (bool, error) {
	if t.Source == "" {
		t.Source = t.Cause
	}
	// One mark at a time, audited before it is stored: a stored taint
	// always has its entry, and a failure leaves the session to be
	// marked (and audited) again by the next attempt.
	k.markMu.Lock()
	defer k.markMu.Unlock()
	var cur string
	err := k.o.DB.QueryRowContext(ctx, `SELECT untrusted FROM sessions WHERE id = ?`, id).Scan(&cur)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, fmt.Errorf("%w: %s", ErrNotFound, id)
	case err != nil:
		return false, fmt.Errorf("kernel: mark session %s untrusted: %w", id, err)
	case cur != "":
		return false, nil
	}
	if _, err := k.o.Audit.Append(ctx, audit.Entry{Session: id, Kind: audit.KindSessionUntrusted, Actor: "kernel", Payload: t}); err != nil {
		return false, fmt.Errorf("kernel: audit session.untrusted: %w", err)
	}
	if err := k.o.Audit.Flush(ctx); err != nil {
		return false, fmt.Errorf("kernel: audit session.untrusted: %w", err)
	}
	if _, err := k.o.DB.ExecContext(ctx, `UPDATE sessions SET untrusted = ? WHERE id = ? AND untrusted = ''`, t.Source, id); err != nil {
		return false, fmt.Errorf("kernel: mark session %s untrusted: %w", id, err)
	}
	// A run registers its Provenance before it reads the stored mark
	// (runProvenance): it either read this mark or is found here.
	k.mu.Lock()
	if r := k.running[id]; r != nil && r.prov != nil {
		r.prov.set(t.Source)
	}
	// An external session's next call reads the mark with a new router.
	delete(k.external, id)
	k.mu.Unlock()
	k.log.InfoContext(ctx, "session marked untrusted", "session", id, "cause", t.Cause, "source", t.Source)
	return true, nil
}

// Provenance is a running session's record of having read untrusted
// data, as its tool router consults it at every call (Env.Provenance).
// Safe for concurrent use.
type Provenance struct {
	k  *Kernel
	id string

	mu     sync.Mutex // guards source
	source string     // what first made the session untrusted; "" clean
}

// Untrusted reports whether the session has read untrusted data, and
// what first made it so.
func (p *Provenance) Untrusted() (source string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.source, p.source != ""
}

// MarkUntrusted records that the session read the result of call, a
// call of tool, whose output is untrusted; as Kernel.MarkUntrusted, it
// is stored and audited the first time only. An error means the mark
// could not be stored or audited: the caller must not use the result.
func (p *Provenance) MarkUntrusted(ctx context.Context, tool, call string) error {
	if p.k == nil {
		return errors.New("kernel: provenance of no session")
	}
	_, err := p.k.markUntrusted(ctx, p.id, audit.SessionUntrusted{Cause: TaintTool, Source: "tool " + tool, Tool: tool, Call: call})
	if err == nil {
		p.set("tool " + tool) // a no-op when already marked
	}
	return err
}

func (p *Provenance) set(source string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.source == "" {
		p.source = source
	}
}

// runProvenance makes the Provenance of session id's run: registered
// with the run first, then read from fluffy.db, so a mark made in
// between is seen either way.
func (k *Kernel) runProvenance(ctx context.Context, id string) (*Provenance, error) {
	p := &Provenance{k: k, id: id}
	k.mu.Lock()
	if r := k.running[id]; r != nil {
		r.prov = p
	}
	k.mu.Unlock()
	var source string
	if err := k.o.DB.QueryRowContext(ctx, `SELECT untrusted FROM sessions WHERE id = ?`, id).Scan(&source); err != nil {
		return nil, fmt.Errorf("kernel: read session %s's provenance: %w", id, err)
	}
	if source != "" {
		p.set(source)
	}
	return p, nil
}
