package policy

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

func mustCompile(t testing.TB, opts Options, user string) *Engine {
	t.Helper()
	var srcs []Source
	if user != "" {
		srcs = append(srcs, Source{Name: "user.yaml", Layer: LayerUser, Data: []byte(user)})
	}
	e, err := Compile(opts, srcs...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// countingClassifier is a fake that counts calls per instruction.
type countingClassifier struct {
	mu    sync.Mutex
	calls int
	yes   bool
}

func (c *countingClassifier) Classify(context.Context, string, *CELOp) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return c.yes, nil
}

var _ Classifier = (*countingClassifier)(nil)

func TestClassifierCachePerSession(t *testing.T) {
	cls := &countingClassifier{yes: true}
	e := mustCompile(t, Options{Classifier: cls}, `
rules:
  - id: people
    effect: approve
    classify: messages to people not in USER.md
    match: {action: message}
`)
	op := func(sess, to string) operation.Operation {
		return operation.Operation{Tool: "message.send", Action: operation.Message, Hosts: []operation.Host{{Name: to}}, Session: operation.Session{ID: sess}}
	}
	for range 3 {
		if d := e.Decide(t.Context(), op("a", "bob")); d.Rule != "people" {
			t.Fatalf("%v", d)
		}
	}
	if cls.calls != 1 {
		t.Fatalf("classifier called %d times for one (session, rule, op)", cls.calls)
	}
	e.Decide(t.Context(), op("a", "carol"))
	e.Decide(t.Context(), op("b", "bob"))
	if cls.calls != 3 {
		t.Fatalf("classifier called %d times, want 3", cls.calls)
	}
	e.ForgetSession("a")
	e.Decide(t.Context(), op("a", "bob"))
	if cls.calls != 4 {
		t.Fatalf("forgotten session not asked again: %d", cls.calls)
	}
}

// testDigest stands for a policy digest where no engine checks it.
var testDigest = strings.Repeat("ab", 32)

func TestTokensConcurrentSingleUse(t *testing.T) {
	tokens, err := NewTokens(bytes.Repeat([]byte{1}, 32), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := mustCompile(t, Options{Tokens: tokens}, "")
	op := operation.Operation{Tool: "shell.exec", Action: operation.Exec, Argv: []string{"make", "install"}, Session: operation.Session{ID: "s"}}
	tok, err := tokens.Issue(Scope{Session: "s", Tool: "shell.exec", Action: operation.Exec, Argv: []string{"make", "install"}, Op: op.Signature(), Policy: e.Digest()}, time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	op.Tokens = []string{tok}
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if e.Decide(context.Background(), op).Effect == Allow {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if allowed != 1 {
		t.Fatalf("single-use token allowed %d times", allowed)
	}
}

func TestTokenNoncesAreMonotonic(t *testing.T) {
	tokens, _ := NewTokens(bytes.Repeat([]byte{1}, 32), nil)
	var last uint64
	for range 5 {
		tok, err := tokens.Issue(Scope{Session: "s", Tool: "x", Action: operation.Read, Policy: testDigest}, time.Hour, 1)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tokens.parse(tok)
		if err != nil || c.Nonce <= last {
			t.Fatalf("nonce %d after %d (%v)", c.Nonce, last, err)
		}
		last = c.Nonce
	}
	tokens.EndSession("s")
	tok, _ := tokens.Issue(Scope{Session: "s", Tool: "x", Action: operation.Read, Policy: testDigest}, time.Hour, 1)
	if c, _ := tokens.parse(tok); c.Nonce != 6 {
		t.Fatalf("nonce restarted after EndSession: %d", c.Nonce)
	}
	if _, err := NewTokens([]byte("short"), nil); err == nil {
		t.Fatal("short key accepted")
	}
}

// FuzzTokenParse checks that no input but a token the authority issued
// parses, and that parsing never panics (age's FuzzMalleability idea:
// a canonical encoding has one spelling).
func FuzzTokenParse(f *testing.F) {
	tokens, _ := NewTokens(bytes.Repeat([]byte{1}, 32), func() time.Time { return time.Unix(1e9, 0) })
	good, _ := tokens.Issue(Scope{Session: "s", Tool: "fs.*", Action: operation.Read, Path: "/x/**", Policy: testDigest}, time.Hour, 2)
	f.Add(good)
	f.Add("fft1.e30.AAAA")
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := tokens.parse(tok)
		if err == nil && tok != good {
			t.Fatalf("a token that was never issued parsed: %q -> %+v", tok, c)
		}
	})
}

// FuzzCompile feeds arbitrary YAML to the loader (and through it, CEL):
// it must never panic, and an error means no engine at all.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		"rules:\n  - id: a\n    effect: allow\n    match: {argv: [go, test, ...]}\n",
		"rules:\n  - id: b\n    effect: block\n    match: {action: write, path: \"docs/**\"}\n    when: 'op.size > size(\"1MiB\")'\n",
		"rules:\n  - id: c\n    effect: approve\n    match: {host: \"*.x.com:443\"}\n    except: {tag: net}\n",
		"rules: [",
		"extensions: [a.star]\n",
		"rules:\n  - id: d\n    effect: block\n    match: {}\n    when: 'op.argv.exists(a, a.matches(\"^-f\"))'\n",
		"exec_capable:\n  programs:\n    - names: [go]\n      source: \"go help test: -exec\"\n      triggers:\n        - {option: -x, value: \"İk\", runs: shell}\n        - {positional: 2, runs: argv}\n        - {stdin: true, runs: code}\n  env:\n    - {name: \"X*\", runs: shell, source: s}\nrules:\n  - id: e\n    effect: allow\n    match: {exec_capable: true, written_by_agent: false}\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		e, err := Compile(Options{}, Source{Name: "f.yaml", Layer: LayerUser, Data: []byte(data)})
		if (e == nil) == (err == nil) {
			t.Fatalf("Compile returned engine=%v err=%v", e != nil, err)
		}
		if e != nil {
			e.Decide(context.Background(), operation.Operation{Tool: "shell.exec", Action: operation.Exec, CommandLine: "go test ./... > out", Session: operation.Session{Workspace: "/w"}})
		}
	})
}

