package wiring

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/secret"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/tool/router"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// teeAudit records what a session appends, then writes it to the log.
type teeAudit struct {
	*audit.Log
	mu      sync.Mutex
	entries []audit.Entry
}

func (a *teeAudit) Append(ctx context.Context, e audit.Entry) (uint64, error) {
	a.mu.Lock()
	a.entries = append(a.entries, e)
	a.mu.Unlock()
	return a.Log.Append(ctx, e)
}

// secretSession is a session whose person declared uses of one secret
// (a 0600 file): as TOKEN for printenv, as the file token for cat.
type secretSession struct {
	value   string
	sec     *kernelSecrets
	tee     *teeAudit
	session string
	cs      *changeset.ChangeSet
	call    func(cmd string) (string, bool)
	// live is the session's policy, for a plugin's credentials.
	live *livePolicy
	u    *userenv.Env
}

// defaultUses: the secret as TOKEN for printenv, as the file token for
// cat.
func defaultUses(keyFile string) string {
	return "    - {ref: file:" + keyFile + ", as: env, name: TOKEN, commands: [printenv]}\n" +
		"    - {ref: file:" + keyFile + ", as: file, name: token, commands: [cat]}\n"
}

// approveAll is a person who approves every step asked, and counts them.
type approveAll struct {
	mu    sync.Mutex
	asked []string
}

func (a *approveAll) Ask(_ context.Context, session, summary string, steps []approval.Step) (approval.Request, error) {
	a.mu.Lock()
	a.asked = append(a.asked, summary)
	a.mu.Unlock()
	r := approval.Request{ID: "r" + strconv.Itoa(len(a.asked)), Session: session, Summary: summary}
	for i, st := range steps {
		r.Items = append(r.Items, approval.Item{N: i + 1, Step: st, Eval: approval.Evaluation{Effect: approval.EffectApprove},
			Decision: approval.Decision{Verdict: approval.Approved}})
	}
	return r, nil
}

