package policy

import (
	"bytes"
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rogpeppe/go-internal/txtar"
	"go.yaml.in/yaml/v3"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/units"
)

var update = flag.Bool("update", false, "rewrite the want section of testdata/cases/*.txtar")

// caseOp is one step of a normative case: an operation to decide, or a
// token to issue, or the clock to advance.
type caseOp struct {
	Tool    string        `yaml:"tool"`
	Action  string        `yaml:"action"`
	Paths   []string      `yaml:"paths"`
	Hosts   []string      `yaml:"hosts"`
	Argv    []string      `yaml:"argv"`
	Shell   string        `yaml:"shell"`
	Size    string        `yaml:"size"`
	Mode    string        `yaml:"mode"`
	Session string        `yaml:"session"`
	Tags    []string      `yaml:"tags"`
	Tokens  []string      `yaml:"tokens"`
	Issue   *caseToken    `yaml:"issue"`
	Advance string        `yaml:"advance"`
	Repeat  int           `yaml:"repeat"`
	Note    string        `yaml:"note"`
	Raw     *rawOperation `yaml:"raw"`
	// Written lists files the agent wrote in the session (workspace
	// relative), for op.AgentWritten.
	Written []string `yaml:"written"`
	// Untrusted, when set, marks the session as having read untrusted
	// data from this source (op.session.untrusted).
	Untrusted string `yaml:"untrusted"`
}

// rawOperation bypasses normalization, to test the engine's own defences.
type rawOperation struct {
	Tool   string   `yaml:"tool"`
	Action string   `yaml:"action"`
	Paths  []string `yaml:"paths"`
	Argv   []string `yaml:"argv"`
}

type caseToken struct {
	Name    string   `yaml:"name"`
	Session string   `yaml:"session"`
	Tool    string   `yaml:"tool"`
	Action  string   `yaml:"action"`
	Path    string   `yaml:"path"`
	Host    string   `yaml:"host"`
	Argv    []string `yaml:"argv"`
	TTL     string   `yaml:"ttl"`
	Uses    int      `yaml:"uses"`
	// For binds the token to the signature of this operation (as the
	// ops list writes one); a token with an argv and no for is bound to
	// the operation of its own tool, action and argv.
	For *caseOp `yaml:"for"`
}

// caseEnv is the world a case runs in: a temporary workspace, data
// directory, home and binary, and their $NAMES for the files.
type caseEnv struct {
	root, ws, data, home, config, bin string
}

func newCaseEnv(t *testing.T) caseEnv {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := caseEnv{root: root, ws: root + "/ws", data: root + "/data", home: root + "/home", bin: root + "/bin/fluffy"}
	e.config = e.home + "/.config/fluffy"
	for _, d := range []string{e.ws + "/.fluffy", e.data + "/keys", e.config, filepath.Dir(e.bin)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{e.data + "/audit.db", e.data + "/fluffy.db", e.data + "/keys/checkpoint.key", e.bin} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e caseEnv) expand(s string) string {
	return strings.NewReplacer("LONGPATH", strings.Repeat("a/", 3000), "LONGLINE", "echo "+strings.Repeat("x", 70000), "$WS", e.ws, "$DATA", e.data, "$HOME", e.home, "$CONFIG", e.config, "$BIN", e.bin, "$ROOT", e.root).Replace(s)
}

func (e caseEnv) unexpand(s string) string {
	return strings.NewReplacer(e.ws, "$WS", e.data, "$DATA", e.config, "$CONFIG", e.home, "$HOME", e.bin, "$BIN", e.root, "$ROOT").Replace(s)
}

func (e caseEnv) protected() Protected {
	return Protected{
		Paths:  []string{e.data, e.config, e.ws + "/.fluffy", e.bin},
		Secret: []string{e.data + "/keys"},
	}
}

// setup runs the setup section: "mkdir P", "file P", "symlink P -> TARGET".
func (e caseEnv) setup(t *testing.T, text string) {
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(e.expand(line))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		verb, rest, _ := strings.Cut(line, " ")
		var err error
		switch verb {
		case "mkdir":
			err = os.MkdirAll(rest, 0o700)
		case "file":
			err = os.WriteFile(rest, []byte("x"), 0o600)
		case "symlink":
			link, target, ok := strings.Cut(rest, " -> ")
			if !ok {
				t.Fatalf("setup: %q: want symlink LINK -> TARGET", line)
			}
			err = os.Symlink(target, link)
		default:
			t.Fatalf("setup: unknown verb %q", verb)
		}
		if err != nil {
			t.Fatalf("setup %q: %v", line, err)
		}
	}
}

