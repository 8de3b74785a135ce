package audit

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
)

// sameAsMarshal checks that o's bytes are what the general path
// (encoding/json, then Canonicalize) makes of want.
func sameAsMarshal(t *testing.T, o *Object, want map[string]any) {
	t.Helper()
	if err := o.Err(); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Canonicalize(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(o.Bytes()); got != string(c) {
		t.Fatalf("Object:       %s\nCanonicalize: %s", got, c)
	}
}

func TestObjectMatchesCanonicalize(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(*Object)
		want  map[string]any
	}{
		{"empty", func(*Object) {}, map[string]any{}},
		{"scalars", func(o *Object) {
			o.Bool("a", true)
			o.Bool("b", false)
			o.Int("c", 0)
			o.Int("d", -42)
			o.String("e", "")
		}, map[string]any{"a": true, "b": false, "c": 0, "d": -42, "e": ""}},
		{"escapes and unicode", func(o *Object) {
			o.String("s", "tab\tnl\nquote\"bs\\ctl\x01\x1f<>&\u2028\u2029é€😀")
		}, map[string]any{"s": "tab\tnl\nquote\"bs\\ctl\x01\x1f<>&\u2028\u2029é€😀"}},
		{"invalid utf-8", func(o *Object) {
			o.String("s", "a\xffb\xc3(\xed\xa0\x80z")
		}, map[string]any{"s": "a\xffb\xc3(\xed\xa0\x80z"}},
		{"big integers", func(o *Object) {
			o.Int("a", 999_999_999_999_999)
			o.Int("b", 1_000_000_000_000_000)
			o.Int("c", math.MaxInt64)
			o.Int("d", math.MinInt64)
			o.Int("e", 1<<53+1)
		}, map[string]any{"a": int64(999_999_999_999_999), "b": int64(1_000_000_000_000_000), "c": int64(math.MaxInt64), "d": int64(math.MinInt64), "e": int64(1<<53 + 1)}},
		{"arrays, hex and nesting", func(o *Object) {
			var g Object
			g.String("effect", "allow")
			g.String("rule", "default.read-workspace")
			o.Hex("h", []byte{0, 0xab, 0xff})
			o.Object("n", &g)
			o.Strings("p", []string{"/a", "b\"c"})
			o.Strings("q", nil)
			var empty Object
			o.Object("z", &empty)
		}, map[string]any{"h": "00abff", "n": map[string]any{"effect": "allow", "rule": "default.read-workspace"}, "p": []string{"/a", "b\"c"}, "q": []string{}, "z": map[string]any{}}},
		{"names sort bytewise", func(o *Object) {
			o.Int("A", 1)
			o.Int("_", 2)
			o.Int("a", 3)
			o.Int("a_b", 4)
			o.Int("ab", 5)
		}, map[string]any{"A": 1, "_": 2, "a": 3, "a_b": 4, "ab": 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var o Object
			c.build(&o)
			sameAsMarshal(t, &o, c.want)
		})
	}
}

func TestObjectMisuse(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(*Object)
	}{
		{"out of order", func(o *Object) { o.Int("b", 1); o.Int("a", 2) }},
		{"duplicate", func(o *Object) { o.Int("a", 1); o.String("a", "x") }},
		{"empty name", func(o *Object) { o.Int("", 1) }},
		{"quote in name", func(o *Object) { o.Int(`a"`, 1) }},
		{"non-ASCII name", func(o *Object) { o.Int("é", 1) }},
		{"bad nested", func(o *Object) {
			var s Object
			s.Int("b", 1)
			s.Int("a", 1)
			o.Object("x", &s)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var o Object
			c.build(&o)
			if !errors.Is(o.Err(), ErrNotCanonical) {
				t.Fatalf("Err = %v, want ErrNotCanonical", o.Err())
			}
			if _, err := payloadJSON(&o); err == nil {
				t.Fatal("payloadJSON accepted a misused Object")
			}
		})
	}
}

// TestObjectAppend: an entry with an Object payload is stored as the same
// bytes as one with the equivalent map, and verifies.
func TestObjectAppend(t *testing.T) {
	var o Object
	o.String("call", "c1")
	o.Int("size", 12)
	a := Entry{Seq: 1, Kind: "tool.read", Actor: "agent", Payload: &o}
	b := Entry{Seq: 1, Kind: "tool.read", Actor: "agent", Payload: map[string]any{"size": 12, "call": "c1"}}
	ea, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	eb, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if string(ea) != string(eb) {
		t.Fatalf("%s\n%s", ea, eb)
	}
	if _, err := ParseEntry(ea); err != nil {
		t.Fatal(err)
	}
	// An Object passed by value is the same payload, not {}.
	c := Entry{Seq: 1, Kind: "tool.read", Actor: "agent", Payload: o}
	ec, err := c.Encode()
	if err != nil || string(ec) != string(ea) {
		t.Fatalf("by value: %s, %v\nwant %s", ec, err, ea)
	}
}

// FuzzObject: for any strings and integers, the builder writes exactly
// what encoding/json + Canonicalize write.
func FuzzObject(f *testing.F) {
	f.Add("x", "a\xffb", int64(3), int64(-1<<60), true)
	f.Add("", "\u2028\x00", int64(1e15), int64(0), false)
	f.Fuzz(func(t *testing.T, s1, s2 string, i1, i2 int64, b bool) {
		var o, sub Object
		sub.String("k", s2)
		o.Bool("a", b)
		o.Int("i1", i1)
		o.Int("i2", i2)
		o.Object("o", &sub)
		o.String("s1", s1)
		o.Strings("ss", []string{s2, s1})
		sameAsMarshal(t, &o, map[string]any{"a": b, "i1": i1, "i2": i2, "o": map[string]any{"k": s2}, "s1": s1, "ss": []string{s2, s1}})
	})
}
