package tool

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

type readIn struct {
	Path  string `json:"path" jsonschema:"file to read, relative to the workspace"`
	Start int    `json:"start,omitempty" jsonschema:"first line, 1-based"`
	End   int    `json:"end,omitempty"`
	Mode  string `json:"mode,omitempty"`
	Edits []edit `json:"edits,omitempty"`
}

type edit struct {
	Old string `json:"old"`
	New string `json:"new"`
}

func readDef() Definition[readIn] {
	return Definition[readIn]{
		Name:        "fs.read",
		Description: "Read a file.",
		Action:      operation.Read,
		Tags:        []string{TagReads},
		Execution:   Execution{Class: FastPath},
		Refine: func(s *jsonschema.Schema) error {
			s.Properties["start"].Minimum = new(float64(1))
			s.Properties["mode"].Enum = []any{"text", "hex"}
			s.Properties["path"].MinLength = new(1)
			return nil
		},
		Normalize: func(ctx context.Context, r *Resolver, in *readIn, op *operation.Operation) error {
			p, err := r.Resolve(in.Path)
			if err != nil {
				return err
			}
			op.Paths = append(op.Paths, p)
			return nil
		},
		Run: func(ctx context.Context, in *readIn) (Result, error) {
			return Result{Output: []byte("read " + in.Path)}, nil
		},
	}
}

