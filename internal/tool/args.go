package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fluffy-agent/fluffy/internal/jsonname"
)

// Limits on a call's arguments.
const (
	MaxArgsBytes = 1 << 20
	maxArgsDepth = 64
	maxProblems  = 5
)

// Problem is one thing wrong with a call's arguments, worded for the
// model.
type Problem struct {
	// Path locates the value: "edits[2].old"; "" is the arguments object.
	Path     string `json:"path"`
	Expected string `json:"expected"`
	Got      string `json:"got"`
}

// ArgsError says why a call's arguments were refused. It is returned to
// the model as a tool result, not treated as a runtime failure.
type ArgsError struct {
	Tool     string
	Problems []Problem
}

func (e *ArgsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "invalid arguments for %s:", e.Tool)
	for _, p := range e.Problems {
		where := "the arguments"
		if p.Path != "" {
			where = "`" + p.Path + "`"
		}
		fmt.Fprintf(&b, "\n- at %s: expected %s, got %s", where, p.Expected, p.Got)
	}
	return b.String()
}

// Decode parses and validates a call's arguments: a single JSON object
// (empty input counts as {}), no duplicate keys, at most MaxArgsBytes,
// valid against the tool's schema. Problems come back as *ArgsError.
func (t *Tool) Decode(raw []byte) (Args, error) {
	fail := func(p ...Problem) (Args, error) { return Args{}, &ArgsError{Tool: t.name, Problems: p} }
	if len(raw) > MaxArgsBytes {
		return fail(Problem{Expected: fmt.Sprintf("at most %d bytes of JSON", MaxArgsBytes), Got: fmt.Sprintf("%d bytes", len(raw))})
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	v, err := strictParse(raw)
	if err != nil {
		return fail(Problem{Expected: "one JSON object", Got: err.Error()})
	}
	if _, ok := v.(map[string]any); !ok {
		return fail(Problem{Expected: "a JSON object", Got: describe(v)})
	}
	if m, _ := v.(map[string]any); t.simple != nil && t.simple.valid(m) {
		// Certainly valid (simpleSchema): the library would pass it.
	} else if probs := validate(t.resolved, t.schema, v); len(probs) > 0 {
		return fail(probs...)
	}
	in := reflect.New(t.inType)
	if t.closed {
		// Validation already refused every member the struct lacks.
		err = json.Unmarshal(raw, in.Interface())
	} else {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		err = dec.Decode(in.Interface())
	}
	if err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return fail(Problem{Path: ute.Field, Expected: ute.Type.String(), Got: ute.Value})
		}
		return fail(Problem{Expected: "arguments matching the schema", Got: err.Error()})
	}
	return Args{tool: t, in: in.Interface()}, nil
}

// validate runs the library validator (the authority) and, when it
// refuses, words the problems with a walk of the schema.
func validate(rs *jsonschema.Resolved, s *jsonschema.Schema, v any) (probs []Problem) {
	var verr error
	func() {
		defer func() {
			if r := recover(); r != nil {
				verr = fmt.Errorf("validator failed: %v", r)
			}
		}()
		verr = rs.Validate(v)
	}()
	if verr == nil {
		return nil
	}
	w := &walker{}
	w.walk(v, s, "")
	if len(w.probs) == 0 {
		return []Problem{{Expected: "arguments matching the schema", Got: verr.Error()}}
	}
	return w.probs
}

// strictParse decodes one JSON value, refusing duplicate keys, trailing
// data and nesting deeper than maxArgsDepth. Numbers become float64, as
// the validator expects.
//
// A single-pass parser (fastParse) does the work; whatever it does not
// accept goes to the token-by-token parser below (tokenParse), which is
// the reference: it words the error, and FuzzStrictParse checks that both
// agree on every input.
func strictParse(raw []byte) (any, error) {
	if v, ok := fastParse(raw); ok {
		return v, nil
	}
	return tokenParse(raw)
}

// tokenParse is strictParse through encoding/json's tokenizer.
func tokenParse(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := parseValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	return v, nil
}

func parseValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxArgsDepth {
		return nil, fmt.Errorf("JSON nested deeper than %d levels", maxArgsDepth)
	}
	tok, err := dec.Token()
	if err == io.EOF {
		return nil, errors.New("malformed JSON: unexpected end of input")
	}
	if err != nil {
		return nil, fmt.Errorf("malformed JSON: %v", err)
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '{':
			m := map[string]any{}
			folds := map[string]string{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, fmt.Errorf("malformed JSON: %v", err)
				}
				k, _ := kt.(string)
				if _, dup := m[k]; dup {
					return nil, fmt.Errorf("duplicate key %q", truncate(k, 40))
				}
				if first, dup := folds[jsonname.Fold(k)]; dup {
					return nil, fmt.Errorf("duplicate key %q: %q differs from it only in case, and names are matched without regard to case", truncate(k, 40), truncate(first, 40))
				}
				folds[jsonname.Fold(k)] = k
				if m[k], err = parseValue(dec, depth+1); err != nil {
					return nil, err
				}
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("malformed JSON: %v", err)
			}
			return m, nil
		case '[':
			a := []any{}
			for dec.More() {
				e, err := parseValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				a = append(a, e)
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("malformed JSON: %v", err)
			}
			return a, nil
		}
		return nil, fmt.Errorf("malformed JSON: unexpected %v", x)
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %s out of range", truncate(x.String(), 40))
		}
		return f, nil
	}
	return tok, nil
}

