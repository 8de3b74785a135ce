package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// racyWindow is how long after a file's last change its stamp is not
// trusted: file times tick coarsely (a few ms), so two writes of the same
// size within one tick look alike. A file changed this recently is read
// again at each call until it is older.
const racyWindow = time.Second

// livePolicy is the policy in force for each workspace, THE source of
// decisions in the kernel: the approval broker's pre-evaluation of plan
// steps and every session's policy gate ask it for the engine at each
// call, so both decide with the same engine, rules and classifier cache
// (docs/policy.md, "Live policy").
//
// A workspace's engine is compiled once and kept while its files (the
// user's and the project's policy.yaml, the *.star files beside them) do
// not change. The check at each call is one non-blocking read of an
// inotify descriptor watching those files and their directories (the
// kernel queues an event before the write that causes it returns, so an
// edit is seen by the first call after it); without inotify, it stats
// the files instead. Only a change reads the files again, and only
// changed content compiles. An accepted change is recorded as
// policy.change before the new rules decide anything; if that record
// cannot be written the call fails closed and the change is tried again
// at the next call. An invalid change keeps the old rules and is logged
// once, with the file and line of each error; each session's gate tells
// its person once too (sessionPolicy).
type livePolicy struct {
	u          *userenv.Env
	log        *slog.Logger
	classifier policy.Classifier // nil: classify rules fail closed
	tokens     *policy.Tokens    // nil: presented tokens are ignored
	audit      approval.Appender // where policy.change goes; required
	watch      *watcher          // nil: stamps are compared instead

	mu sync.Mutex // guards ws
	ws map[string]*wsPolicy
}

// Close releases the watcher.
func (p *livePolicy) Close() error {
	if p.watch == nil {
		return nil
	}
	return p.watch.Close()
}

// wsPolicy is one workspace's policy.
type wsPolicy struct {
	ws  string
	cur atomic.Pointer[compiledPolicy]

	mu       sync.Mutex // serializes reloads; guards the fields below
	opts     policy.Options
	files    policy.Files
	rejected map[string]string // hashes of the last invalid files, reported once

	// rejection is the invalid edit the files hold now while older
	// rules decide (nil when the files are the rules in force).
	rejection atomic.Pointer[rejection]
	rejects   uint64 // rejections so far, numbering them; guarded by mu
}

// rejection is an edit of the policy files that did not load: the n-th
// of its workspace, and why.
type rejection struct {
	n   uint64
	err error
}

// compiledPolicy is an engine and what it was compiled from.
type compiledPolicy struct {
	engine *policy.Engine
	hashes map[string]string // file → content hash ("absent")
	// gen is the watcher's generation the files were read at; watched
	// says the watcher covers them (else stamps decide).
	gen     uint64
	watched bool
	stamps  map[string]fileStamp // those files and the directories holding them
	readAt  time.Time
}

// fileStamp is what a stat says of a file: any change of content changes
// it, except within one tick of the file clock (see racyWindow).
type fileStamp struct {
	exists       bool
	size, ino    int64
	mtime, ctime int64 // ns
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	s := fileStamp{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = int64(st.Ino)
		s.ctime = st.Ctim.Nano()
	}
	return s
}

// ErrPolicyChangeUnrecorded is the error of a policy change that could not
// be recorded in the audit log: the new rules are not applied, and the
// gate refuses until the record can be written.
var ErrPolicyChangeUnrecorded = errors.New("the policy changed and the change could not be recorded in the audit log")

// engine returns the engine in force for workspace ws ("" for a step of no
// workspace: the kernel's working directory's).
func (p *livePolicy) engine(ctx context.Context, ws string) (*policy.Engine, error) {
	w, err := p.workspace(ws)
	if err != nil {
		return nil, err
	}
	if c := w.cur.Load(); c != nil && p.fresh(c) {
		return c.engine, nil
	}
	return p.reload(ctx, w)
}

// fresh reports whether nothing c was compiled from may have changed.
func (p *livePolicy) fresh(c *compiledPolicy) bool {
	if c.watched {
		return p.watch.generation() == c.gen
	}
	return c.fresh()
}

// workspace returns ws's entry, computing its engine options once: the
// configuration's default effect and fluffy's own files for ws.
func (p *livePolicy) workspace(ws string) (*wsPolicy, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w, ok := p.ws[ws]; ok {
		return w, nil
	}
	u := p.u
	if ws != "" {
		u = u.WithCwd(ws)
	}
	opts, err := u.PolicyOptions()
	if err != nil {
		return nil, err
	}
	opts.Classifier, opts.Tokens = p.classifier, p.tokens
	w := &wsPolicy{ws: ws, opts: opts, files: u.PolicyFiles()}
	if p.ws == nil {
		p.ws = map[string]*wsPolicy{}
	}
	p.ws[ws] = w
	return w, nil
}