// FuzzMatch checks the matchers against arbitrary patterns and inputs:
// no panic, and a literal pattern matches exactly itself.
func FuzzMatch(f *testing.F) {
	f.Add("docs/**/*.md", "/w/docs/a/b.md", "go test ...", "go test ./...")
	f.Add("**/**/**/**", "/a/b/c", "a ... b ... c", "a x b y c")
	f.Fuzz(func(t *testing.T, pat, p, argvPat, argv string) {
		if g, err := compilePathGlob(pat, "/home/u"); err == nil {
			g.match(p, "/w")
		}
		ap, err := compileArgv(strings.Fields(argvPat))
		if err == nil {
			ap.match(strings.Fields(argv), true)
			ap.match(strings.Fields(argv), false)
		}
		if !strings.ContainsAny(p, "*?") && !compileGlob(p).match(p) {
			t.Fatalf("literal %q does not match itself", p)
		}
		if wildMatch(pat, p) && !strings.ContainsAny(pat, "*?") && pat != p {
			t.Fatalf("literal pattern %q matched %q", pat, p)
		}
		if foldClean(p) && foldSlow(p) != p {
			t.Fatalf("foldClean(%q) but fold gives %q", p, foldSlow(p))
		}
		if h, err := compileHost(pat); err == nil && !strings.ContainsAny(pat, "*?:") && !h.match(pat, 443) {
			t.Fatalf("host pattern %q does not match itself", pat)
		}
	})
}

func TestUnitErrorsListForms(t *testing.T) {
	_, err := Compile(Options{}, Source{Name: "u.yaml", Layer: LayerUser, Data: []byte("rules:\n  - id: x\n    effect: block\n    match: {}\n    when: 'op.size > size(\"12 parsecs\")'\n")})
	if err == nil || !strings.Contains(err.Error(), "KiB") || !strings.Contains(err.Error(), "u.yaml:5:11") {
		t.Fatalf("error %v should list the accepted forms and name the position", err)
	}
	e := mustCompile(t, Options{}, "rules:\n  - id: x\n    effect: block\n    match: {}\n    when: 'op.size > size(\"1kB\") && duration(\"7d\") > duration(\"1h\")'\n")
	if d := e.Decide(t.Context(), operation.Operation{Tool: "t", Action: operation.Read, Size: 1001}); d.Rule != "x" {
		t.Fatalf("%v", d)
	}
	if d := e.Decide(t.Context(), operation.Operation{Tool: "t", Action: operation.Read, Size: 1000}); d.Rule == "x" {
		t.Fatalf("%v", d)
	}
}

