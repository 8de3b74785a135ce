package tool

import (
	"math"
	"reflect"
	"slices"

	"github.com/google/jsonschema-go/jsonschema"
)

// simpleSchema is a tool's input schema when it is a closed object of
// plainly typed members: "type" (or "types") on every member, arrays
// whose items are typed the same way, "required", additionalProperties
// false, and annotations (title, description, comment) — no other
// keyword anywhere. For such a schema, valid (below) decides validity
// with a map lookup per member instead of the library's reflective
// walk; whatever it cannot vouch for goes to the library (the
// authority), so a simple check can only skip a validation that would
// have passed.
type simpleSchema struct {
	props    map[string]*simpleType
	required []string
}

// simpleType is the JSON types a member accepts ("integer" is a number
// with no fractional part, as the library's jsonType decides it).
type simpleType struct {
	types []string
	items *simpleType // arrays' items; nil when the schema allows no array
}

// compileSimple returns s as a simpleSchema, or nil when it is not one.
func compileSimple(s *jsonschema.Schema) *simpleSchema {
	if s == nil || s.Type != "object" || !onlyKeys(s, "Type", "Properties", "Required", "AdditionalProperties") {
		return nil
	}
	if ap := s.AdditionalProperties; ap == nil || ap.Not == nil || !reflect.DeepEqual(*ap.Not, jsonschema.Schema{}) ||
		!onlyKeys(ap, "Not") {
		return nil
	}
	ss := &simpleSchema{props: make(map[string]*simpleType, len(s.Properties)), required: s.Required}
	for name, ps := range s.Properties {
		st := compileType(ps, 0)
		if st == nil {
			return nil
		}
		ss.props[name] = st
	}
	for _, r := range s.Required {
		if _, ok := ss.props[r]; !ok {
			return nil // the library refuses every instance: let it say so
		}
	}
	return ss
}

func compileType(s *jsonschema.Schema, depth int) *simpleType {
	if s == nil || depth > 4 || !onlyKeys(s, "Type", "Types", "Items") {
		return nil
	}
	st := &simpleType{types: s.Types}
	if s.Type != "" {
		if len(s.Types) > 0 {
			return nil
		}
		st.types = []string{s.Type}
	}
	if len(st.types) == 0 {
		return nil
	}
	for _, t := range st.types {
		switch t {
		case "string", "integer", "number", "boolean", "null":
		case "array":
			if st.items = compileType(s.Items, depth+1); st.items == nil {
				return nil
			}
		default:
			return nil
		}
	}
	if s.Items != nil && st.items == nil {
		return nil
	}
	return st
}

// annotations are the keywords that never decide validity (PropertyOrder
// only orders marshalled properties).
var annotations = []string{"Title", "Description", "Comment", "PropertyOrder"}

// onlyKeys reports whether s sets no field other than keep and the
// annotations.
func onlyKeys(s *jsonschema.Schema, keep ...string) bool {
	v := reflect.ValueOf(s).Elem()
	t := v.Type()
	for i := range t.NumField() {
		name := t.Field(i).Name
		if !t.Field(i).IsExported() || slices.Contains(keep, name) || slices.Contains(annotations, name) {
			continue
		}
		if !v.Field(i).IsZero() {
			return false
		}
	}
	return true
}

// valid reports whether v is certainly valid; false means "ask the
// library" (v may still be valid).
func (ss *simpleSchema) valid(v map[string]any) bool {
	for k, x := range v {
		st, ok := ss.props[k]
		if !ok || !st.accepts(x) {
			return false
		}
	}
	for _, r := range ss.required {
		if _, ok := v[r]; !ok {
			return false
		}
	}
	return true
}

func (st *simpleType) accepts(x any) bool {
	var got string
	switch x := x.(type) {
	case nil:
		got = "null"
	case string:
		got = "string"
	case bool:
		got = "boolean"
	case float64:
		got = "number"
		if _, f := math.Modf(x); f == 0 {
			got = "integer"
		}
	case []any:
		if st.items == nil || !slices.Contains(st.types, "array") {
			return false
		}
		for _, e := range x {
			if !st.items.accepts(e) {
				return false
			}
		}
		return true
	default:
		return false
	}
	return slices.Contains(st.types, got) || got == "integer" && slices.Contains(st.types, "number")
}