func newSecretSession(t *testing.T, policyYAML string, uses func(keyFile string) string, approver router.Approver) *secretSession {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CI runs as root)")
	}
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	s := &secretSession{value: "tok-" + hex.EncodeToString(raw)}
	keyFile := filepath.Join(dir, "token")
	if err := os.WriteFile(keyFile, []byte(s.value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rd := t.TempDir()
	u := &userenv.Env{Cwd: dir, Self: self, Environ: []string{"HOME=" + dir, "FLUFFY_HOME=" + filepath.Join(dir, "data"),
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_RUNTIME_DIR=" + rd, "PATH=/usr/bin:/bin"}}
	cfg := "secrets:\n  uses:\n" + uses(keyFile)
	if err := os.MkdirAll(filepath.Join(dir, "config", "fluffy"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"config.yaml": cfg, "policy.yaml": policyYAML} {
		if err := os.WriteFile(filepath.Join(dir, "config", "fluffy", name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	log := u.Logger()
	s.u = u
	al, j, m := sessionStores(t, dir)
	s.tee = &teeAudit{Log: al}
	s.sec, err = newKernelSecrets(u, log)
	if err != nil || s.sec == nil {
		t.Fatalf("newKernelSecrets: %v, %v", s.sec, err)
	}
	t.Cleanup(s.sec.Close)
	boxes := newSessionBoxes(log, func() resolved { return sessionRuntime(context.Background(), u, log, nil) })
	t.Cleanup(boxes.Close)
	s.live = &livePolicy{u: u, log: log, audit: al}
	tools := sessionTools(u, log, approver, s.live, nil, boxes, nil, memoryDeps{now: time.Now}, nil, s.sec, observe{})
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	s.cs, err = changeset.Begin(t.Context(), ws, filepath.Join(dir, "cs"))
	if err != nil {
		t.Fatal(err)
	}
	s.session = "test-secret-" + strconv.Itoa(os.Getpid())
	st, err := tdd.Resume(t.Context(), j, m, s.session, tdd.Explore)
	if err != nil {
		t.Fatal(err)
	}
	r, err := tools(t.Context(), kernel.Env{Session: s.session, Workspace: ws, ChangeSet: s.cs, TDD: st, Audit: s.tee})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	s.call = func(cmd string) (string, bool) {
		t.Helper()
		n++
		args, _ := json.Marshal(map[string]string{"command": cmd})
		res, err := r.Call(t.Context(), llm.ToolCall{ID: "c" + strconv.Itoa(n), Name: "shell.exec", Args: args})
		if err != nil {
			t.Fatalf("shell.exec %q: %v", cmd, err)
		}
		return res.Content, res.IsError
	}
	return s
}

const allowSecrets = "rules:\n  - id: run-anything\n    effect: allow\n    match:\n      action: exec\n" +
	"  - id: my-secrets\n    effect: allow\n    match:\n      action: secret\n"

// TestSessionSecretHostile: a command a declared use applies to gets the
// secret; whatever the command does to show it (print it, base64 it,
// read its file) the model sees it redacted; a command no use applies to
// does not get it; the audit log records each use with the reference and
// a keyed fingerprint, never the value; the session's end zeroes it.
func TestSessionSecretHostile(t *testing.T) {
	s := newSecretSession(t, allowSecrets, defaultUses, nil)
	b64 := base64.StdEncoding.EncodeToString([]byte(s.value + "\n"))
	for _, c := range []struct{ cmd, mustNot string }{
		{"printenv TOKEN", s.value},
		{"printenv TOKEN | base64", b64},
		{"printenv TOKEN | base64 | base64 -d", s.value},
		{"printenv TOKEN | od -An -tx1 | tr -d ' \\n'", hex.EncodeToString([]byte(s.value))},
		{"cat /run/secrets/token", s.value},
	} {
		out, isErr := s.call(c.cmd)
		if isErr {
			t.Fatalf("%s: %s", c.cmd, out)
		}
		if strings.Contains(out, c.mustNot) || strings.Contains(out, s.value) {
			t.Errorf("%s: the model sees the secret: %q", c.cmd, out)
		}
		if !strings.Contains(out, "[REDACTED]") {
			t.Errorf("%s: no redaction in %q: the use did not apply", c.cmd, out)
		}
	}
	// ls is no declared user: its sandbox has neither the variable nor
	// the file.
	out, _ := s.call("ls /run/secrets; tr '\\0' '\\n' < /proc/self/environ")
	if strings.Contains(out, "TOKEN=") || strings.Contains(out, "[REDACTED]") || !strings.Contains(out, "PATH=") {
		t.Errorf("a command no use applies to got the secret: %q", out)
	}
	// Each use is recorded, with its fingerprint; no entry holds the value.
	var uses []audit.SecretUse
	for _, e := range s.tee.entries {
		if b, _ := json.Marshal(e.Payload); strings.Contains(string(b), s.value) {
			t.Errorf("audit %s holds the value: %s", e.Kind, b)
		}
		if p, ok := e.Payload.(audit.SecretUse); ok {
			uses = append(uses, p)
		}
	}
	if len(uses) != 5 {
		t.Fatalf("secret.use entries: %+v", uses)
	}
	for _, u := range uses {
		if u.Decision != "allowed" || u.Rule != "my-secrets" || u.Fingerprint == "" || u.Fingerprint != uses[0].Fingerprint || !strings.HasPrefix(u.Ref, "secret://file/") {
			t.Errorf("secret.use %+v", u)
		}
	}
	if !uses[1].Cached || uses[0].Cached {
		t.Errorf("the first use fetched, the next came from the session's cache: %+v", uses[:2])
	}
	// Written into the change set: the file is marked, its diff shows
	// no content, and apply refuses it unless it is named; so is a copy
	// a command without secrets made of it.
	if out, isErr := s.call("printenv TOKEN > leak.txt"); isErr {
		t.Fatal(out)
	}
	if out, isErr := s.call("cp leak.txt copy.txt; echo fine > ok.txt"); isErr {
		t.Fatal(out)
	}
	d, err := s.cs.Diff(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(d, s.value) || !strings.Contains(d, "b/leak.txt holds the value of a secret") || !strings.Contains(d, "b/copy.txt holds the value of a secret") || !strings.Contains(d, "+fine") {
		t.Errorf("diff:\n%s", d)
	}
	var se *changeset.SensitiveError
	if _, err := s.cs.Apply(t.Context()); !errors.As(err, &se) || len(se.Paths) != 2 {
		t.Errorf("apply of everything: %v", err)
	}
	// No /dev/shm directory of a file use outlives its command.
	if m, _ := filepath.Glob("/dev/shm/fluffy-secrets-*"); len(m) > 0 {
		t.Errorf("file uses left %v", m)
	}
	s.sec.EndSession(s.session)
	if r := s.sec.broker.Redactions(); len(r) != 0 {
		t.Errorf("values outlive the session: %d forms", len(r))
	}
}

// TestSessionSecretNeedsAPerson: by default a use needs a person's
// approval (default.secrets); with no one to ask the command is refused
// before it runs, and the refusal is recorded.
func TestSessionSecretNeedsAPerson(t *testing.T) {
	s := newSecretSession(t, "rules:\n  - id: run-anything\n    effect: allow\n    match:\n      action: exec\n", defaultUses, nil)
	out, isErr := s.call("printenv TOKEN > ran.txt")
	if !isErr || !strings.Contains(out, "needs a person's approval") {
		t.Fatalf("refused use: %v %q", isErr, out)
	}
	if _, err := os.Stat(filepath.Join(s.cs.UpperDir(), "ran.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran: %v", err)
	}
	var found bool
	for _, e := range s.tee.entries {
		if p, ok := e.Payload.(audit.SecretUse); ok {
			found = p.Decision == "refused" && p.Rule == "default.secrets" && p.Fingerprint == ""
		}
	}
	if !found {
		t.Errorf("no refused secret.use entry: %+v", s.tee.entries)
	}
	if r := s.sec.broker.Redactions(); len(r) != 0 {
		t.Error("a refused use fetched the value")
	}
}

// TestSecretProxySwaps: a proxy use gives the command a placeholder, and
// the command's egress proxy (started after the Secrets hook) takes the
// swap for its call once, with the value, the bound hosts, TLS and the
// reference as its name; the command's end zeroes the value.
func TestSecretProxySwaps(t *testing.T) {
	u, err := secret.NewUse("env:X", "proxy", "X", []string{"api.example.com"}, []string{"curl"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	u.TLS = true
	b, err := secret.New(secret.Options{Backends: map[string]secret.Backend{"env": secret.Env{LookupEnv: func(string) (string, bool) { return "v4lue-of-x", true }}}, Key: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	k := &kernelSecrets{broker: b, uses: []secret.Use{u}}
	s := k.forSession(nil, "/ws", "s", nil, nil, nil)
	ss, err := s.handOut(t.Context(), "c1", []secret.Use{u}, []string{"r"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(ss.Env) != 1 || !strings.HasPrefix(ss.Env[0], "X="+secret.PlaceholderPrefix) {
		t.Fatalf("env %v", ss.Env)
	}
	placeholder := strings.TrimPrefix(ss.Env[0], "X=")
	if got, _ := s.proxySwaps(t.Context(), "c2"); len(got) != 0 {
		t.Errorf("another call's proxy got %v", got)
	}
	got, err := s.proxySwaps(t.Context(), "c1")
	if err != nil || len(got) != 1 {
		t.Fatalf("swaps %v, %v", got, err)
	}
	sw := got[0]
	if sw.Placeholder != placeholder || string(sw.Value) != "v4lue-of-x" || len(sw.Hosts) != 1 || sw.Hosts[0] != "api.example.com" || !sw.TLS || sw.Name != "secret://env/X" {
		t.Errorf("swap %+v", sw)
	}
	if again, _ := s.proxySwaps(t.Context(), "c1"); len(again) != 0 {
		t.Error("the swaps were handed out twice")
	}
	ss.Close()
	if string(sw.Value) == "v4lue-of-x" {
		t.Error("the swap's value outlives the command")
	}
}

// TestSessionSecretThroughTheProxy: a proxy use in a real session. The
// command holds only the placeholder (its environment shows it, never the
// value); its request to the bound host arrives with the value; the same
// placeholder sent to a host it is not bound to is refused.
func TestSessionSecretThroughTheProxy(t *testing.T) {
	var mu sync.Mutex
	var got []string
	bound := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprintln(w, "ok")
	}))
	defer bound.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, "other:"+r.Header.Get("Authorization"))
		mu.Unlock()
	}))
	defer other.Close()
	bh, oh := strings.TrimPrefix(bound.URL, "http://"), strings.TrimPrefix(other.URL, "http://")
	policy := allowSecrets +
		"  - id: local-apis\n    effect: allow\n    match: {action: net, host: [\"" + bh + "\", \"" + oh + "\"]}\n"
	// $TOKEN makes the command line dynamic: a person approves it.
	person := &approveAll{}
	s := newSecretSession(t, policy, func(keyFile string) string {
		return "    - {ref: file:" + keyFile + ", as: proxy, name: TOKEN, bind: [\"" + bh + "\"], commands: [curl]}\n"
	}, person)
	out, isErr := s.call("curl -s -H \"Authorization: Bearer $TOKEN\" " + bound.URL + "/; echo; printenv TOKEN; " +
		"curl -s -o /dev/null -w '%{http_code}' -H \"Authorization: Bearer $TOKEN\" " + other.URL + "/")
	if isErr {
		t.Fatal(out)
	}
	if strings.Contains(out, s.value) || !strings.Contains(out, secret.PlaceholderPrefix) {
		t.Errorf("the command's output: %q", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "Bearer "+s.value {
		t.Errorf("the servers got %q; want the bound one to get the value and the other nothing", got)
	}
}
