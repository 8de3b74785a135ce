package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestCanonicalGolden runs the RFC 8785 examples and our own cases in
// testdata/canonical: NAME.in.json must canonicalize to NAME.out.json.
func TestCanonicalGolden(t *testing.T) {
	ins, _ := filepath.Glob("testdata/canonical/*.in.json")
	if len(ins) == 0 {
		t.Fatal("no golden cases")
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in.json")
		t.Run(name, func(t *testing.T) {
			src, _ := os.ReadFile(in)
			want, err := os.ReadFile(strings.TrimSuffix(in, ".in.json") + ".out.json")
			if err != nil {
				t.Fatal(err)
			}
			got, err := Canonicalize(src)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
		})
	}
}

// TestFormatNumber uses the number vectors of RFC 8785, appendix B.
func TestFormatNumber(t *testing.T) {
	for bits, want := range map[uint64]string{
		0x0000000000000000: "0", 0x8000000000000000: "0",
		0x0000000000000001: "5e-324", 0x8000000000000001: "-5e-324",
		0x7fefffffffffffff: "1.7976931348623157e+308", 0xffefffffffffffff: "-1.7976931348623157e+308",
		0x4340000000000000: "9007199254740992", 0xc340000000000000: "-9007199254740992",
		0x4430000000000000: "295147905179352830000",
		0x44b52d02c7e14af5: "9.999999999999997e+22", 0x44b52d02c7e14af6: "1e+23", 0x44b52d02c7e14af7: "1.0000000000000001e+23",
		0x444b1ae4d6e2ef4e: "999999999999999700000", 0x444b1ae4d6e2ef4f: "999999999999999900000", 0x444b1ae4d6e2ef50: "1e+21",
		0x3eb0c6f7a0b5ed8c: "9.999999999999997e-7", 0x3eb0c6f7a0b5ed8d: "0.000001",
		0x41b3de4355555553: "333333333.3333332", 0x41b3de4355555554: "333333333.33333325",
		0x41b3de4355555555: "333333333.3333333", 0x41b3de4355555556: "333333333.3333334",
		0x41b3de4355555557: "333333333.33333343", 0xbecbf647612f3696: "-0.0000033333333333333333",
		0x43143ff3c1cb0959: "1424953923781206.2",
	} {
		if got := formatNumber(math.Float64frombits(bits)); got != want {
			t.Errorf("%016x: got %s, want %s", bits, got, want)
		}
	}
}

func TestCanonicalRejects(t *testing.T) {
	for _, in := range []string{
		``, `{`, `{"a":1,"a":2}`, `[1,]`, `{"a":1} {}`, `1e400`, "\"\xff\"", `{"a":01}`, `NaN`,
		strings.Repeat("[", 100) + strings.Repeat("]", 100),
	} {
		if out, err := Canonicalize([]byte(in)); !errors.Is(err, ErrNotCanonical) {
			t.Errorf("%q: got %q, %v; want ErrNotCanonical", in, out, err)
		}
	}
}

func TestEntryRoundTrip(t *testing.T) {
	// The example of docs/audit.md (Entries).
	e := Entry{Seq: 42, Time: time.Date(2026, 11, 22, 1, 2, 3, 4, time.FixedZone("x", 3600)), Kind: KindExecEnd, Actor: "cli",
		Payload: ExecEnd{Template: "code-executor", Argv: []string{"go", "test"}, DurationUS: 1500, Process: &Process{LimitsHit: []string{}}}}
	b, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"actor":"cli","kind":"exec.end","payload":{"argv":["go","test"],"duration_us":1500,"exit_code":0,"killed":"","limits_hit":[],"signal":0,"template":"code-executor","warnings":null},"seq":42,"session":"","time":"2026-11-22T00:02:03.000000004Z"}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	doc, err := os.ReadFile("../../docs/audit.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, []byte("\n"+want+"\n")) {
		t.Errorf("docs/audit.md does not show the example entry %s", want)
	}
	back, err := ParseEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	p, err := DecodePayload(back.Kind, back.Payload.(json.RawMessage))
	if err != nil {
		t.Fatal(err)
	}
	if !back.Time.Equal(e.Time) || back.Seq != 42 || !reflect.DeepEqual(p, e.Payload) {
		t.Fatalf("round trip: %+v", back)
	}
	for _, bad := range []string{
		strings.Replace(want, `"seq":42`, `"seq":42.0`, 1),
		strings.Replace(want, `,"session":""`, ``, 1),
		strings.Replace(want, `"kind":"exec.end"`, `"kind":"Exec"`, 1),
		strings.Replace(want, `.000000004Z`, `.000000004+00:00`, 1),
		strings.Replace(want, `{"actor"`, `{"extra":1,"actor"`, 1),
		strings.Replace(want, `"payload":{`, `"payload":[{`, 1),
		strings.Replace(want, `"seq":42`, `"seq":0`, 1),
	} {
		if _, err := ParseEntry([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[true,null,"x\u0000"]}`, `1e21`, `-0.0`, `"\ud800"`, `{"\u20ac":1,"\ud83d\ude00":2}`, `[1.5e-7, 123456789012345678901234567890]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := Canonicalize(in)
		if err != nil {
			return
		}
		again, err := Canonicalize(c)
		if err != nil || string(again) != string(c) {
			t.Fatalf("not idempotent: %q -> %q -> %q (%v)", in, c, again, err)
		}
		var a, b any
		if json.Unmarshal(in, &a) != nil || json.Unmarshal(c, &b) != nil {
			t.Fatalf("canonical form does not decode like the input: %q -> %q", in, c)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("meaning changed: %q -> %q", in, c)
		}
	})
}

func FuzzParseEntry(f *testing.F) {
	e := Entry{Seq: 7, Time: time.Unix(1, 2), Kind: KindGatePolicy, Actor: "a", Payload: map[string]any{"x": []any{1, "é", nil}}}
	b, _ := e.Encode()
	f.Add(b)
	f.Add([]byte(`{"actor":"","kind":"a","payload":{},"seq":1,"session":"","time":"1970-01-01T00:00:00.000000000Z"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		e, err := ParseEntry(in)
		if err != nil {
			return
		}
		out, err := e.Encode()
		if err != nil || string(out) != string(in) {
			t.Fatalf("parsed entry does not encode back: %q -> %q (%v)", in, out, err)
		}
	})
}

func FuzzParseCheckpoint(f *testing.F) {
	k, err := LoadOrCreateKey(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	cp, _ := signCheckpoint(k.Signer, 5, make([]byte, 32), make([]byte, 32))
	f.Add(cp.Note)
	f.Add([]byte("x\n1\n\n— x AAAA\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := ParseCheckpoint(in, k.Verifier)
		if err != nil {
			return
		}
		// Only notes our key signed parse: re-signing the same body gives
		// a note with the same fields.
		again, err := signCheckpoint(k.Signer, c.Size, c.Root, c.Chain)
		if err != nil || again.Size != c.Size || string(again.Note[:strings.Index(string(again.Note), "\n\n")]) != string(in[:strings.Index(string(in), "\n\n")]) {
			t.Fatalf("checkpoint %q does not re-sign to the same body", in)
		}
	})
}