// fakeClassifier says yes when the operation's argv, path or host contains
// the word after "mentions " in the instruction, and fails when the
// instruction says "FAIL". It counts calls.
type fakeClassifier struct{ calls int }

func (f *fakeClassifier) Classify(_ context.Context, instruction string, op *CELOp) (bool, error) {
	f.calls++
	if strings.Contains(instruction, "FAIL") {
		return false, fmt.Errorf("model unavailable")
	}
	_, word, _ := strings.Cut(instruction, "mentions ")
	word = strings.Fields(word + " ")[0]
	hay := strings.Join(op.Argv, " ") + " " + op.Path + " " + op.Host
	return word != "" && strings.Contains(hay, word), nil
}

var caseTitleRE = regexp.MustCompile(`^# (\d{3}) (.+)$`)

// TestCases runs every normative case in testdata/cases: each file is one
// numbered case of docs/policy.md, with its policy files, a setup, the
// operations and the expected decisions (go test -update rewrites them).
func TestCases(t *testing.T) {
	files, err := filepath.Glob("testdata/cases/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 30 {
		t.Fatalf("%d normative cases, want at least 30", len(files))
	}
	doc, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, file := range files {
		ar, err := txtar.ParseFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m := caseTitleRE.FindStringSubmatch(strings.SplitN(string(ar.Comment), "\n", 2)[0])
		if m == nil {
			t.Fatalf("%s: first line must be '# NNN title'", file)
		}
		if prev, ok := seen[m[1]]; ok {
			t.Fatalf("%s: case number %s already used by %s", file, m[1], prev)
		}
		seen[m[1]] = file
		if !bytes.Contains(doc, []byte(fmt.Sprintf("**%s. %s**", m[1], m[2]))) {
			t.Errorf("docs/policy.md does not list case %s as **%s. %s**", file, m[1], m[2])
		}
		t.Run(filepath.Base(file), func(t *testing.T) {
			got := runCase(t, ar)
			if *update {
				for i := range ar.Files {
					if ar.Files[i].Name == "want" {
						ar.Files[i].Data = []byte(got)
					}
				}
				if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			var want string
			for _, f := range ar.Files {
				if f.Name == "want" {
					want = string(f.Data)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", m[2], diff)
			}
		})
	}
}

func runCase(t *testing.T, ar *txtar.Archive) string {
	env := newCaseEnv(t)
	section := map[string]string{}
	for _, f := range ar.Files {
		section[f.Name] = env.expand(string(f.Data))
	}
	env.setup(t, section["setup"])
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	tokens, err := NewTokens(bytes.Repeat([]byte{7}, 32), clock)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewTokens(bytes.Repeat([]byte{8}, 32), clock)
	var srcs []Source
	for _, name := range []string{"user.yaml", "project.yaml"} {
		data, ok := section[name]
		if !ok {
			continue
		}
		layer := LayerUser
		if name == "project.yaml" {
			layer = LayerProject
		}
		exts := map[string][]byte{}
		for k, v := range section {
			if strings.HasSuffix(k, ".star") {
				exts[k] = []byte(v)
			}
		}
		srcs = append(srcs, Source{Name: name, Layer: layer, Data: []byte(data), Extensions: exts})
	}
	def := Approve
	if d, ok := section["default"]; ok {
		def, err = ParseEffect(strings.TrimSpace(d))
		if err != nil {
			t.Fatal(err)
		}
	}
	cls := &fakeClassifier{}
	eng, err := Compile(Options{Default: def, Protected: env.protected(), Home: env.home, Tokens: tokens, Classifier: cls,
		ExtensionSteps: 10_000, ExtensionTimeout: time.Second}, srcs...)
	var out strings.Builder
	if err != nil {
		out.WriteString("load error:\n")
		for _, line := range strings.Split(err.Error(), "\n")[1:] {
			out.WriteString("  " + env.unexpand(line) + "\n")
		}
		return out.String()
	}
	var ops []caseOp
	dec := yaml.NewDecoder(strings.NewReader(section["ops.yaml"]))
	dec.KnownFields(true)
	if err := dec.Decode(&ops); err != nil {
		t.Fatalf("ops.yaml: %v", err)
	}
	issued := map[string]string{}
	n := 0
	for _, c := range ops {
		if c.Advance != "" {
			d, err := units.ParseDuration(c.Advance)
			if err != nil {
				t.Fatal(err)
			}
			now = now.Add(d.Std())
		}
		if it := c.Issue; it != nil {
			ttl, err := units.ParseDuration(it.TTL)
			if err != nil {
				t.Fatal(err)
			}
			sess := it.Session
			if sess == "" {
				sess = "s1"
			}
			sc := Scope{Session: sess, Tool: it.Tool, Action: operation.Action(it.Action), Path: it.Path, Host: it.Host, Argv: it.Argv, Policy: eng.Digest()}
			bind := it.For
			if bind == nil && len(it.Argv) > 0 {
				bind = &caseOp{Tool: it.Tool, Action: it.Action, Argv: it.Argv, Session: sess}
			}
			if bind != nil {
				op, err := bind.operation(env, nil, other)
				if err != nil {
					t.Fatalf("issue %s: for: %v", it.Name, err)
				}
				sc.Op = op.Signature()
			}
			tok, err := tokens.Issue(sc, ttl.Std(), it.Uses)
			if err != nil {
				t.Fatalf("issue %s: %v", it.Name, err)
			}
			issued[it.Name] = tok
		}
		if c.Tool == "" && c.Raw == nil {
			continue
		}
		repeat := max(c.Repeat, 1)
		for range repeat {
			n++
			op, err := c.operation(env, issued, other)
			prefix := fmt.Sprintf("%d", n)
			if c.Note != "" {
				prefix += " (" + c.Note + ")"
			}
			if err != nil {
				fmt.Fprintf(&out, "%s: normalize error: %s\n", prefix, env.unexpand(err.Error()))
				continue
			}
			d := eng.Decide(context.Background(), op)
			fmt.Fprintf(&out, "%s: %s by %s on %s\n", prefix, d.Effect, d.Rule, env.unexpand(d.Subject))
			var lines []string
			for _, m := range d.Matched {
				l := fmt.Sprintf("    %s %s on %s", m.Effect, m.Rule, env.unexpand(m.Subject))
				if m.Error != "" {
					l += " (error: " + env.unexpand(m.Error) + ")"
				}
				lines = append(lines, l)
			}
			sort.Strings(lines)
			for _, l := range lines {
				out.WriteString(l + "\n")
			}
		}
	}
	if cls.calls > 0 {
		fmt.Fprintf(&out, "classifier calls: %d\n", cls.calls)
	}
	return out.String()
}

func (c caseOp) operation(env caseEnv, issued map[string]string, other *Tokens) (operation.Operation, error) {
	if r := c.Raw; r != nil {
		op := operation.Operation{Tool: r.Tool, Action: operation.Action(r.Action), Argv: r.Argv, Session: operation.Session{ID: "s1", Workspace: env.ws}}
		for _, p := range r.Paths {
			op.Paths = append(op.Paths, operation.Path{Abs: p, InWorkspace: true})
		}
		return op, nil
	}
	sess := c.Session
	if sess == "" {
		sess = "s1"
	}
	op := operation.Operation{Tool: c.Tool, Action: operation.Action(c.Action), Argv: c.Argv, CommandLine: c.Shell, Tags: c.Tags,
		Session: operation.Session{ID: sess, Mode: c.Mode, Workspace: env.ws, Untrusted: c.Untrusted != "", UntrustedSource: c.Untrusted}}
	if c.Size != "" {
		s, err := units.ParseSize(c.Size)
		if err != nil {
			return op, err
		}
		op.Size = int64(s)
	}
	for _, p := range c.Paths {
		op.Paths = append(op.Paths, operation.Path{Raw: p})
	}
	for _, h := range c.Hosts {
		name, port, _ := strings.Cut(h, ":")
		var n int
		fmt.Sscan(port, &n)
		op.Hosts = append(op.Hosts, operation.Host{Name: name, Port: n})
	}
	for _, name := range c.Tokens {
		mod, base, ok := strings.Cut(name, ":")
		if !ok {
			base, mod = mod, ""
		}
		tok := issued[base]
		switch mod {
		case "":
		case "forged":
			// Flip one byte of the payload, keep the signature.
			b := []byte(tok)
			b[len(tokenPrefix)+3] ^= 1
			tok = string(b)
		case "otherkey":
			// Same claims signed with another key.
			body := tok[:strings.LastIndexByte(tok, '.')]
			tok = body + "." + b64(other.mac(body))
		default:
			return op, fmt.Errorf("unknown token modifier %q", mod)
		}
		op.Tokens = append(op.Tokens, tok)
	}
	if err := Normalize(&op, env.ws); err != nil {
		return op, err
	}
	for _, w := range c.Written {
		p, err := Canonicalize(w, env.ws)
		if err != nil {
			return op, err
		}
		op.AgentWritten = append(op.AgentWritten, p)
	}
	return op, nil
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
