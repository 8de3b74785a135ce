package kernel

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/store"
)

// Session change sets: list, diff, apply or discard all or some files of
// a session's change set, with the session named or the latest one of a
// workspace. The kernel serves these over IPC (changeset.*); when no
// kernel runs, fluffy changeset uses SessionChanges directly on the data
// directory. Apply and discard take the change set's file lock, so the
// two never interleave, and are refused while the session runs (a sandbox
// may have the change set mounted).

// IPC methods on session change sets (ChangesParams → ChangesResult).
const (
	MethodChangesList    = "changeset.list"
	MethodChangesDiff    = "changeset.diff"
	MethodChangesApply   = "changeset.apply"
	MethodChangesDiscard = "changeset.discard"
)

// ChangesParams select a session's change set and paths in it.
type ChangesParams struct {
	// Session is the session id; empty: the latest open session of
	// Workspace (or, when none is open, its latest session).
	Session   string `json:"session,omitempty"`
	Workspace string `json:"workspace,omitempty"`
	// Paths select files (a directory selects everything below); none:
	// all.
	Paths []string `json:"paths,omitempty"`
	// Actor is who asked (recorded in the audit log); default "user".
	Actor string `json:"actor,omitempty"`
}

// ChangesResult is what a change set operation did or shows.
type ChangesResult struct {
	Session Info               `json:"session"`
	Changes []changeset.Change `json:"changes"`
	Diff    string             `json:"diff,omitempty"`
	// Widening says what the changes widen of the workspace's skills
	// (SkillReview); set by Diff, "" when nothing widens.
	Widening string `json:"widening,omitempty"`
	// Conflicts are set when apply refused: nothing was written. Each
	// has its three versions rendered (changeset.Explain).
	Conflicts []ConflictView `json:"conflicts,omitempty"`
}

// Refused returns the apply's conflicts as a *changeset.ConflictError,
// or nil when there were none.
func (r ChangesResult) Refused() error {
	if len(r.Conflicts) == 0 {
		return nil
	}
	ce := &changeset.ConflictError{}
	for _, c := range r.Conflicts {
		ce.Conflicts = append(ce.Conflicts, c.Conflict)
		ce.Versions = append(ce.Versions, c.Explain)
	}
	return ce
}

// ConflictView is a refused path with its three versions rendered.
type ConflictView struct {
	changeset.Conflict
	Explain string `json:"explain"`
}

// SessionChanges works on sessions' change sets in a data directory's
// fluffy.db. DB and Audit are required. Reserve, when set, keeps the
// session from running while its change set is applied or discarded (the
// kernel's sessions): it fails with ErrBusy when the session runs, and
// the returned func ends the reservation. Without it no session is
// considered running (no kernel runs).
type SessionChanges struct {
	DB      *store.DB
	Audit   AuditLog
	Reserve func(id string) (func(), error)
	// OwnFiles names fluffy's own files for a workspace; Apply never
	// writes them (changeset.ChangeSet.Protect).
	OwnFiles OwnFiles
	// Hold, when set, keeps every sandbox off the change set's upper
	// directory while it is applied or discarded (Options.HoldUpper).
	Hold func(ctx context.Context, upper string) (release func(), err error)
}

// Resolve returns the session p names (or the workspace's latest).
func (s SessionChanges) Resolve(ctx context.Context, p ChangesParams) (Info, error) {
	if p.Session != "" {
		i, err := scanInfo(s.DB.QueryRowContext(ctx, selectInfo+` WHERE id = ?`, p.Session))
		if errors.Is(err, sql.ErrNoRows) {
			return Info{}, fmt.Errorf("%w: %s", ErrNotFound, p.Session)
		}
		return i, err
	}
	if p.Workspace == "" {
		return Info{}, errors.New("kernel: name a session or a workspace")
	}
	// Sessions record the workspace as the client gave it; match it with
	// its symlinks resolved too.
	resolved := p.Workspace
	if r, err := filepath.EvalSymlinks(p.Workspace); err == nil {
		resolved = r
	}
	i, err := scanInfo(s.DB.QueryRowContext(ctx, selectInfo+` WHERE workspace IN (?, ?) ORDER BY status = 'closed', created_at DESC LIMIT 1`, p.Workspace, resolved))
	if errors.Is(err, sql.ErrNoRows) {
		return Info{}, fmt.Errorf("%w: no session has worked on %s", ErrNotFound, p.Workspace)
	}
	return i, err
}