// fresh reports, by their stamps, whether nothing c was compiled from may
// have changed.
func (c *compiledPolicy) fresh() bool {
	for path, old := range c.stamps {
		s := stampOf(path)
		if s != old {
			return false
		}
		// Read too soon after its last change, the file may have
		// changed again within the same tick: read it again.
		if s.exists && c.readAt.UnixNano()-max(s.mtime, s.ctime) < int64(racyWindow) {
			return false
		}
	}
	return true
}

// reload reads w's files and, when their content changed, compiles them,
// records the change and swaps the new engine in.
func (p *livePolicy) reload(ctx context.Context, w *wsPolicy) (*policy.Engine, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	cur := w.cur.Load()
	if cur != nil && p.fresh(cur) {
		return cur.engine, nil // another call reloaded meanwhile
	}
	// Watches and stamps before the read: a write after them is seen
	// at the next call.
	watched, gen := p.watchFiles(w.files, cur)
	stamps := stamps(w.files, cur)
	srcs, hashes, err := w.files.Read()
	if err != nil {
		if cur != nil {
			p.log.Warn("policy files unreadable; the previous rules stay", "workspace", w.ws, "err", err)
			return cur.engine, nil
		}
		return nil, err
	}
	for f := range hashes {
		if _, ok := stamps[f]; !ok {
			stamps[f] = stampOf(f)
		}
	}
	if watched {
		// Extensions first seen in this read: watched from now (the
		// directory watch covers them unless they are symbolic links).
		for f := range hashes {
			if cur == nil || cur.hashes[f] == "" {
				_ = p.watch.add(f)
			}
		}
	}
	next := &compiledPolicy{hashes: hashes, stamps: stamps, readAt: now, gen: gen, watched: watched}
	if cur != nil && maps.Equal(hashes, cur.hashes) {
		next.engine = cur.engine
		w.cur.Store(next)
		w.rejected = nil
		w.rejection.Store(nil) // the edit was undone
		return next.engine, nil
	}
	if cur != nil && maps.Equal(hashes, w.rejected) {
		return cur.engine, nil // reported when first seen
	}
	e, err := policy.Compile(w.opts, srcs...)
	if err != nil {
		if cur == nil {
			return nil, err
		}
		w.rejected = hashes
		w.rejects++
		w.rejection.Store(&rejection{n: w.rejects, err: err})
		p.log.Error("policy change rejected; the previous rules stay in force", "workspace", w.ws, "err", err)
		return cur.engine, nil
	}
	w.rejected = nil
	w.rejection.Store(nil)
	next.engine = e
	if cur != nil {
		if err := p.record(ctx, w.ws, cur, next); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrPolicyChangeUnrecorded, err)
		}
		p.log.Info("policy changed", "workspace", w.ws, "policy", e.Digest())
	}
	w.cur.Store(next)
	return e, nil
}

// watchFiles watches, when there is a watcher, the directories that hold
// (or would hold) the policy files, the files themselves (a symbolic
// link's target) and every file cur was compiled from, and returns the
// generation after that. It reports false when something could not be
// watched: stamps then decide.
func (p *livePolicy) watchFiles(f policy.Files, cur *compiledPolicy) (bool, uint64) {
	if p.watch == nil {
		return false, 0
	}
	ok := true
	for _, path := range []string{f.User, f.Project} {
		if path == "" {
			continue
		}
		// The nearest directory that exists: creating the policy's
		// directory is an event there.
		dir := filepath.Dir(path)
		for dir != filepath.Dir(dir) {
			if _, err := os.Stat(dir); err == nil {
				break
			}
			dir = filepath.Dir(dir)
		}
		if err := p.watch.add(dir); err != nil {
			ok = false
		}
		_ = p.watch.add(path) // absent: the directory's watch sees it come
	}
	if cur != nil {
		for path, h := range cur.hashes {
			if h != "absent" {
				_ = p.watch.add(path)
			}
		}
	}
	return ok, p.watch.generation()
}

// stamps stats the policy files, the directories holding them (a new or
// removed *.star file changes the directory) and every file cur was
// compiled from.
func stamps(f policy.Files, cur *compiledPolicy) map[string]fileStamp {
	out := map[string]fileStamp{}
	for _, path := range []string{f.User, f.Project} {
		if path != "" {
			out[path] = stampOf(path)
			out[filepath.Dir(path)] = stampOf(filepath.Dir(path))
		}
	}
	if cur != nil {
		for path := range cur.hashes {
			if _, ok := out[path]; !ok {
				out[path] = stampOf(path)
			}
		}
	}
	return out
}

