package coverage

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// The profiles in testdata were written by `go test -coverprofile` on a
// small module (see testdata/README).
func TestGoProfile(t *testing.T) {
	cases := []struct {
		file string
		want map[string]FileCoverage
	}{
		{"pass.out", map[string]FileCoverage{"example.com/calc/pass/calc.go": {1, 1}}},
		{"fail.out", map[string]FileCoverage{"example.com/calc/fail/calc.go": {2, 2}}},
		{"part-count.out", map[string]FileCoverage{
			"example.com/calc/part/part.go": {6, 9},
			"example.com/calc/pass/calc.go": {1, 1},
		}},
	}
	for _, c := range cases {
		f, err := os.Open("testdata/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := ParseGoProfile(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if len(rep.Files) != len(c.want) {
			t.Errorf("%s: files = %v, want %v", c.file, rep.Files, c.want)
		}
		for name, w := range c.want {
			if got := rep.Files[name]; got != w {
				t.Errorf("%s: %s = %+v, want %+v", c.file, name, got, w)
			}
		}
	}
}

// The Cobertura reports were written by coverage.py 6.5.0 (Debian
// python3-coverage, `coverage run --source=. -m pytest; coverage xml`) and
// Jest 30.5.2 (`jest --coverage --coverageReporters=cobertura`).
func TestCobertura(t *testing.T) {
	cases := []struct {
		file string
		want map[string]FileCoverage
	}{
		{"python-cobertura.xml", map[string]FileCoverage{
			"calc.py":      {Covered: 3, Total: 4},
			"geometry.py":  {Covered: 4, Total: 6},
			"test_fail.py": {Covered: 0, Total: 5},
		}},
		{"jest-cobertura.xml", map[string]FileCoverage{"geometry.js": {Covered: 4, Total: 5}}},
	}
	for _, c := range cases {
		f, err := os.Open("testdata/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := Parse(Cobertura, f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		for name, w := range c.want {
			if got := rep.Files[name]; got != w {
				t.Errorf("%s: %s = %+v, want %+v", c.file, name, got, w)
			}
		}
	}
}

func TestCoberturaSharedFileAndSources(t *testing.T) {
	in := `<coverage><sources><source>/src/app/</source></sources><packages><package><classes>
<class filename="/src/app/pkg/A.java"><lines><line number="1" hits="0"/><line number="2" hits="3"/></lines></class>
<class filename="/src/app/pkg/A.java"><lines><line number="1" hits="2"/><line number="9" hits="0"/></lines></class>
</classes></package></packages></coverage>`
	rep, err := ParseCobertura(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Files["pkg/A.java"]; got != (FileCoverage{Covered: 2, Total: 3}) {
		t.Fatalf("inner classes merged wrongly: %+v (%v)", got, rep.Files)
	}
	for _, bad := range []string{"", "<html/>", `<coverage><packages><package><classes><class filename=""/></classes></package></packages></coverage>`,
		`<coverage><packages><package><classes><class filename="a.py"><lines><line number="0" hits="1"/></lines></class></classes></package></packages></coverage>`} {
		if _, err := ParseCobertura(strings.NewReader(bad)); !errors.Is(err, ErrFormat) {
			t.Errorf("ParseCobertura(%q) = %v, want ErrFormat", bad, err)
		}
	}
}

func FuzzCobertura(f *testing.F) {
	for _, name := range []string{"python-cobertura.xml", "jest-cobertura.xml"} {
		if b, err := os.ReadFile("testdata/" + name); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := ParseCobertura(bytes.NewReader(data))
		if err != nil {
			return
		}
		for name, fc := range rep.Files {
			if fc.Covered < 0 || fc.Total < 0 || fc.Covered > fc.Total {
				t.Fatalf("%s: inconsistent %+v", name, fc)
			}
		}
	})
}

func TestLookupAndBP(t *testing.T) {
	rep := &Report{Files: map[string]FileCoverage{
		"example.com/calc/part/part.go":  {6, 9},
		"example.com/other/part/part.go": {0, 3},
		"example.com/calc/pass/calc.go":  {1, 1},
	}}
	if f, ok := rep.Lookup("pass/calc.go"); !ok || f.BP() != 10000 {
		t.Errorf("Lookup(pass/calc.go) = %+v, %v", f, ok)
	}
	if f, ok := rep.Lookup("calc/part/part.go"); !ok || f.BP() != 6666 {
		t.Errorf("Lookup(calc/part/part.go) = %+v (bp %d), %v", f, f.BP(), ok)
	}
	if _, ok := rep.Lookup("art/part.go"); ok {
		t.Error("partial segment matched")
	}
	if tot := rep.Total(); tot != (FileCoverage{7, 13}) {
		t.Errorf("Total = %+v", tot)
	}
	if (FileCoverage{}).BP() != 10000 {
		t.Error("empty file not fully covered")
	}
}

func TestDuplicateBlocksCountOnce(t *testing.T) {
	in := "mode: set\nm/a.go:1.1,2.2 3 0\nm/a.go:1.1,2.2 3 1\nm/a.go:3.1,4.2 2 0\n"
	rep, err := ParseGoProfile(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Files["m/a.go"]; got != (FileCoverage{3, 5}) {
		t.Errorf("got %+v, want {3 5}", got)
	}
}

func TestMalformed(t *testing.T) {
	for _, in := range []string{
		"",
		"mode: bogus\n",
		"a.go:1.1,2.2 1 1\n",
		"mode: set\nnonsense\n",
		"mode: set\na.go:1.1,2.2 x 1\n",
		"mode: set\na.go:1.1 1 1\n",
		"mode: set\n:1.1,2.2 1 1\n",
		"mode: set\na.go:1.1,2.2 -1 1\n",
	} {
		if _, err := ParseGoProfile(strings.NewReader(in)); !errors.Is(err, ErrFormat) {
			t.Errorf("ParseGoProfile(%q) = %v, want ErrFormat", in, err)
		}
	}
}

func FuzzGoProfile(f *testing.F) {
	for _, name := range []string{"pass.out", "fail.out", "part-count.out"} {
		if b, err := os.ReadFile("testdata/" + name); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := ParseGoProfile(bytes.NewReader(data))
		if err != nil {
			return
		}
		for name, fc := range rep.Files {
			if fc.Covered < 0 || fc.Total < 0 || fc.Covered > fc.Total {
				t.Fatalf("%s: inconsistent %+v", name, fc)
			}
			if bp := fc.BP(); bp < 0 || bp > 10000 {
				t.Fatalf("%s: bp %d", name, bp)
			}
		}
	})
}
