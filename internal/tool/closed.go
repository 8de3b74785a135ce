package tool

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// closedSchema reports whether arguments valid against s can never carry
// a member that encoding/json would find unknown when decoding into t:
// every struct in t is an object schema that forbids additional
// properties and lists exactly the struct's JSON field names, all the
// way down. Decode then skips json.Decoder's DisallowUnknownFields (and
// the decoder's allocations) for json.Unmarshal, which is equivalent on
// validated input. Anything it cannot vouch for (embedded fields,
// custom unmarshalers, references, combinators, pattern properties) is
// not closed, and Decode keeps the strict decoder.
func closedSchema(t reflect.Type, s *jsonschema.Schema) bool {
	return closedDepth(t, s, 0)
}

func closedDepth(t reflect.Type, s *jsonschema.Schema, depth int) bool {
	if s == nil || depth > 32 {
		return false
	}
	if s.Ref != "" || len(s.Defs) > 0 || len(s.Definitions) > 0 || len(s.AllOf) > 0 || len(s.AnyOf) > 0 || len(s.OneOf) > 0 ||
		s.If != nil || len(s.DependentSchemas) > 0 || s.UnevaluatedProperties != nil {
		return false
	}
	if t.Implements(jsonUnmarshaler) || t.Implements(textUnmarshaler) ||
		reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return false
	}
	switch t.Kind() {
	case reflect.Pointer:
		return closedDepth(t.Elem(), s, depth+1)
	case reflect.Bool, reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return true // []byte is a base64 string
		}
		return closedDepth(t.Elem(), s.Items, depth+1)
	case reflect.Map:
		return t.Key().Kind() == reflect.String && closedDepth(t.Elem(), s.AdditionalProperties, depth+1)
	case reflect.Struct:
		ap := s.AdditionalProperties
		if ap == nil || ap.Not == nil || !reflect.DeepEqual(*ap.Not, jsonschema.Schema{}) || len(s.PatternProperties) > 0 {
			return false
		}
		n := 0
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous {
				return false
			}
			if !f.IsExported() {
				continue
			}
			name := f.Name
			if tag, ok := f.Tag.Lookup("json"); ok {
				tn, _, found := strings.Cut(tag, ",")
				if tn == "-" && !found {
					continue
				}
				if tn != "" {
					name = tn
				}
			}
			ps, ok := s.Properties[name]
			if !ok || !closedDepth(f.Type, ps, depth+1) {
				return false
			}
			n++
		}
		return n == len(s.Properties)
	}
	return false
}