func mustTool[In any](t *testing.T, d Definition[In]) *Tool {
	t.Helper()
	tl, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func TestNewRefusesBadDefinitions(t *testing.T) {
	cases := map[string]func(d *Definition[readIn]){
		"bad name":             func(d *Definition[readIn]) { d.Name = "FS Read" },
		"dot at end":           func(d *Definition[readIn]) { d.Name = "fs." },
		"no description":       func(d *Definition[readIn]) { d.Description = "" },
		"bad action":           func(d *Definition[readIn]) { d.Action = "explode" },
		"fast path writes":     func(d *Definition[readIn]) { d.Action = operation.Write },
		"fast path write tag":  func(d *Definition[readIn]) { d.Tags = []string{TagWrites} },
		"fast path template":   func(d *Definition[readIn]) { d.Execution.Template = "default" },
		"sandbox, no template": func(d *Definition[readIn]) { d.Execution = Execution{Class: Sandbox}; d.Run = nil },
		"sandbox with Run":     func(d *Definition[readIn]) { d.Execution = Execution{Class: Sandbox, Template: "t"} },
		"sandbox, no Command":  func(d *Definition[readIn]) { d.Execution = Execution{Class: Sandbox, Template: "t"}; d.Run = nil },
		"kernel, read action":  func(d *Definition[readIn]) { d.Execution = Execution{Class: Kernel} },
		"kernel, no Run": func(d *Definition[readIn]) {
			d.Execution = Execution{Class: Kernel}
			d.Action = operation.Write
			d.Run = nil
		},
		"unknown class": func(d *Definition[readIn]) { d.Execution.Class = "cloud" },
		"no normalize":  func(d *Definition[readIn]) { d.Normalize = nil },
		"bad tag":       func(d *Definition[readIn]) { d.Tags = []string{"Has Space"} },
		"refine fails":  func(d *Definition[readIn]) { d.Refine = func(*jsonschema.Schema) error { return errors.New("no") } },
	}
	for name, mut := range cases {
		t.Run(name, func(t *testing.T) {
			d := readDef()
			mut(&d)
			if _, err := New(d); !errors.Is(err, ErrDefinition) {
				t.Fatalf("New = %v, want ErrDefinition", err)
			}
		})
	}
	if _, err := New(Definition[string]{Name: "x", Description: "x", Action: operation.Read, Execution: Execution{Class: FastPath},
		Normalize: func(context.Context, *Resolver, *string, *operation.Operation) error { return nil },
		Run:       func(context.Context, *string) (Result, error) { return Result{}, nil }}); !errors.Is(err, ErrDefinition) {
		t.Errorf("a non-struct input: %v", err)
	}
}

func TestSchemaFromGoType(t *testing.T) {
	tl := mustTool(t, readDef())
	var s map[string]any
	if err := json.Unmarshal(tl.InputSchema(), &s); err != nil {
		t.Fatal(err)
	}
	if s["type"] != "object" || s["additionalProperties"] == nil {
		t.Errorf("schema = %v", s)
	}
	if got := s["required"]; !cmp.Equal(got, []any{"path"}) {
		t.Errorf("required = %v", got)
	}
	props := s["properties"].(map[string]any)
	if d := props["path"].(map[string]any)["description"]; d != "file to read, relative to the workspace" {
		t.Errorf("path description = %v", d)
	}
}

func TestDecodeProblems(t *testing.T) {
	tl := mustTool(t, readDef())
	cases := []struct {
		name, args string
		want       []Problem
	}{
		{"missing required", `{}`, []Problem{{Path: "path", Expected: "a value (required)", Got: "nothing"}}},
		{"wrong type", `{"path": 3}`, []Problem{{Path: "path", Expected: "string", Got: "number 3"}}},
		{"not an integer", `{"path":"a","start":1.5}`, []Problem{{Path: "start", Expected: "integer", Got: "number 1.5"}}},
		{"below minimum", `{"path":"a","start":0}`, []Problem{{Path: "start", Expected: "a number ≥ 1", Got: "number 0"}}},
		{"enum", `{"path":"a","mode":"bin"}`, []Problem{{Path: "mode", Expected: `one of "text", "hex"`, Got: `string "bin"`}}},
		{"empty string", `{"path":""}`, []Problem{{Path: "path", Expected: "a string of at least 1 characters", Got: `string ""`}}},
		{"unknown property", `{"path":"a","pth":"b"}`, []Problem{{Path: "pth", Expected: "no such property (allowed: edits, end, mode, path, start)", Got: `string "b"`}}},
		{"case-folded property", `{"PATH":"a"}`, []Problem{{Path: "path", Expected: "a value (required)", Got: "nothing"}, {Path: "PATH", Expected: "no such property (allowed: edits, end, mode, path, start)", Got: `string "a"`}}},
		{"nested", `{"path":"a","edits":[{"old":"x","new":"y"},{"old":1}]}`, []Problem{{Path: "edits[1].new", Expected: "a value (required)", Got: "nothing"}, {Path: "edits[1].old", Expected: "string", Got: "number 1"}}},
		{"array not object", `[1]`, []Problem{{Expected: "a JSON object", Got: "an array of 1 items"}}},
		{"duplicate key", `{"path":"a","path":"/etc/passwd"}`, []Problem{{Expected: "one JSON object", Got: `duplicate key "path"`}}},
		// encoding/json would set one field from both; the schema saw one.
		{"duplicate key but for case", `{"path":"a","PATH":"/etc/passwd"}`, []Problem{{Expected: "one JSON object", Got: `duplicate key "PATH": "path" differs from it only in case, and names are matched without regard to case`}}},
		{"trailing data", `{"path":"a"} {"path":"b"}`, []Problem{{Expected: "one JSON object", Got: "data after the JSON object"}}},
		{"malformed", `{"path":`, []Problem{{Expected: "one JSON object", Got: "malformed JSON: unexpected end of input"}}},
		{"huge number", `{"path":"a","start":1e999}`, []Problem{{Expected: "one JSON object", Got: "number 1e999 out of range"}}},
		{"too deep", `{"path":"a","edits":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, []Problem{{Expected: "one JSON object", Got: "JSON nested deeper than 64 levels"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := tl.Decode([]byte(c.args))
			var ae *ArgsError
			if !errors.As(err, &ae) {
				t.Fatalf("Decode = %v, want *ArgsError", err)
			}
			if d := cmp.Diff(c.want, ae.Problems); d != "" {
				t.Errorf("problems (-want +got):\n%s\nmessage:\n%s", d, err)
			}
		})
	}
	if _, err := tl.Decode(make([]byte, MaxArgsBytes+1)); err == nil {
		t.Error("oversized arguments accepted")
	}
}

func TestDecodeNormalizeRun(t *testing.T) {
	tl := mustTool(t, readDef())
	args, err := tl.Decode([]byte(`{"path":"src/main.go","start":3,"edits":null}`))
	if err != nil {
		t.Fatal(err)
	}
	in := args.Value().(*readIn)
	if in.Path != "src/main.go" || in.Start != 3 {
		t.Errorf("decoded %+v", in)
	}
	ws := t.TempDir()
	r, err := NewResolver(ResolverOptions{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	op, err := tl.Normalize(t.Context(), r, args, operation.Session{ID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	want := &operation.Operation{Tool: "fs.read", Action: operation.Read, Tags: []string{TagReads}, Session: operation.Session{ID: "s1"},
		Paths: []operation.Path{{Abs: r.Workspace() + "/src/main.go", Raw: "src/main.go", InWorkspace: true}}}
	if d := cmp.Diff(want, op); d != "" {
		t.Errorf("operation (-want +got):\n%s", d)
	}
	res, err := tl.Run(t.Context(), args)
	if err != nil || string(res.Output) != "read src/main.go" {
		t.Errorf("Run = %q, %v", res.Output, err)
	}
	// Arguments of one tool cannot be used with another.
	other := readDef()
	other.Name = "fs.read2"
	t2 := mustTool(t, other)
	if _, err := t2.Run(t.Context(), args); err == nil {
		t.Error("Run accepted another tool's arguments")
	}
}

func TestRegistry(t *testing.T) {
	reg := NewRegistry()
	read := mustTool(t, readDef())
	if err := reg.Register(read); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(read); !errors.Is(err, ErrDefinition) {
		t.Errorf("duplicate Register = %v", err)
	}
	clash := readDef()
	clash.Name = "fs__read"
	if err := reg.Register(mustTool(t, clash)); !errors.Is(err, ErrDefinition) {
		t.Errorf("wire-name clash Register = %v", err)
	}
	w := readDef()
	w.Name = "fs.write"
	w.Action = operation.Write
	w.Tags = []string{TagWrites}
	w.Execution = Execution{Class: Kernel}
	must(t, reg.Register(mustTool(t, w)))
	for _, name := range []string{"fs.read", "fs__read"} {
		if got, err := reg.Lookup(name); err != nil || got != read {
			t.Errorf("Lookup(%s) = %v, %v", name, got, err)
		}
	}
	_, err := reg.Lookup("fs.raed")
	if !errors.Is(err, ErrUnknownTool) || !strings.Contains(err.Error(), "did you mean fs.read") {
		t.Errorf("Lookup(fs.raed) = %v", err)
	}
	var names []string
	for _, tl := range reg.List() {
		names = append(names, tl.Name())
	}
	if !cmp.Equal(names, []string{"fs.read", "fs.write"}) {
		t.Errorf("List = %v", names)
	}
	wt, _ := reg.Lookup("fs.write")
	args, err := wt.Decode([]byte(`{"path":"x"}`))
	must(t, err)
	if _, err := wt.Command(t.Context(), args); err == nil {
		t.Error("a kernel tool gave a sandbox command")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{}`, `{"path":"a"}`, `{"path":"a","edits":[{"old":"x","new":"y"}]}`, `{"path":1}`, `[]`, `{"a":{"b":[1,2,{"c":null}]}}`, `{"path":"a","path":"b"}`} {
		f.Add([]byte(s))
	}
	tl, err := New(readDef())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		args, err := tl.Decode(raw)
		if err != nil {
			var ae *ArgsError
			if !errors.As(err, &ae) || len(ae.Problems) == 0 {
				t.Fatalf("Decode error %v is not an *ArgsError with problems", err)
			}
			return
		}
		// Whatever is accepted is valid for the library and decodes.
		in := args.Value().(*readIn)
		if in.Path == "" {
			t.Fatalf("accepted without a path: %q", raw)
		}
		b, _ := json.Marshal(in)
		if _, err := tl.Decode(b); err != nil {
			t.Fatalf("re-encoded arguments refused: %v", err)
		}
	})
}

