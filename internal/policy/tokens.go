package policy

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

// Errors a presented capability token can fail with. Decide reports them
// in the decision's matches; they never make a decision stricter.
var (
	ErrTokenMalformed = errors.New("token: malformed")
	ErrTokenForged    = errors.New("token: bad signature")
	ErrTokenExpired   = errors.New("token: expired")
	ErrTokenScope     = errors.New("token: does not cover this operation")
	ErrTokenSpent     = errors.New("token: already used up or revoked (replay)")
	ErrTokenUnknown   = errors.New("token: never issued by this kernel")
	ErrTokenPolicy    = errors.New("token: " + policyChanged)
)

// Scope is what a capability token covers. Tool is a glob, Action exact;
// at most one of Path (an absolute path glob with **), Host (a host
// pattern such as *.github.com:443) and Argv (an argv pattern) narrows the
// resource. A token covers an atom of an operation when the session, tool
// and action match and the resource matches the atom's path, host or
// command; a scope with no resource covers only atoms without one.
//
// Op, when set, binds the token to one whole operation: its
// operation.Signature (argv, command line, environment assignments,
// directories, redirections, arguments, the content of the files it
// runs). Such a token covers nothing of any other operation. A command
// (Argv) scope must set it: an argv alone says nothing of the
// environment, directory or files a command runs with.
//
// Policy is the Digest of the policy the approval was given under
// (required): an engine with other rules refuses the token
// (ErrTokenPolicy), so a person's approval never carries over to a policy
// they did not see.
type Scope struct {
	Session string           `json:"sid"`
	Tool    string           `json:"tool"`
	Action  operation.Action `json:"act"`
	Path    string           `json:"path,omitempty"`
	Host    string           `json:"host,omitempty"`
	Argv    []string         `json:"argv,omitempty"`
	Op      string           `json:"op,omitempty"`
	Policy  string           `json:"pol"`
}

// claims is the signed payload. Its JSON encoding is canonical: field
// order is fixed and a token whose payload does not re-encode to the same
// bytes is refused.
type claims struct {
	V     int    `json:"v"`
	Nonce uint64 `json:"n"`
	Scope
	Exp  int64 `json:"exp"`
	Uses int   `json:"uses"`
}

const (
	tokenPrefix  = "fft1."
	maxTokenLen  = 4096
	minKeyLength = 32
)

// Tokens issues and validates capability tokens with an HMAC-SHA256 key.
// Validation is O(1): one MAC over a bounded payload and one map lookup.
// Each session has a monotonic nonce; a token is live from issue until its
// uses run out, it expires or its session ends, and a token that is not
// live is refused even with a valid signature (replay).
type Tokens struct {
	key []byte
	now func() time.Time

	mu   sync.Mutex // guards the fields below
	last map[string]uint64
	live map[liveKey]*liveToken
}

type liveKey struct {
	session string
	nonce   uint64
}

type liveToken struct {
	uses int
	exp  time.Time
	path *pathGlob
	host *hostPattern
	argv *argvPattern
	tool glob
}

// NewTokens returns a token authority. key must be at least 32 bytes; now
// is the clock (time.Now when nil).
func NewTokens(key []byte, now func() time.Time) (*Tokens, error) {
	if len(key) < minKeyLength {
		return nil, fmt.Errorf("policy: token key must be at least %d bytes", minKeyLength)
	}
	if now == nil {
		now = time.Now
	}
	return &Tokens{key: bytes.Clone(key), now: now, last: map[string]uint64{}, live: map[liveKey]*liveToken{}}, nil
}