// open resolves the session and opens its change set; with write, the
// session is reserved, and its change set held (Hold), until release is
// called.
func (s SessionChanges) open(ctx context.Context, p ChangesParams, write bool) (_ Info, _ *changeset.ChangeSet, release func(), err error) {
	release = func() {}
	info, err := s.Resolve(ctx, p)
	if err != nil {
		return Info{}, nil, release, err
	}
	if write {
		if info.Status == StatusClosed {
			return info, nil, release, fmt.Errorf("%w: %s", ErrClosed, info.ID)
		}
		if s.Reserve != nil {
			if release, err = s.Reserve(info.ID); err != nil {
				return info, nil, func() {}, err
			}
		}
	}
	cs, err := openChangeSet(info, s.OwnFiles)
	if err != nil {
		return info, nil, release, fmt.Errorf("kernel: open the change set of %s: %w", info.ID, err)
	}
	if write && s.Hold != nil {
		unhold, err := s.Hold(ctx, cs.UpperDir())
		if err != nil {
			return info, nil, release, fmt.Errorf("kernel: the change set of %s: %w", info.ID, err)
		}
		reserved := release
		release = func() {
			unhold()
			reserved()
		}
	}
	// Keep base copies of what sandboxes changed while the real files are
	// still the base, so a later conflict can show three versions.
	if _, err := cs.KeepBases(ctx); err != nil {
		return info, nil, release, err
	}
	return info, cs, release, nil
}

// List returns the changes of the selected paths.
func (s SessionChanges) List(ctx context.Context, p ChangesParams) (ChangesResult, error) {
	info, cs, _, err := s.open(ctx, p, false)
	if err != nil {
		return ChangesResult{}, err
	}
	ch, err := cs.Changes(ctx, p.Paths...)
	return ChangesResult{Session: info, Changes: nonNil(ch)}, err
}

// Diff returns the changes of the selected paths and their diff.
func (s SessionChanges) Diff(ctx context.Context, p ChangesParams) (ChangesResult, error) {
	r, err := s.List(ctx, p)
	if err != nil {
		return r, err
	}
	cs, err := changeset.Open(r.Session.ChangeSet, r.Session.Workspace)
	if err != nil {
		return r, err
	}
	if r.Diff, err = cs.Diff(ctx, p.Paths...); err != nil {
		return r, err
	}
	r.Widening = SkillReview(cs, r.Changes)
	return r, nil
}

// Apply applies the selected paths (all when none), all or nothing. When
// a real file changed since the change set began, nothing is written and
// the result's Conflicts show each one's three versions (the error is nil:
// a conflict is an answer, not a failure).
func (s SessionChanges) Apply(ctx context.Context, p ChangesParams) (ChangesResult, error) {
	info, cs, release, err := s.open(ctx, p, true)
	defer release()
	if err != nil {
		return ChangesResult{Session: info}, err
	}
	if info.Parent != "" {
		return ChangesResult{Session: info}, &SubagentApplyError{Session: info.ID, Parent: info.Parent}
	}
	res := ChangesResult{Session: info}
	applied, err := cs.Apply(ctx, p.Paths...)
	var ce *changeset.ConflictError
	if errors.As(err, &ce) {
		for i, c := range ce.Conflicts {
			res.Conflicts = append(res.Conflicts, ConflictView{Conflict: c, Explain: ce.Versions[i]})
		}
		return res, nil
	}
	if err != nil {
		return res, err
	}
	res.Changes = nonNil(applied)
	if _, err := s.Audit.Append(ctx, audit.Entry{Session: info.ID, Kind: audit.KindChangesetApply, Actor: actor(p.Actor), Payload: audit.ChangesetApply{
		Paths: changedPaths(applied), Selected: p.Paths, Workspace: info.Workspace,
	}}); err != nil {
		return res, fmt.Errorf("kernel: audit changeset.apply: %w", err)
	}
	return res, s.Audit.Flush(ctx)
}