func TestCELCostLimitFailsClosed(t *testing.T) {
	e := mustCompile(t, Options{}, `
rules:
  - id: heavy
    effect: block
    match: {}
    when: 'op.argv.all(a, op.argv.all(b, op.argv.all(c, a + b + c != "x")))'
`)
	argv := make([]string, 200)
	for i := range argv {
		argv[i] = "a"
	}
	d := e.Decide(t.Context(), operation.Operation{Tool: "t", Action: operation.Exec, Commands: []operation.Command{{Argv: argv}}})
	if d.Effect != Block {
		t.Fatalf("cost-limited block rule did not fail closed: %v", d)
	}
	found := false
	for _, m := range d.Matched {
		found = found || strings.Contains(m.Error, "cost")
	}
	if !found {
		t.Fatalf("no cost error reported: %v", d)
	}
}

func TestCanonicalize(t *testing.T) {
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	os.MkdirAll(dir+"/real/sub", 0o700)
	os.Symlink(dir+"/real", dir+"/l1")
	os.Symlink("l1/sub", dir+"/l2")
	os.Symlink("loop", dir+"/loop")
	for in, want := range map[string]string{
		"l2/x":          dir + "/real/sub/x",
		"l1/../l1/sub":  dir + "/real/sub",
		"./a//b/../c":   dir + "/a/c",
		"/etc/../etc/x": "/etc/x",
	} {
		got, err := Canonicalize(in, dir)
		if err != nil || got != want {
			t.Errorf("Canonicalize(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := Canonicalize("loop/x", dir); err == nil {
		t.Error("symlink loop accepted")
	}
	if _, err := Canonicalize("a\x00b", dir); !errors.Is(err, ErrBadPath) {
		t.Error("NUL accepted")
	}
}

func TestExtensionTimeLimitAndNoIO(t *testing.T) {
	src := Source{Name: "u.yaml", Layer: LayerUser, Data: []byte("extensions: [slow.star]\n"), Extensions: map[string][]byte{
		"slow.star": []byte("def decide(op):\n    n = 0\n    for i in range(100000000):\n        n += i\n    return \"allow\"\n"),
	}}
	e, err := Compile(Options{ExtensionSteps: 1 << 40, ExtensionTimeout: 20 * time.Millisecond}, src)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	d := e.Decide(t.Context(), operation.Operation{Tool: "x", Action: operation.Read})
	if d.Effect != Approve || d.Rule != "ext:slow.star" || !strings.Contains(d.Matched[0].Error, "time limit") {
		t.Fatalf("%v", d)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("time limit not enforced: %v", el)
	}
	for name, code := range map[string]string{
		"load.star":  "load(\"x.star\", \"y\")\ndef decide(op):\n    return None\n",
		"open.star":  "def decide(op):\n    return open(\"/etc/passwd\")\n",
		"nodef.star": "x = 1\n",
	} {
		src := Source{Name: "u.yaml", Layer: LayerUser, Data: []byte("extensions: [" + name + "]\n"), Extensions: map[string][]byte{name: []byte(code)}}
		_, err := Compile(Options{}, src)
		if err == nil {
			t.Errorf("%s compiled", name)
		}
	}
	for _, bad := range []string{"../x.star", "/etc/x.star", "x.py"} {
		_, err := Compile(Options{}, Source{Name: "u.yaml", Layer: LayerUser, Data: []byte("extensions: [\"" + bad + "\"]\n")})
		if err == nil || !strings.Contains(err.Error(), "u.yaml:1:") {
			t.Errorf("extension %q: %v", bad, err)
		}
	}
}

// FuzzWhen compiles arbitrary CEL: no panic, and what compiles evaluates
// within the cost limit without panicking.
func FuzzWhen(f *testing.F) {
	for _, s := range []string{`op.size > size("10MiB")`, `op.argv.exists(a, a == "-f")`, `op.session.mode == "strict" && duration("7d") > duration("1h")`, `size("x") == 1`, `op.path.matches("^/etc")`} {
		f.Add(s)
	}
	env, err := newCELEnv()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		p, err := env.compile(expr)
		if err != nil {
			return
		}
		_, _ = p.eval(&CELOp{Argv: []string{"go", "test"}, Env: noStrings, Tags: noStrings, Path: "/w/a"})
	})
}

