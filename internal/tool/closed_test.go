package tool

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

type closedInner struct {
	Old string `json:"old"`
	New string `json:"new,omitempty"`
}

type closedArgs struct {
	Path   string            `json:"path"`
	Start  int               `json:"start,omitempty"`
	Edits  []closedInner     `json:"edits,omitempty"`
	Ptr    *closedInner      `json:"ptr,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	Skip   string            `json:"-"`
	hidden int               // unexported: never decoded
}

var _ = closedArgs{hidden: 0}.hidden

type embedded struct{ Path string }

type withEmbedded struct {
	embedded
	N int `json:"n"`
}

type withTime struct {
	At time.Time `json:"at"`
}

type withAny struct {
	V any `json:"v"`
}

func newClosedTool[In any](t *testing.T, refine func(*jsonschema.Schema) error) *Tool {
	t.Helper()
	tl, err := New(Definition[In]{
		Name: "t.x", Description: "x", Action: operation.Read, Execution: Execution{Class: FastPath}, Refine: refine,
		Normalize: func(context.Context, *Resolver, *In, *operation.Operation) error { return nil },
		Run:       func(context.Context, *In) (Result, error) { return Result{}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// TestClosedSchema: derived schemas of plain structs are closed; embedded
// fields, custom unmarshalers, interface fields and a refined schema
// that admits more members are not (Decode keeps the strict decoder).
func TestClosedSchema(t *testing.T) {
	addProp := func(s *jsonschema.Schema) error {
		s.Properties["extra"] = &jsonschema.Schema{Type: "string"}
		return nil
	}
	openUp := func(s *jsonschema.Schema) error { s.AdditionalProperties = nil; return nil }
	for _, c := range []struct {
		name string
		tool *Tool
		want bool
	}{
		{"plain struct", newClosedTool[closedArgs](t, nil), true},
		{"refined bounds only", newClosedTool[closedArgs](t, func(s *jsonschema.Schema) error { s.Properties["start"].Minimum = new(float64); return nil }), true},
		{"refined with an extra property", newClosedTool[closedArgs](t, addProp), false},
		{"refined open", newClosedTool[closedArgs](t, openUp), false},
		{"embedded field", newClosedTool[withEmbedded](t, nil), false},
		{"custom unmarshaler", newClosedTool[withTime](t, nil), false},
		{"interface field", newClosedTool[withAny](t, nil), false},
	} {
		if c.tool.closed != c.want {
			t.Errorf("%s: closed = %v, want %v", c.name, c.tool.closed, c.want)
		}
	}
}

// TestClosedDecodeAgrees: for a closed tool, Decode (json.Unmarshal after
// validation) gives the same value or refusal as the strict decoder.
func TestClosedDecodeAgrees(t *testing.T) {
	tl := newClosedTool[closedArgs](t, nil)
	strict := *tl
	strict.closed = false
	if !tl.closed {
		t.Fatal("closedArgs should be closed")
	}
	for _, in := range []string{
		`{"path":"a"}`, `{"path":"a","start":3,"edits":[{"old":"x","new":"y"}],"ptr":{"old":"p"},"labels":{"k":"v"}}`,
		`{"path":"a","PATH":"b"}`, `{"path":"a","Skip":"x"}`, `{"path":"a","hidden":1}`, `{"path":"a","edits":[{"old":"x","extra":1}]}`,
		`{"path":"a","ptr":{"Old":"x"}}`, `{"path":"a","start":1.5}`, `{"path":"a","labels":{"k":1}}`, `{"Path":"a"}`, `{}`,
	} {
		a, aerr := tl.Decode([]byte(in))
		b, berr := strict.Decode([]byte(in))
		if (aerr == nil) != (berr == nil) {
			t.Fatalf("%s: closed decode %v, strict decode %v", in, aerr, berr)
		}
		if aerr == nil && !reflect.DeepEqual(a.in, b.in) {
			t.Fatalf("%s: closed %+v, strict %+v", in, a.in, b.in)
		}
	}
}