// record writes policy.change for the step from old to next, durably.
func (p *livePolicy) record(ctx context.Context, ws string, old, next *compiledPolicy) error {
	ch := audit.PolicyChange{Workspace: ws, OldPolicy: old.engine.Digest(), NewPolicy: next.engine.Digest()}
	for _, f := range slices.Sorted(maps.Keys(next.hashes)) {
		if o, ok := old.hashes[f]; !ok || o != next.hashes[f] {
			if !ok {
				o = "absent"
			}
			ch.Files = append(ch.Files, audit.PolicyFile{File: f, OldSHA256: o, NewSHA256: next.hashes[f]})
		}
	}
	for _, f := range slices.Sorted(maps.Keys(old.hashes)) {
		if _, ok := next.hashes[f]; !ok && old.hashes[f] != "absent" {
			ch.Files = append(ch.Files, audit.PolicyFile{File: f, OldSHA256: old.hashes[f], NewSHA256: "absent"})
		}
	}
	ch.Added, ch.Removed = ruleDiff(old.engine, next.engine)
	_, err := p.audit.Append(ctx, audit.Entry{Kind: audit.KindPolicyChange, Actor: "kernel", Payload: ch})
	return err
}

// ruleDiff lists the rule ids next has and old has not, and the reverse.
func ruleDiff(old, next *policy.Engine) (added, removed []string) {
	ids := func(e *policy.Engine) map[string]bool {
		m := map[string]bool{}
		for _, r := range e.Rules() {
			m[r.ID] = true
		}
		return m
	}
	o, n := ids(old), ids(next)
	for id := range n {
		if !o[id] {
			added = append(added, id)
		}
	}
	for id := range o {
		if !n[id] {
			removed = append(removed, id)
		}
	}
	sort.Strings(added)
	sort.Strings(removed)
	return added, removed
}

// EndSession implements kernel.Revoker: the classifier's answers cached
// for a closed or removed session are dropped from every workspace's
// engine (the engines outlive sessions).
func (p *livePolicy) EndSession(session string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.ws {
		if c := w.cur.Load(); c != nil {
			c.engine.ForgetSession(session)
		}
	}
}

// Explain implements approval.Decider: the broker's pre-evaluation of a
// plan step, with the engine of the step's workspace in force now. A
// policy that does not load blocks every step, with the error as the
// reason.
func (p *livePolicy) Explain(ctx context.Context, op operation.Operation) policy.Decision {
	e, err := p.engine(ctx, op.Session.Workspace)
	if err != nil {
		return policyError(err)
	}
	return e.Explain(ctx, op)
}

func policyError(err error) policy.Decision {
	return policy.Decision{Effect: policy.Block, Rule: "policy-error", Layer: policy.LayerBuiltin, Reason: "the policy does not load: " + err.Error()}
}

// rejected returns the invalid edit workspace ws's files hold now, or
// nil.
func (p *livePolicy) rejected(ws string) *rejection {
	w, err := p.workspace(ws)
	if err != nil {
		return nil
	}
	return w.rejection.Load()
}

// sessionPolicy is a session router's policy gate: the live policy of the
// session's workspace (the operation's, which the router sets to it).
// When the workspace's policy files hold an edit that did not load, the
// gate tells the session's person through warn, once per such edit:
// the next decision is made by older rules than the files show.
type sessionPolicy struct {
	live *livePolicy
	ws   string
	warn func(text string) bool // nil: nobody to tell
	told atomic.Uint64          // the last rejection told
}

// Decide implements router.PolicyGate.
func (s *sessionPolicy) Decide(ctx context.Context, op operation.Operation) policy.Decision {
	e, err := s.live.engine(ctx, s.ws)
	if err != nil {
		return policyError(err)
	}
	s.tell()
	return e.Decide(ctx, op)
}

// tell warns of the workspace's rejected edit unless this session was
// told of it already.
func (s *sessionPolicy) tell() {
	if s.warn == nil {
		return
	}
	r := s.live.rejected(s.ws)
	if r == nil {
		return
	}
	if told := s.told.Load(); told != r.n && s.told.CompareAndSwap(told, r.n) {
		if !s.warn(rejectedText(r.err)) {
			s.told.Store(told) // not running: tell at the next call
		}
	}
}

// rejectedText is the warning a session shows for a policy edit
// that did not load.
func rejectedText(err error) string {
	return "policy edit rejected, the previous rules stay in force: " + err.Error()
}

// Digest is the digest of the policy in force now ("" when it does not
// load).
func (s *sessionPolicy) Digest() string {
	e, err := s.live.engine(context.Background(), s.ws)
	if err != nil {
		return ""
	}
	return e.Digest()
}

var _ approval.Decider = (*livePolicy)(nil)
