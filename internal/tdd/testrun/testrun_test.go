package testrun

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the .golden.json files from the parsers' output")

// formatOf maps a testdata directory (one per runner, output captured from
// the real runner) to its format.
var formatOf = map[string]Format{
	"go":     GoJSON,
	"pytest": JUnitXML,
	"jest":   JestJSON,
	"vitest": VitestJSON,
	"cargo":  CargoText,
	"junit":  JUnitXML, // other runners' JUnit XML (vitest --reporter=junit)
}

// TestGolden parses every captured report and compares the Result with its
// golden file; the outcome is also pinned by the file name (pass*, fail*,
// build-failed*/syntax*/collect-error*, no-tests*/no-match*).
func TestGolden(t *testing.T) {
	n := 0
	for dir, format := range formatOf {
		files, err := filepath.Glob(filepath.Join("testdata", dir, "*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, ".golden.json") {
				continue
			}
			n++
			name := dir + "/" + filepath.Base(file)
			t.Run(name, func(t *testing.T) {
				data, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				res, err := Parse(format, bytes.NewReader(data))
				if err != nil {
					t.Fatalf("parse: %v", err)
				}
				base := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
				base = strings.TrimPrefix(base, "vitest-")
				want := map[string]Outcome{
					"pass": Passed, "fail": Failed, "mixed": Failed,
					"build-failed": Failed, "syntax": Failed, "collect-error": Failed,
					"no-tests": NoTests, "no-match": NoTests,
				}[base]
				if want == "" {
					t.Fatalf("no expected outcome for %s", base)
				}
				if got := res.Outcome(); got != want {
					t.Errorf("outcome = %s, want %s", got, want)
				}
				if (base == "build-failed" || base == "syntax" || base == "collect-error") && !res.BuildFailed {
					t.Errorf("build failure not detected")
				}
				got, _ := json.MarshalIndent(res, "", "  ")
				golden := strings.TrimSuffix(file, filepath.Ext(file)) + ".golden.json"
				if *update {
					if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				wantJSON, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run with -update to create it)", err)
				}
				if d := cmp.Diff(string(wantJSON), string(got)+"\n"); d != "" {
					t.Errorf("result differs from %s (-want +got):\n%s", golden, d)
				}
			})
		}
	}
	if n < 17 {
		t.Fatalf("only %d captured reports found", n)
	}
}

func TestMalformed(t *testing.T) {
	cases := []struct {
		format Format
		in     string
	}{
		{GoJSON, ""},
		{GoJSON, "ok  \texample.com/x\t0.1s\n"},
		{JUnitXML, ""},
		{JUnitXML, "<html><body/></html>"},
		{JUnitXML, "<testsuites><testsuite>"},
		{JestJSON, "{}"},
		{JestJSON, `{"numTotalTests": 1}`},
		{VitestJSON, "[1,2]"},
		{CargoText, "running 2 tests\n"},
		{CargoText, "test result: ok. 99999999999999999999 passed; 0 failed; 0 ignored;"},
	}
	for _, c := range cases {
		_, err := Parse(c.format, strings.NewReader(c.in))
		if !errors.Is(err, ErrFormat) {
			t.Errorf("Parse(%s, %q) error = %v, want ErrFormat", c.format, c.in, err)
		}
	}
	if _, err := Parse("tap", strings.NewReader("")); err == nil {
		t.Error("unknown format accepted")
	}
}

func TestStripANSI(t *testing.T) {
	for in, want := range map[string]string{
		"\x1b[31mred\x1b[0m":          "red",
		"a\x1b]0;title\x07b":          "ab",
		"a\x1b]8;;http://x\x1b\\link": "alink",
		"plain":                       "plain",
		"trailing\x1b":                "trailing",
	} {
		if got := stripANSI(in); got != want {
			t.Errorf("stripANSI(%q) = %q, want %q", in, got, want)
		}
	}
}

// fuzzParser checks the invariants every parser keeps on any input: no
// panic; a result is consistent (counts non-negative, failures capped, a
// build failure is never a pass).
func fuzzParser(f *testing.F, format Format, dir string) {
	files, _ := filepath.Glob(filepath.Join("testdata", dir, "*"))
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil && !strings.HasSuffix(file, ".golden.json") {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := Parse(format, bytes.NewReader(data))
		if err != nil {
			return
		}
		if res.Passed < 0 || res.Failed < 0 || res.Skipped < 0 {
			t.Fatalf("negative count: %+v", res)
		}
		if len(res.Failures) > MaxFailures {
			t.Fatalf("%d failures kept", len(res.Failures))
		}
		if res.BuildFailed && res.Outcome() != Failed {
			t.Fatalf("build failure with outcome %s", res.Outcome())
		}
		for _, f := range res.Failures {
			if len(f.Message) > maxMessage || strings.ContainsAny(f.Message, "\n\x1b\x00\r") {
				t.Fatalf("message not capped: %q", f.Message)
			}
		}
	})
}

func FuzzGoJSON(f *testing.F)     { fuzzParser(f, GoJSON, "go") }
func FuzzJUnit(f *testing.F)      { fuzzParser(f, JUnitXML, "pytest") }
func FuzzJestJSON(f *testing.F)   { fuzzParser(f, JestJSON, "jest") }
func FuzzVitest(f *testing.F)     { fuzzParser(f, VitestJSON, "vitest") }
func FuzzCargo(f *testing.F)      { fuzzParser(f, CargoText, "cargo") }
func FuzzJUnitOther(f *testing.F) { fuzzParser(f, JUnitXML, "junit") }

func BenchmarkParseGoJSON(b *testing.B) {
	data, err := os.ReadFile("testdata/go/mixed.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := ParseGoJSON(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseJUnit(b *testing.B) {
	data, err := os.ReadFile("testdata/pytest/mixed.xml")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := ParseJUnit(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}
