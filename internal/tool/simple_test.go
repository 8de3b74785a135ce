package tool

import (
	"encoding/json"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

// simpleCases are argument types whose inferred schemas are simple (or
// deliberately not), with instances valid and invalid for them.
type simpleA struct {
	Path  string   `json:"path"`
	Start int      `json:"start,omitempty"`
	Ratio float64  `json:"ratio,omitempty"`
	Deep  bool     `json:"deep,omitempty"`
	Globs []string `json:"globs,omitempty"`
	Grid  [][]int  `json:"grid,omitempty"`
	Opt   *int     `json:"opt,omitempty"`
}

type simpleB struct {
	Name string `json:"name" jsonschema:"the name"`
}

// notSimpleC has a nested object and a map: the library only.
type notSimpleC struct {
	In  simpleB           `json:"in"`
	Env map[string]string `json:"env,omitempty"`
}

func simpleSchemas(t testing.TB) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	for _, f := range []func() (*jsonschema.Schema, error){
		func() (*jsonschema.Schema, error) { return jsonschema.For[simpleA](nil) },
		func() (*jsonschema.Schema, error) { return jsonschema.For[simpleB](nil) },
		func() (*jsonschema.Schema, error) { return jsonschema.For[notSimpleC](nil) },
	} {
		s, err := f()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	// Hand-written: keywords the fast check does not know make it
	// decline.
	for _, js := range []string{
		`{"type":"object","properties":{"p":{"type":"string","minLength":3}},"additionalProperties":false}`,
		`{"type":"object","properties":{"p":{"type":"string","enum":["a"]}},"additionalProperties":false}`,
		`{"type":"object","properties":{"p":{"type":"string","format":"email"}},"additionalProperties":false}`,
		`{"type":"object","properties":{"p":{"type":"integer"}},"additionalProperties":false,"maxProperties":0}`,
		`{"type":"object","properties":{"p":{"type":"integer"}},"required":["q"],"additionalProperties":false}`,
		`{"type":"object","properties":{"p":{"type":"integer"}}}`,
		`{"type":"object","properties":{"p":{"type":["integer","null"]},"a":{"type":"array","items":{"type":"string"}}},"additionalProperties":false}`,
		`{"type":"object","properties":{"p":{"type":"number"}},"additionalProperties":{"not":{"type":"string"}}}`,
		`{"type":"object","properties":{"a":{"type":"array"}},"additionalProperties":false}`,
	} {
		var s jsonschema.Schema
		if err := json.Unmarshal([]byte(js), &s); err != nil {
			t.Fatal(err)
		}
		out = append(out, &s)
	}
	return out
}

var simpleInstances = []string{
	`{}`, `{"path":"a"}`, `{"path":"a","start":3}`, `{"path":"a","start":3.5}`, `{"path":"a","start":1e3}`,
	`{"path":"a","start":-0}`, `{"path":"a","start":"3"}`, `{"path":1}`, `{"path":null}`, `{"path":"a","x":1}`,
	`{"path":"a","ratio":0.5,"deep":true,"globs":["*.go","b"]}`, `{"path":"a","globs":["a",1]}`, `{"path":"a","globs":"a"}`,
	`{"path":"a","globs":null}`, `{"path":"a","grid":[[1,2],[3]]}`, `{"path":"a","grid":[[1.5]]}`, `{"path":"a","grid":[1]}`,
	`{"path":"a","opt":null}`, `{"path":"a","opt":2}`, `{"path":"a","deep":"yes"}`, `{"name":"n"}`, `{"name":""}`,
	`{"name":{"a":1}}`, `{"in":{"name":"x"}}`, `{"in":{"name":"x","y":1},"env":{"a":"b"}}`, `{"p":"abcd"}`, `{"p":"a"}`,
	`{"p":1}`, `{"p":1.5}`, `{"p":null}`, `{"a":[1,"x"]}`, `{"a":["x"],"p":null}`, `{"a":[],"p":-3}`, `{"p":2,"q":1}`, `{"q":"s"}`, `{"q":1}`, `{"path":"a","start":1e308}`,
}

// checkSimple fails when the fast check passes an instance the library
// refuses.
func checkSimple(t testing.TB, s *jsonschema.Schema, raw string) (taken bool) {
	ss := compileSimple(s)
	if ss == nil {
		return false
	}
	v, err := strictParse([]byte(raw))
	if err != nil {
		return false
	}
	m, ok := v.(map[string]any)
	if !ok || !ss.valid(m) {
		return false
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Validate(m); err != nil {
		js, _ := json.Marshal(s)
		t.Fatalf("fast check passed %s against %s; the library refuses: %v", raw, js, err)
	}
	return true
}

// TestSimpleSchemaAgrees: the fast validity check never passes what the
// library refuses, declines schemas with keywords it does not know, and
// is taken for the common valid calls.
func TestSimpleSchemaAgrees(t *testing.T) {
	schemas := simpleSchemas(t)
	for i, want := range []bool{true, true, false, false, false, false, false, false, false, true, false, false} {
		if got := compileSimple(schemas[i]) != nil; got != want {
			js, _ := json.Marshal(schemas[i])
			t.Errorf("compileSimple(%s) simple = %v, want %v", js, got, want)
		}
	}
	taken := 0
	for _, s := range schemas {
		for _, raw := range simpleInstances {
			if checkSimple(t, s, raw) {
				taken++
			}
		}
	}
	if taken < 10 {
		t.Errorf("the fast check passed only %d instances", taken)
	}
	for _, raw := range []string{`{"path":"a","start":3.5}`, `{"path":"a","x":1}`, `{"path":1}`, `{}`, `{"path":"a","globs":["a",1]}`} {
		v, _ := strictParse([]byte(raw))
		if compileSimple(schemas[0]).valid(v.(map[string]any)) {
			t.Errorf("fast check passed invalid %s", raw)
		}
	}
}

func FuzzSimpleSchemaAgrees(f *testing.F) {
	for _, raw := range simpleInstances {
		f.Add(raw)
	}
	schemas := simpleSchemas(f)
	f.Fuzz(func(t *testing.T, raw string) {
		for _, s := range schemas {
			checkSimple(t, s, raw)
		}
	})
}