// Issue signs a token for s, valid for ttl and uses uses (at least 1).
func (t *Tokens) Issue(s Scope, ttl time.Duration, uses int) (string, error) {
	if s.Session == "" || s.Tool == "" || !s.Action.Valid() {
		return "", fmt.Errorf("%w: scope needs a session, a tool and a valid action", ErrTokenMalformed)
	}
	if !isSignature(s.Policy) {
		return "", fmt.Errorf("%w: scope needs the digest of the policy the approval was given under (Engine.Digest)", ErrTokenMalformed)
	}
	if uses < 1 || ttl <= 0 {
		return "", fmt.Errorf("%w: uses and ttl must be positive", ErrTokenMalformed)
	}
	lt, err := compileScope(s)
	if err != nil {
		return "", err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last[s.Session]++
	c := claims{V: 1, Nonce: t.last[s.Session], Scope: s, Exp: t.now().Add(ttl).Unix(), Uses: uses}
	lt.uses, lt.exp = uses, time.Unix(c.Exp, 0)
	t.live[liveKey{s.Session, c.Nonce}] = lt
	payload, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	body := tokenPrefix + base64.RawURLEncoding.EncodeToString(payload)
	return body + "." + base64.RawURLEncoding.EncodeToString(t.mac(body)), nil
}

func compileScope(s Scope) (*liveToken, error) {
	lt := &liveToken{tool: compileGlob(s.Tool)}
	n := 0
	if s.Path != "" {
		if !strings.HasPrefix(s.Path, "/") {
			return nil, fmt.Errorf("%w: path scope must be absolute", ErrTokenMalformed)
		}
		g, err := compilePathGlob(s.Path, "")
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrTokenMalformed, err)
		}
		lt.path = &g
		n++
	}
	if s.Host != "" {
		h, err := compileHost(s.Host)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrTokenMalformed, err)
		}
		lt.host = &h
		n++
	}
	if s.Op != "" && !isSignature(s.Op) {
		return nil, fmt.Errorf("%w: op must be an operation signature (64 hex digits)", ErrTokenMalformed)
	}
	if len(s.Argv) > 0 {
		if s.Op == "" {
			return nil, fmt.Errorf("%w: a command scope must bind the whole operation (op): argv alone leaves out its environment, directory, redirections and files", ErrTokenMalformed)
		}
		a, err := compileArgv(s.Argv)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrTokenMalformed, err)
		}
		lt.argv = &a
		n++
	}
	if n > 1 {
		return nil, fmt.Errorf("%w: at most one of path, host and argv", ErrTokenMalformed)
	}
	return lt, nil
}

// isSignature reports whether s has the form of operation.Signature.
func isSignature(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func (t *Tokens) mac(body string) []byte {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte(body))
	return m.Sum(nil)
}

// parse verifies the signature and decodes the claims strictly.
func (t *Tokens) parse(tok string) (claims, error) {
	var c claims
	if len(tok) > maxTokenLen || !strings.HasPrefix(tok, tokenPrefix) {
		return c, ErrTokenMalformed
	}
	i := strings.LastIndexByte(tok, '.')
	if i <= len(tokenPrefix) {
		return c, ErrTokenMalformed
	}
	body, sigText := tok[:i], tok[i+1:]
	sig, err := base64.RawURLEncoding.Strict().DecodeString(sigText)
	if err != nil || len(sig) != sha256.Size {
		return c, ErrTokenMalformed
	}
	if !hmac.Equal(sig, t.mac(body)) {
		return c, ErrTokenForged
	}
	payload, err := base64.RawURLEncoding.Strict().DecodeString(body[len(tokenPrefix):])
	if err != nil {
		return c, ErrTokenMalformed
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || dec.More() {
		return c, ErrTokenMalformed
	}
	if again, err := json.Marshal(c); err != nil || !bytes.Equal(again, payload) || c.V != 1 {
		return c, ErrTokenMalformed
	}
	return c, nil
}

// TokenID names a token in decisions and the audit log: session/nonce.
func tokenID(c claims) string { return c.Session + "/" + strconv.FormatUint(c.Nonce, 10) }

// check validates tok for atom a of op without using it up. sig returns
// op's signature, computed once per decision however many tokens ask.
func (t *Tokens) check(tok string, op *operation.Operation, a *atom, sig func() string, policy string) (liveKey, string, error) {
	c, err := t.parse(tok)
	if err != nil {
		return liveKey{}, "", err
	}
	id := tokenID(c)
	k := liveKey{c.Session, c.Nonce}
	t.mu.Lock()
	lt, ok := t.live[k]
	last := t.last[c.Session]
	t.mu.Unlock()
	switch {
	case !t.now().Before(time.Unix(c.Exp, 0)):
		return k, id, ErrTokenExpired
	case !ok && c.Nonce <= last:
		return k, id, ErrTokenSpent
	case !ok:
		return k, id, ErrTokenUnknown
	case c.Session != op.Session.ID || !lt.tool.match(op.Tool) || c.Action != a.action:
		return k, id, ErrTokenScope
	case c.Policy != policy:
		// Approved under rules the engine no longer has: the person
		// judged it against another policy.
		return k, id, ErrTokenPolicy
	case c.Op != "" && c.Op != sig():
		// The same argv or path in another operation: other
		// environment, directory, redirections, arguments or files.
		return k, id, ErrTokenScope
	}
	switch {
	case a.path != "":
		if lt.path == nil || !lt.path.match(a.path, "") {
			return k, id, ErrTokenScope
		}
	case a.host != nil:
		if lt.host == nil || !lt.host.match(a.host.Name, a.host.Port) {
			return k, id, ErrTokenScope
		}
	case a.cmd != nil:
		if lt.argv == nil || c.Op == "" || a.cmd.Dynamic || !lt.argv.match(a.cmd.Argv, true) {
			return k, id, ErrTokenScope
		}
	default:
		if lt.path != nil || lt.host != nil || lt.argv != nil {
			return k, id, ErrTokenScope
		}
	}
	return k, id, nil
}

// consume uses one use of each key, all or none.
func (t *Tokens) consume(keys []liveKey) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		if lt, ok := t.live[k]; !ok || lt.uses < 1 {
			return false
		}
	}
	for _, k := range keys {
		lt := t.live[k]
		lt.uses--
		if lt.uses == 0 {
			delete(t.live, k)
		}
	}
	return true
}