// walker words schema violations for a subset of JSON Schema: the one
// jsonschema.For infers plus common refinements.
type walker struct{ probs []Problem }

func (w *walker) add(path, expected, got string) {
	if len(w.probs) < maxProblems {
		w.probs = append(w.probs, Problem{Path: path, Expected: expected, Got: got})
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (w *walker) walk(v any, s *jsonschema.Schema, path string) {
	if s == nil || len(w.probs) >= maxProblems {
		return
	}
	got := jsonType(v)
	if types := schemaTypes(s); len(types) > 0 && !typeOK(got, types) {
		w.add(path, strings.Join(types, " or "), describe(v))
		return
	}
	if len(s.Enum) > 0 && !slices.ContainsFunc(s.Enum, func(e any) bool { return equalJSON(e, v) }) {
		var opts []string
		for _, e := range s.Enum {
			b, _ := json.Marshal(e)
			opts = append(opts, string(b))
		}
		w.add(path, "one of "+strings.Join(opts, ", "), describe(v))
		return
	}
	if s.Const != nil && !equalJSON(*s.Const, v) {
		b, _ := json.Marshal(*s.Const)
		w.add(path, string(b), describe(v))
		return
	}
	switch x := v.(type) {
	case float64:
		if s.Minimum != nil && x < *s.Minimum {
			w.add(path, "a number ≥ "+num(*s.Minimum), describe(v))
		}
		if s.Maximum != nil && x > *s.Maximum {
			w.add(path, "a number ≤ "+num(*s.Maximum), describe(v))
		}
		if s.ExclusiveMinimum != nil && x <= *s.ExclusiveMinimum {
			w.add(path, "a number > "+num(*s.ExclusiveMinimum), describe(v))
		}
		if s.ExclusiveMaximum != nil && x >= *s.ExclusiveMaximum {
			w.add(path, "a number < "+num(*s.ExclusiveMaximum), describe(v))
		}
	case string:
		n := utf8.RuneCountInString(x)
		if s.MinLength != nil && n < *s.MinLength {
			w.add(path, fmt.Sprintf("a string of at least %d characters", *s.MinLength), describe(v))
		}
		if s.MaxLength != nil && n > *s.MaxLength {
			w.add(path, fmt.Sprintf("a string of at most %d characters", *s.MaxLength), describe(v))
		}
		if s.Pattern != "" {
			if re, err := regexp.Compile(s.Pattern); err == nil && !re.MatchString(x) {
				w.add(path, "a string matching "+s.Pattern, describe(v))
			}
		}
	case []any:
		if s.MinItems != nil && len(x) < *s.MinItems {
			w.add(path, fmt.Sprintf("at least %d items", *s.MinItems), describe(v))
		}
		if s.MaxItems != nil && len(x) > *s.MaxItems {
			w.add(path, fmt.Sprintf("at most %d items", *s.MaxItems), describe(v))
		}
		for i, e := range x {
			w.walk(e, s.Items, path+"["+strconv.Itoa(i)+"]")
		}
	case map[string]any:
		for _, r := range s.Required {
			if _, ok := x[r]; !ok {
				w.add(join(path, r), "a value (required)", "nothing")
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if ps, ok := s.Properties[k]; ok {
				w.walk(x[k], ps, join(path, k))
				continue
			}
			ap := s.AdditionalProperties
			if ap != nil && ap.Not != nil && isEmptySchema(ap.Not) {
				allowed := make([]string, 0, len(s.Properties))
				for p := range s.Properties {
					allowed = append(allowed, p)
				}
				sort.Strings(allowed)
				w.add(join(path, truncate(k, 40)), "no such property (allowed: "+strings.Join(allowed, ", ")+")", describe(x[k]))
				continue
			}
			w.walk(x[k], ap, join(path, k))
		}
	}
}

func isEmptySchema(s *jsonschema.Schema) bool {
	b, _ := json.Marshal(s)
	return string(b) == "{}" || string(b) == "true"
}

func schemaTypes(s *jsonschema.Schema) []string {
	if s.Type != "" {
		return []string{s.Type}
	}
	return s.Types
}

func typeOK(got string, want []string) bool {
	return slices.Contains(want, got) || (got == "integer" && slices.Contains(want, "number"))
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		if _, f := math.Modf(x); f == 0 {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// describe renders a value briefly for an error message.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean " + strconv.FormatBool(x)
	case float64:
		return "number " + num(x)
	case string:
		return "string " + strconv.Quote(truncate(x, 40))
	case []any:
		return fmt.Sprintf("an array of %d items", len(x))
	case map[string]any:
		return fmt.Sprintf("an object with %d properties", len(x))
	}
	return fmt.Sprintf("%T", v)
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func equalJSON(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}
