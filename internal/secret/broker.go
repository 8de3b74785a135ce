package secret

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Options configure a Broker.
type Options struct {
	// Backends by name (env, file, age, bitwarden); must be non-nil.
	Backends map[string]Backend
	// Key is the fingerprint key (LoadKey); at least 16 bytes.
	Key []byte
	// TTL is how long a value stays cached for a session after it was
	// fetched; 0 keeps it until the session ends.
	TTL time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Logger receives diagnostics (references and fingerprints, never
	// values); nil discards them.
	Logger *slog.Logger
}

// Broker hands out secret values for declared uses and caches them per
// session in locked memory (see locked), zeroed when their TTL passes,
// when the session ends and at Close. It decides nothing: whether a use
// may happen is the policy's question, asked by its caller first. Safe
// for concurrent use.
type Broker struct {
	backends map[string]Backend
	key      []byte
	ttl      time.Duration
	now      func() time.Time
	log      *slog.Logger

	// mu guards sessions and every entry in them.
	mu       sync.Mutex
	sessions map[string]map[Ref]*entry
}

type entry struct {
	val     *locked
	fp      string
	expires time.Time // zero: the session's end
}

// Handout says what one use handed out, for the audit log: never the
// value.
type Handout struct {
	Ref         Ref
	Fingerprint string
	// Cached is set when the value came from the session's cache.
	Cached bool
}

// New returns a Broker.
func New(o Options) (*Broker, error) {
	if o.Backends == nil {
		return nil, errors.New("secret: Options.Backends must be non-nil")
	}
	if len(o.Key) < 16 {
		return nil, errors.New("secret: Options.Key must be at least 16 bytes")
	}
	b := &Broker{backends: o.Backends, key: slices.Clone(o.Key), ttl: o.TTL, now: o.Now, log: o.Logger, sessions: map[string]map[Ref]*entry{}}
	if b.now == nil {
		b.now = time.Now
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	return b, nil
}

// Backend returns the backend of that name.
func (b *Broker) Backend(name string) (Backend, bool) {
	be, ok := b.backends[name]
	return be, ok
}

// Backends lists the configured backends' names, sorted.
func (b *Broker) Backends() []string {
	var names []string
	for n := range b.backends {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (b *Broker) lookup(ctx context.Context, ref Ref) ([]byte, error) {
	be, ok := b.backends[ref.Backend]
	if !ok {
		return nil, fmt.Errorf("%w: %s (configured: %v)", ErrUnknownBackend, ref, b.Backends())
	}
	v, err := be.Lookup(ctx, ref.Path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	return v, nil
}

// Test resolves ref without caching it and returns its fingerprint; the
// value is zeroed before Test returns.
func (b *Broker) Test(ctx context.Context, ref Ref) (string, error) {
	v, err := b.lookup(ctx, ref)
	if err != nil {
		return "", err
	}
	defer wipe(v)
	return Fingerprint(b.key, v), nil
}

// Use calls fn with ref's value for session, fetching it from its backend
// unless the session's cache holds it. fn must not keep v (it is zeroed
// later) and copies what it must hand on.
func (b *Broker) Use(ctx context.Context, session string, ref Ref, fn func(v []byte) error) (Handout, error) {
	b.mu.Lock()
	b.expireLocked()
	e := b.sessions[session][ref]
	b.mu.Unlock()
	h := Handout{Ref: ref, Cached: e != nil}
	if e == nil {
		v, err := b.lookup(ctx, ref)
		if err != nil {
			return h, err
		}
		l, err := newLocked(v)
		fp := Fingerprint(b.key, v)
		wipe(v)
		if err != nil {
			return h, err
		}
		e = &entry{val: l, fp: fp}
		if b.ttl > 0 {
			e.expires = b.now().Add(b.ttl)
		}
		b.mu.Lock()
		if b.sessions[session] == nil {
			b.sessions[session] = map[Ref]*entry{}
		}
		if old := b.sessions[session][ref]; old != nil {
			_ = l.free() // a concurrent Use cached it first
			e = old
		} else {
			b.sessions[session][ref] = e
		}
		b.mu.Unlock()
	}
	h.Fingerprint = e.fp
	b.mu.Lock()
	defer b.mu.Unlock()
	if e.val.mem == nil {
		return h, fmt.Errorf("%w: %s: the value expired while in use", ErrLocked, ref)
	}
	return h, fn(e.val.b)
}

// Redactions returns the forms (Forms) of every value cached for any
// session: what tool results, model-bound text, logs and audit payloads
// must not contain.
func (b *Broker) Redactions() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked()
	var out []string
	for _, es := range b.sessions {
		for _, e := range es {
			out = append(out, Forms(e.val.b)...)
		}
	}
	return out
}

// Holds reports whether any value is cached for session.
func (b *Broker) Holds(session string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked()
	return len(b.sessions[session]) > 0
}

// Contains reports whether data holds a form (Forms) of a value cached
// for session.
func (b *Broker) Contains(session string, data []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	found := false
	for _, e := range b.sessions[session] {
		for _, f := range formBytes(e.val.b) {
			found = found || bytes.Contains(data, f)
			wipe(f)
		}
	}
	return found
}

// RedactionBytes is Redactions in slices of their own: the caller zeroes
// them (tool.SanitizerOptions.SecretBytes does), so no copy of a value
// outlives its use as a Go string would.
func (b *Broker) RedactionBytes() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked()
	var out [][]byte
	for _, es := range b.sessions {
		for _, e := range es {
			out = append(out, formBytes(e.val.b)...)
		}
	}
	return out
}

// Sweep zeroes the values whose TTL has passed. Use and Redactions sweep
// too; a daemon calls Sweep on a timer so an idle session's values do not
// outlive their TTL.
func (b *Broker) Sweep() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked()
}

func (b *Broker) expireLocked() {
	now := b.now()
	for s, es := range b.sessions {
		for r, e := range es {
			if !e.expires.IsZero() && !now.Before(e.expires) {
				if err := e.val.free(); err != nil {
					b.log.Warn("secret: freeing a value", "ref", r.String(), "err", err)
				}
				delete(es, r)
			}
		}
		if len(es) == 0 {
			delete(b.sessions, s)
		}
	}
}

// EndSession zeroes every value cached for session. When no session holds
// a value any more, backends that can lock (Locker) are locked.
func (b *Broker) EndSession(ctx context.Context, session string) {
	b.mu.Lock()
	for r, e := range b.sessions[session] {
		if err := e.val.free(); err != nil {
			b.log.Warn("secret: freeing a value", "ref", r.String(), "err", err)
		}
	}
	freed := len(b.sessions[session]) > 0
	delete(b.sessions, session)
	idle := len(b.sessions) == 0
	b.mu.Unlock()
	if freed {
		scrubSignalStacks(scrubWait)
	}
	if idle {
		b.lockAll(ctx)
	}
}

// scrubWait bounds how long zeroing waits for the threads to take the
// signal that overwrites their signal stacks (scrubSignalStacks).
const scrubWait = 100 * time.Millisecond

func (b *Broker) lockAll(ctx context.Context) {
	for n, be := range b.backends {
		if l, ok := be.(Locker); ok {
			if err := l.Lock(ctx); err != nil {
				b.log.Warn("secret: locking a backend", "backend", n, "err", err)
			}
		}
	}
}

// Close zeroes every cached value and locks the backends.
func (b *Broker) Close(ctx context.Context) {
	b.mu.Lock()
	for _, es := range b.sessions {
		for _, e := range es {
			_ = e.val.free()
		}
	}
	b.sessions = map[string]map[Ref]*entry{}
	b.mu.Unlock()
	scrubSignalStacks(scrubWait)
	b.lockAll(ctx)
}

// Injection is what the uses in effect put into one sandbox. Its holder
// calls Wipe when the sandbox has ended.
type Injection struct {
	// Env are NAME=value entries (env uses) and NAME=placeholder entries
	// (proxy uses).
	Env []string
	// Files are the contents of the secrets tmpfs, by file name.
	Files map[string][]byte
	// Stdin is the value of a stdin use (at most one may apply).
	Stdin []byte
	// Swaps are for the sandbox's egress proxy (proxy uses).
	Swaps []Swap
	// Handouts are for the audit log, one per use.
	Handouts []Handout
	// Arena holds the Env entries of env uses (their bytes are outside
	// the Go heap) and is the command's sandbox.Spec.Scratch: what the
	// runtime derives from Env and the command's raw output live there.
	Arena *Arena
}

// Wipe zeroes what the injection holds: the byte values and the arena
// (with it the env uses' strings, which then read as zeros).
func (in *Injection) Wipe() {
	_ = in.Arena.Wipe()
	for _, v := range in.Files {
		wipe(v)
	}
	wipe(in.Stdin)
	for i := range in.Swaps {
		in.Swaps[i].Wipe()
	}
}

// ErrTwoStdin: two uses in effect both want the command's stdin.
var ErrTwoStdin = errors.New("secret: two declared uses want the same command's stdin")

// Inject resolves uses (the ones in effect and allowed, decided by the
// caller) for session into what a sandbox gets. On error nothing is
// handed out.
func (b *Broker) Inject(ctx context.Context, session string, uses []Use) (*Injection, error) {
	in := &Injection{Files: map[string][]byte{}, Arena: &Arena{}}
	for _, u := range uses {
		var placeholder string
		if u.As == AsProxy {
			var err error
			if placeholder, err = NewPlaceholder(); err != nil {
				in.Wipe()
				return nil, err
			}
		}
		if u.As == AsStdin && in.Stdin != nil {
			in.Wipe()
			return nil, ErrTwoStdin
		}
		h, err := b.Use(ctx, session, u.Ref, func(v []byte) error {
			switch u.As {
			case AsEnv:
				in.Env = append(in.Env, in.Arena.String([]byte(u.Name+"="), v))
			case AsFile:
				in.Files[u.Name] = slices.Clone(v)
			case AsStdin:
				in.Stdin = slices.Clone(v)
			case AsProxy:
				in.Env = append(in.Env, u.Name+"="+placeholder)
				in.Swaps = append(in.Swaps, Swap{Placeholder: placeholder, Value: slices.Clone(v), Hosts: slices.Clone(u.Bind), TLS: u.TLS, Ref: u.Ref})
			}
			return nil
		})
		if err != nil {
			in.Wipe()
			return nil, err
		}
		in.Handouts = append(in.Handouts, h)
	}
	return in, nil
}

// Swaps resolves the proxy uses among uses for session: what a sandbox's
// egress proxy is handed, and the environment entries (NAME=placeholder)
// the sandbox gets instead of the values.
func (b *Broker) Swaps(ctx context.Context, session string, uses []Use) ([]Swap, []string, error) {
	var proxy []Use
	for _, u := range uses {
		if u.As == AsProxy {
			proxy = append(proxy, u)
		}
	}
	in, err := b.Inject(ctx, session, proxy)
	if err != nil {
		return nil, nil, err
	}
	return in.Swaps, in.Env, nil
}

// Redact returns a copy of data with every form (Forms) of a value cached
// for session replaced by label. It reads data in place and copies only
// what lies between the matches, so a caller that keeps data outside the
// heap (an Arena) and zeroes it after gets no heap copy of a value.
func (b *Broker) Redact(session string, data []byte, label string) []byte {
	b.mu.Lock()
	var forms [][]byte
	for _, e := range b.sessions[session] {
		forms = append(forms, formBytes(e.val.b)...)
	}
	b.mu.Unlock()
	defer func() {
		for _, f := range forms {
			wipe(f)
		}
	}()
	return redactForms(data, forms, label)
}

// redactForms replaces every occurrence of forms in data by label; where
// matches overlap, their union is replaced once.
func redactForms(data []byte, forms [][]byte, label string) []byte {
	type span struct{ from, to int }
	var spans []span
	for _, f := range forms {
		for i := 0; i < len(data); {
			j := bytes.Index(data[i:], f)
			if j < 0 {
				break
			}
			spans = append(spans, span{i + j, i + j + len(f)})
			i += j + 1
		}
	}
	out := make([]byte, 0, len(data))
	if len(spans) == 0 {
		return append(out, data...)
	}
	slices.SortFunc(spans, func(a, b span) int { return a.from - b.from })
	at := 0
	for k := 0; k < len(spans); {
		from, to := spans[k].from, spans[k].to
		for k++; k < len(spans) && spans[k].from < to; k++ {
			to = max(to, spans[k].to)
		}
		out = append(append(out, data[at:from]...), label...)
		at = to
	}
	return append(out, data[at:]...)
}
