package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docsCatalogue reads the table of the "Event catalogue" section of
// docs/audit.md: for each kind, whether it is synchronous and its members
// (name -> optional), nil for "any members".
func docsCatalogue(t *testing.T) (kinds []Kind, sync map[Kind]bool, members map[Kind]map[string]bool) {
	t.Helper()
	f, err := os.Open("../../docs/audit.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sync, members = map[Kind]bool{}, map[Kind]map[string]bool{}
	member := regexp.MustCompile("`([a-z0-9_]+)`(\\??)")
	sc := bufio.NewScanner(f)
	in, rows := false, 0
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "## Event catalogue":
			in = true
			continue
		case !in:
			continue
		case strings.HasPrefix(line, "## "):
			in = false
			continue
		case !strings.HasPrefix(line, "| `"):
			if rows > 0 && line == "" {
				in = false
			}
			continue
		}
		rows++
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			t.Fatalf("docs/audit.md: catalogue row %q: want 4 cells (kind, written by, durable, payload members)", line)
		}
		k := Kind(strings.Trim(strings.TrimSpace(cells[0]), "`"))
		if _, dup := members[k]; dup || slices.Contains(kinds, k) {
			t.Errorf("docs/audit.md: kind %s twice in the catalogue", k)
		}
		kinds = append(kinds, k)
		sync[k] = strings.TrimSpace(cells[2]) == "sync"
		if strings.TrimSpace(cells[3]) == "any members" {
			members[k] = nil
			continue
		}
		m := map[string]bool{}
		for _, g := range member.FindAllStringSubmatch(cells[3], -1) {
			m[g[1]] = g[2] == "?"
		}
		members[k] = m
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(kinds) == 0 {
		t.Fatal("docs/audit.md: no table under \"## Event catalogue\"")
	}
	return kinds, sync, members
}

// payloadMembers returns the JSON members of a payload type (name ->
// optional: omitempty, or in an embedded pointer part), nil for a map.
func payloadMembers(t reflect.Type) map[string]bool {
	if t.Kind() == reflect.Map {
		return nil
	}
	m := map[string]bool{}
	var walk func(t reflect.Type, optional bool)
	walk = func(t reflect.Type, optional bool) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if f.Anonymous && tag == "" {
				if f.Type.Kind() == reflect.Pointer {
					walk(f.Type.Elem(), true)
				} else {
					walk(f.Type, optional)
				}
				continue
			}
			if !f.IsExported() || tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if name == "" {
				name = f.Name
			}
			m[name] = optional || slices.Contains(strings.Split(opts, ","), "omitempty")
		}
	}
	walk(t, false)
	return m
}

// TestCatalogueMatchesDocs: docs/audit.md's event catalogue and the
// payload types of catalogue.go list the same kinds, in the same order,
// with the same durability and the same members, optional alike.
func TestCatalogueMatchesDocs(t *testing.T) {
	docKinds, docSync, docMembers := docsCatalogue(t)
	var kinds []Kind
	for _, p := range Catalogue() {
		k := p.Kind()
		kinds = append(kinds, k)
		want, ok := docMembers[k]
		if !ok {
			t.Errorf("kind %s (%T) is not in docs/audit.md's event catalogue", k, p)
			continue
		}
		if docSync[k] != k.Synchronous() {
			t.Errorf("%s: docs/audit.md says sync=%v, Kind.Synchronous says %v", k, docSync[k], k.Synchronous())
		}
		got := payloadMembers(reflect.TypeOf(p))
		if (got == nil) != (want == nil) {
			t.Errorf("%s: free-form payload in the docs: %v, in %T: %v", k, want == nil, p, got == nil)
			continue
		}
		for name, opt := range got {
			if dopt, ok := want[name]; !ok {
				t.Errorf("%s: member %q of %T is not in docs/audit.md", k, name, p)
			} else if dopt != opt {
				t.Errorf("%s: member %q is optional in docs/audit.md: %v, in %T: %v", k, name, dopt, p, opt)
			}
		}
		for name := range want {
			if _, ok := got[name]; !ok {
				t.Errorf("%s: member %q of docs/audit.md is not in %T", k, name, p)
			}
		}
	}
	for _, k := range docKinds {
		if !slices.Contains(kinds, k) {
			t.Errorf("kind %s of docs/audit.md has no payload type in catalogue.go", k)
		}
	}
	if !t.Failed() && !slices.Equal(kinds, docKinds) {
		t.Errorf("order differs:\n catalogue.go %v\n docs         %v", kinds, docKinds)
	}
}