// TestDigest: the digest names what decides, and only that.
func TestDigest(t *testing.T) {
	user := func(data string) Source { return Source{Name: "/u/policy.yaml", Layer: LayerUser, Data: []byte(data)} }
	rule := "rules:\n  - id: x\n    effect: block\n    match: {tool: net.fetch}\n"
	base := func() (Options, []Source) { return Options{Home: "/home/u"}, []Source{user(rule)} }
	digest := func(o Options, s []Source) string {
		t.Helper()
		e, err := Compile(o, s...)
		if err != nil {
			t.Fatal(err)
		}
		return e.Digest()
	}
	o, s := base()
	want := digest(o, s)
	if !isSignature(want) {
		t.Fatalf("digest %q is not 64 hex digits", want)
	}
	// Same inputs, same digest; a classifier or token store of another
	// identity changes nothing that decides.
	o.Tokens, _ = NewTokens(bytes.Repeat([]byte{9}, 32), nil)
	if got := digest(o, s); got != want {
		t.Errorf("same policy, digest %s != %s", got, want)
	}
	for _, c := range []struct {
		name   string
		change func(*Options, *[]Source)
	}{
		{"a rule's text", func(_ *Options, s *[]Source) { (*s)[0].Data = append([]byte("# edited\n"), (*s)[0].Data...) }},
		{"the file's name", func(_ *Options, s *[]Source) { (*s)[0].Name = "/v/policy.yaml" }},
		{"a project file", func(_ *Options, s *[]Source) {
			*s = append(*s, Source{Name: "/w/.fluffy/policy.yaml", Layer: LayerProject, Data: []byte("rules: []\n")})
		}},
		{"an extension", func(_ *Options, s *[]Source) {
			(*s)[0].Extensions = map[string][]byte{"x.star": []byte("def decide(op):\n    return None\n")}
		}},
		{"the default effect", func(o *Options, _ *[]Source) { o.Default = Block }},
		{"a protected path", func(o *Options, _ *[]Source) { o.Protected.Paths = []string{"/p"} }},
		{"home", func(o *Options, _ *[]Source) { o.Home = "/home/v" }},
		{"extension limits", func(o *Options, _ *[]Source) { o.ExtensionSteps = 7 }},
	} {
		o, s := base()
		c.change(&o, &s)
		if got := digest(o, s); got == want {
			t.Errorf("%s changed, the digest did not", c.name)
		}
	}
}

// TestTokenBoundToPolicy: a token approved under one policy turns approve
// into allow only in an engine with that policy; another says why it
// asks again, and does not use the token up.
func TestTokenBoundToPolicy(t *testing.T) {
	tokens, _ := NewTokens(bytes.Repeat([]byte{1}, 32), nil)
	before := mustCompile(t, Options{Tokens: tokens}, "")
	after := mustCompile(t, Options{Tokens: tokens}, "rules:\n  - id: y\n    effect: block\n    match: {tool: net.fetch}\n")
	op := operation.Operation{Tool: "shell.exec", Action: operation.Exec, Argv: []string{"make", "install"}, Session: operation.Session{ID: "s"}}
	tok, err := tokens.Issue(Scope{Session: "s", Tool: "shell.exec", Action: operation.Exec, Argv: op.Argv, Op: op.Signature(), Policy: before.Digest()}, time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	op.Tokens = []string{tok}
	d := after.Decide(context.Background(), op)
	if d.Effect != Approve || !strings.Contains(d.Reason, "the policy changed since this approval") {
		t.Fatalf("under a changed policy: %+v", d)
	}
	found := false
	for _, m := range d.Matched {
		found = found || m.Error == ErrTokenPolicy.Error()
	}
	if !found || d.Policy != after.Digest() {
		t.Errorf("decision %+v: want a token match with %v and the deciding policy's digest", d, ErrTokenPolicy)
	}
	if d := before.Decide(context.Background(), op); d.Effect != Allow {
		t.Errorf("under its own policy the token does not count: %+v", d)
	}
	// A scope without a policy digest is not issued.
	if _, err := tokens.Issue(Scope{Session: "s", Tool: "x", Action: operation.Read}, time.Hour, 1); !errors.Is(err, ErrTokenMalformed) {
		t.Errorf("issue without a policy digest = %v, want ErrTokenMalformed", err)
	}
}