// EndSession revokes every live token of a session.
func (t *Tokens) EndSession(session string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.live {
		if k.session == session {
			delete(t.live, k)
		}
	}
}

// applyTokens turns approve into allow for the atoms presented tokens
// cover, when every approving atom is covered; it uses each token once.
// It reports whether a token was refused because it was approved under
// another policy.
func (e *Engine) applyTokens(op *operation.Operation, results []atomResult, d *Decision, dry bool) (stale bool) {
	if e.opts.Tokens == nil || len(op.Tokens) == 0 {
		return false
	}
	var need []int
	for i, r := range results {
		if r.effect == Approve && r.builtin < Approve {
			need = append(need, i)
		}
	}
	if len(need) == 0 {
		return false
	}
	type cover struct {
		k  liveKey
		id string
	}
	covers := make([]cover, len(results))
	var keys []liveKey
	seen := map[liveKey]bool{}
	var opSig string
	sig := func() string {
		if opSig == "" {
			opSig = op.Signature()
		}
		return opSig
	}
	for _, i := range need {
		found := false
		for _, tok := range op.Tokens {
			k, id, err := e.opts.Tokens.check(tok, op, results[i].a, sig, e.digest)
			if err != nil {
				stale = stale || errors.Is(err, ErrTokenPolicy)
				if id == "" {
					id = "?"
				}
				d.Matched = append(d.Matched, Match{Rule: "token:" + id, Layer: LayerToken, Effect: Approve, Subject: results[i].a.subject(), Error: err.Error()})
				continue
			}
			covers[i] = cover{k, id}
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
			found = true
			break
		}
		if !found {
			return stale
		}
	}
	if !dry && !e.opts.Tokens.consume(keys) {
		d.Matched = append(d.Matched, Match{Rule: "token", Layer: LayerToken, Effect: Approve, Error: ErrTokenSpent.Error()})
		return false
	}
	var ids []string
	for _, i := range need {
		c := covers[i]
		m := Match{Rule: "token:" + c.id, Effect: Allow, Layer: LayerToken, Subject: results[i].a.subject(),
			Message: "a person approved this with a capability token"}
		results[i].effect, results[i].deciding = Allow, m
		d.Matched = append(d.Matched, m)
		if !slices.Contains(ids, c.id) {
			ids = append(ids, c.id)
		}
	}
	d.Token = strings.Join(ids, ",")
	return false
}