// TestCatalogueKinds: every kind is well formed and once in the
// catalogue, and each payload type's zero value reads back as itself.
func TestCatalogueKinds(t *testing.T) {
	seen := map[Kind]bool{}
	for _, p := range Catalogue() {
		k := p.Kind()
		if !ValidKind(k) || seen[k] {
			t.Errorf("kind %q: valid %v, twice %v", k, ValidKind(k), seen[k])
		}
		seen[k] = true
		if k.LogOnly() != (k == KindAuditPrune) {
			t.Errorf("%s: LogOnly %v", k, k.LogOnly())
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		back, err := DecodePayload(k, b)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if reflect.TypeOf(back) != reflect.TypeOf(p) {
			t.Errorf("%s: decoded as %T, want %T", k, back, p)
		}
	}
	if _, err := DecodePayload("test.unknown", []byte("{}")); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("DecodePayload(test.unknown) = %v, want ErrUnknownKind", err)
	}
}

// TestToolReadEncode: the fast path's hand-written encoding of tool.read
// gives the bytes encoding/json and Canonicalize give for the same value,
// so the struct's tags (the schema) and the encoder cannot drift apart.
func TestToolReadEncode(t *testing.T) {
	for _, r := range []ToolRead{
		{},
		{Call: "c1", Tool: "fs.read", DurationUS: 12, OutputBytes: 5, ShownBytes: 5, ArgsSHA256: SHA256{1, 2}, ShownSHA256: SHA256{0xff},
			GatePolicy: GateSummary{Effect: "allow", Rule: "builtin.read"}, GateState: GateSummary{Effect: "allow", Rule: "not_gated"}},
		{Call: "c2", Tool: "search.grep", Binary: true, CutBytes: 1 << 40, Error: "no such file: \x1b[31m\"x\"\u2028", IsError: true,
			Paths: []string{"/w/a", "/w/b\xff"}, Redactions: 3, Stripped: 2, GatePolicy: GateSummary{Rule: "é"}},
	} {
		var o Object
		r.Encode(&o)
		if o.Err() != nil {
			t.Fatal(o.Err())
		}
		j, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Canonicalize(j)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(o.Bytes(), want) {
			t.Errorf("Encode\n got %s\nwant %s", o.Bytes(), want)
		}
	}
}

// TestAppendRefusesPayloadOfAnotherKind: a catalogue payload goes only
// with its own kind.
func TestAppendRefusesPayloadOfAnotherKind(t *testing.T) {
	l, _ := testLog(t, Options{})
	if _, err := l.Append(t.Context(), Entry{Kind: KindExecEnd, Actor: "cli", Payload: ExecStart{Argv: []string{"true"}}}); !errors.Is(err, ErrPayloadKind) {
		t.Errorf("exec.end with an ExecStart payload: %v, want ErrPayloadKind", err)
	}
	if _, err := l.Append(t.Context(), Entry{Kind: KindExecEnd, Actor: "cli", Payload: &ExecEnd{Argv: []string{"true"}, Process: &Process{}}}); err != nil {
		t.Errorf("exec.end with an *ExecEnd payload: %v", err)
	}
}

// TestDecodeOldPayloads: entries written before the catalogue still read:
// exec.end and net.end with duration_ms, gate.state after a command with
// its decision at the top.
func TestDecodeOldPayloads(t *testing.T) {
	p, err := DecodePayload(KindExecEnd, []byte(`{"argv":["go","test"],"duration_ms":7,"exit_code":3,"killed":"","limits_hit":[],"signal":0,"template":"code-executor","warnings":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if e := p.(ExecEnd); e.DurationUS != 7000 || e.Process == nil || e.ExitCode != 3 || e.ToolOutput != nil || e.Template != "code-executor" {
		t.Errorf("old exec.end read as %+v (process %+v)", e, e.Process)
	}
	p, err = DecodePayload(KindExecEnd, []byte(`{"call":"c1","duration_us":9,"is_error":false,"output_bytes":4,"shown_bytes":4,"shown_sha256":"`+strings.Repeat("ab", 32)+`","cut_bytes":0,"redactions":0,"stripped":0,"binary":false,"tool":"shell.exec"}`))
	if err != nil {
		t.Fatal(err)
	}
	if e := p.(ExecEnd); e.DurationUS != 9 || e.ToolOutput == nil || e.OutputBytes != 4 || e.ShownSHA256[0] != 0xab || e.Process != nil {
		t.Errorf("router exec.end read as %+v", e)
	}
	p, err = DecodePayload(KindNetEnd, []byte(`{"id":"a1","duration_ms":2,"status":200}`))
	if err != nil {
		t.Fatal(err)
	}
	if e := p.(NetEnd); e.DurationUS != 2000 || e.Status != 200 || e.ID != "a1" {
		t.Errorf("old net.end read as %+v", e)
	}
	p, err = DecodePayload(KindGateState, []byte(`{"after_exec":true,"allow":false,"call":"c1","code":"red_needs_test","reason":"write a test","tool":"shell.exec","written":["a.go"]}`))
	if err != nil {
		t.Fatal(err)
	}
	g := p.(GateState)
	if d, _ := g.Decision.(map[string]any); !g.AfterExec || d["allow"] != false || d["code"] != "red_needs_test" || d["reason"] != "write a test" || len(g.Written) != 1 {
		t.Errorf("old gate.state read as %+v", g)
	}
}
