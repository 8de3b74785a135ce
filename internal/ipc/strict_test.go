package ipc

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
)

var update = flag.Bool("update", false, "rewrite testdata/frames/results.golden")

// TestDecodeGolden decodes every frame payload in testdata/frames and
// compares the outcomes with results.golden (go test -update rewrites it).
func TestDecodeGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/frames/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no frames: %v", err)
	}
	var sb strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		res := "ok"
		if _, err := DecodeMessage(b); err != nil {
			res = "error: " + err.Error()
		}
		fmt.Fprintf(&sb, "%s: %s\n", filepath.Base(f), res)
		if name := filepath.Base(f); strings.HasPrefix(name, "ok-") != (res == "ok") {
			t.Errorf("%s: %s", name, res)
		}
	}
	golden := "testdata/frames/results.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := sb.String(); got != string(want) {
		t.Errorf("results differ from %s (go test -update rewrites it):\n%s", golden, got)
	}
}

// Bind refuses params naming a member twice: the handler would otherwise
// see the last value while a check of the first passed.
func TestBindDuplicateKeys(t *testing.T) {
	for _, p := range []string{`{"text":"a","text":"b"}`, `{"text":"a","Text":"b"}`, `{"text":"a","T\u0045XT":"b"}`} {
		var v echoParams
		err := (&Request{Method: "echo", Params: json.RawMessage(p)}).Bind(&v)
		if !errors.Is(err, ErrInvalidParams) || !strings.Contains(err.Error(), "duplicate key") {
			t.Errorf("Bind(%s) = %v, want invalid_params naming the duplicate key", p, err)
		}
	}
}

// refDuplicates is the reference: some object of the value names two
// members that encoding/json would match to one field (exactly equal, or
// equal under its case folding, or under Unicode simple folding).
func refDuplicates(v any) bool {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			if refDuplicates(e) {
				return true
			}
		}
	case orderedObject:
		for i := range x {
			for j := range i {
				a, b := x[i].k, x[j].k
				if a == b || strings.EqualFold(a, b) || jsonFold(a) == jsonFold(b) {
					return true
				}
			}
			if refDuplicates(x[i].v) {
				return true
			}
		}
	}
	return false
}

func jsonFold(s string) string {
	r := []rune(s)
	for i, c := range r {
		r[i] = unicode.ToUpper(unicode.ToLower(c))
	}
	return string(r)
}

type member struct {
	k string
	v any
}

// orderedObject keeps every member of a JSON object, duplicates too.
type orderedObject []member

// parseOrdered decodes one JSON value with the token API, keeping
// duplicate members.
func parseOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		var o orderedObject
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := parseOrdered(dec)
			if err != nil {
				return nil, err
			}
			o = append(o, member{k.(string), v})
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		var a []any
		for dec.More() {
			v, err := parseOrdered(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token()
		return a, err
	}
	return tok, nil
}

// FuzzCheckKeys: on any valid JSON value, checkKeys refuses exactly the
// values with a duplicate member (by the reference), and never panics.
func FuzzCheckKeys(f *testing.F) {
	files, _ := filepath.Glob("testdata/frames/*.json")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"a":{"b":[{"c":1,"C":2}]}}`))
	f.Add([]byte(`[{"\u017f":1},{"s":2,"S":3}]`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var any_ any
		if json.Unmarshal(in, &any_) != nil {
			return // checkKeys takes valid JSON only
		}
		dec := json.NewDecoder(strings.NewReader(string(in)))
		ref, err := parseOrdered(dec)
		if err != nil {
			t.Fatalf("reference parser: %v", err)
		}
		got := checkKeys(in)
		if want := refDuplicates(ref); (got != nil) != want {
			t.Fatalf("checkKeys(%q) = %v, reference says duplicates: %v", in, got, want)
		}
	})
}