// TestGivenSchema registers a tool the way an MCP server describes one:
// a JSON Schema, no Go type.
func TestGivenSchema(t *testing.T) {
	var schema jsonschema.Schema
	must(t, json.Unmarshal([]byte(`{"type":"object","properties":{"query":{"type":"string","maxLength":5},"limit":{"type":"integer"}},"required":["query"],"additionalProperties":false}`), &schema))
	d := Definition[map[string]any]{
		Name: "mcp.search", Description: "Search.", Action: operation.Net, Tags: []string{TagNet},
		Execution: Execution{Class: Sandbox, Template: "mcp"},
		Schema:    &schema,
		Normalize: func(context.Context, *Resolver, *map[string]any, *operation.Operation) error { return nil },
		Command:   func(context.Context, *map[string]any) (Command, error) { return Command{Argv: []string{"mcp"}}, nil },
	}
	tl := mustTool(t, d)
	args, err := tl.Decode([]byte(`{"query":"cats","limit":3}`))
	must(t, err)
	if m := *args.Value().(*map[string]any); m["query"] != "cats" || m["limit"] != float64(3) {
		t.Errorf("decoded %v", m)
	}
	_, err = tl.Decode([]byte(`{"query":"kittens"}`))
	var ae *ArgsError
	if !errors.As(err, &ae) || ae.Problems[0] != (Problem{Path: "query", Expected: "a string of at most 5 characters", Got: `string "kittens"`}) {
		t.Errorf("Decode = %v", err)
	}
	bad := d
	bad.Schema = &jsonschema.Schema{Type: "string"}
	if _, err := New(bad); !errors.Is(err, ErrDefinition) {
		t.Errorf("a non-object schema: %v", err)
	}
}

// BenchmarkDecodeNormalize measures steps 1 and 2 of a fast-path call:
// lookup, strict parse, schema validation, typed decode, path resolution.
func BenchmarkDecodeNormalize(b *testing.B) {
	ws := b.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "src/pkg"), 0o755); err != nil {
		b.Fatal(err)
	}
	reg := NewRegistry()
	tl, err := New(readDef())
	if err != nil {
		b.Fatal(err)
	}
	if err := reg.Register(tl); err != nil {
		b.Fatal(err)
	}
	r, err := NewResolver(ResolverOptions{Workspace: ws})
	if err != nil {
		b.Fatal(err)
	}
	raw := []byte(`{"path":"src/pkg/main.go","start":10,"end":80}`)
	sess := operation.Session{ID: "s"}
	for b.Loop() {
		t, err := reg.Lookup("fs__read")
		if err != nil {
			b.Fatal(err)
		}
		args, err := t.Decode(raw)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := t.Normalize(b.Context(), r, args, sess); err != nil {
			b.Fatal(err)
		}
	}
}