// Discard drops the selected paths' changes (all when none).
func (s SessionChanges) Discard(ctx context.Context, p ChangesParams) (ChangesResult, error) {
	info, cs, release, err := s.open(ctx, p, true)
	defer release()
	if err != nil {
		return ChangesResult{Session: info}, err
	}
	ch, err := cs.Changes(ctx, p.Paths...)
	if err != nil {
		return ChangesResult{Session: info}, err
	}
	if err := cs.Discard(ctx, p.Paths...); err != nil {
		return ChangesResult{Session: info}, err
	}
	res := ChangesResult{Session: info, Changes: nonNil(ch)}
	if _, err := s.Audit.Append(ctx, audit.Entry{Session: info.ID, Kind: audit.KindChangesetDiscard, Actor: actor(p.Actor), Payload: audit.ChangesetDiscard{
		Paths: changedPaths(ch), Selected: p.Paths,
	}}); err != nil {
		return res, fmt.Errorf("kernel: audit changeset.discard: %w", err)
	}
	return res, s.Audit.Flush(ctx)
}

func actor(a string) string {
	if a == "" {
		return "user"
	}
	return a
}

func changedPaths(ch []changeset.Change) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, c := range ch {
		if !seen[c.Path] {
			seen[c.Path] = true
			out = append(out, c.Path)
		}
	}
	sort.Strings(out)
	return out
}

func nonNil(ch []changeset.Change) []changeset.Change {
	if ch == nil {
		return []changeset.Change{}
	}
	return ch
}

// changes is the kernel's SessionChanges: a session running here is
// refused apply and discard, and none starts while they work.
func (k *Kernel) changes() SessionChanges {
	return SessionChanges{DB: k.o.DB, Audit: k.o.Audit, Reserve: k.reserveChanges, OwnFiles: k.o.OwnFiles, Hold: k.o.HoldUpper}
}

// holdUpper keeps every sandbox off cs's upper directory while the
// kernel writes it (Options.HoldUpper); call the returned func after.
func (k *Kernel) holdUpper(ctx context.Context, cs *changeset.ChangeSet) (func(), error) {
	if k.o.HoldUpper == nil {
		return func() {}, nil
	}
	return k.o.HoldUpper(ctx, cs.UpperDir())
}

// OwnFiles returns, for a workspace, the predicate that names fluffy's
// own files (its data directory, keys, configuration, policy, binaries)
// by absolute path: the policy's protected paths.
type OwnFiles func(workspace string) func(abs string) bool

// openChangeSet opens a session's change set with fluffy's own files
// protected from Apply.
func openChangeSet(info Info, own OwnFiles) (*changeset.ChangeSet, error) {
	cs, err := changeset.Open(info.ChangeSet, info.Workspace)
	if err != nil {
		return nil, err
	}
	if own != nil {
		cs.Protect(own(info.Workspace))
	}
	return cs, nil
}

// reserveChanges marks the session as busy (Run refuses it with ErrBusy)
// until the returned func is called; it fails when the session runs.
func (k *Kernel) reserveChanges(id string) (func(), error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, busy := k.running[id]; busy {
		return nil, fmt.Errorf("%w: %s (its sandboxes may have the change set mounted; wait for the run to stop, or cancel it)", ErrBusy, id)
	}
	r := &run{cancel: func() {}, done: make(chan struct{})}
	k.running[id] = r
	// The change set or the TDD machine changes under an external
	// session's router: its next call builds a new one.
	delete(k.external, id)
	return func() {
		k.mu.Lock()
		if k.running[id] == r {
			delete(k.running, id)
		}
		k.mu.Unlock()
		close(r.done)
	}, nil
}

// registerChanges adds the changeset.* IPC methods to mux.
func (k *Kernel) registerChanges(mux *ipc.Mux) error {
	for name, h := range k.changesHandlers() {
		if err := mux.Handle(name, h); err != nil {
			return err
		}
	}
	return nil
}

// changesHandlers are the changeset.* IPC methods.
func (k *Kernel) changesHandlers() map[string]ipc.Handler {
	wrap := func(fn func(SessionChanges, context.Context, ChangesParams) (ChangesResult, error)) ipc.Handler {
		return func(ctx context.Context, r *ipc.Request) (any, error) {
			var p ChangesParams
			if err := r.Bind(&p); err != nil {
				return nil, err
			}
			res, err := fn(k.changes(), ctx, p)
			return res, wireError(err)
		}
	}
	return map[string]ipc.Handler{
		MethodChangesList:    wrap(SessionChanges.List),
		MethodChangesDiff:    wrap(SessionChanges.Diff),
		MethodChangesApply:   wrap(SessionChanges.Apply),
		MethodChangesDiscard: wrap(SessionChanges.Discard),
	}
}

// Changes is the kernel's SessionChanges, for a client in the kernel's
// own process (the web console): apply and discard are refused while the
// session runs, as over IPC.
func (k *Kernel) Changes() SessionChanges { return k.changes() }
