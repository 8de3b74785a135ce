package builtin

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/tdd/coverage"
	"github.com/fluffy-agent/fluffy/internal/tdd/testrun"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// TestGoCoverWrapper runs the go runner's coverage command line, as the
// sandbox would, on a real module with the real go command: the report
// parses as go test -json, the profile after the mark as a Go coverage
// profile, and the result carries both.
func TestGoCoverWrapper(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go toolchain")
	}
	ws := t.TempDir()
	for name, body := range map[string]string{
		"go.mod":       "module example.com/calc\n\ngo 1.22\n",
		"calc.go":      "package calc\n\nfunc Add(a, b int) int { return a + b }\n\nfunc Sub(a, b int) int { return a - b }\n",
		"calc_test.go": "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"Add\")\n\t}\n}\n",
	} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := runners["go"]
	mark := newMark()
	argv := r.cover(mark, nil)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	res := collectTests("go", r.format, &coverRun{format: r.coverFormat, mark: mark}, tool.CommandOutput{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()})
	tr, ok := res.Data.(*testrun.Result)
	if !ok || res.IsError || tr.Outcome() != testrun.Passed || tr.Coverage == nil {
		t.Fatalf("result %+v: %s", res.Data, res.Output)
	}
	if f, ok := tr.Coverage.Lookup("calc.go"); !ok || f.Covered != 1 || f.Total != 2 {
		t.Fatalf("calc.go coverage %+v (%v) in %+v", f, ok, tr.Coverage)
	}
	if !strings.Contains(string(res.Output), "coverage: 50.00% of 2 statements in 1 file(s)") {
		t.Errorf("summary: %s", res.Output)
	}
}

const goPass = `{"Action":"run","Package":"m","Test":"TestA"}
{"Action":"pass","Package":"m","Test":"TestA"}
{"Action":"pass","Package":"m"}
`

func TestCollectCoverage(t *testing.T) {
	mark := "fluffy-coverage-XYZ"
	cov := &coverRun{format: coverage.GoProfile, mark: mark}
	profile := "mode: set\nm/calc.go:3.1,3.10 1 1\nm/calc.go:5.1,5.10 1 0\n"
	for _, c := range []struct {
		name, stdout string
		limits       []string
		cov          *coverRun
		runner       string
		want         string
		measured     bool
	}{
		{name: "measured", stdout: goPass + "\n" + mark + "\n" + profile, cov: cov, want: "coverage: 50.00% of 2 statements in 1 file(s)", measured: true},
		{name: "a mark in the output before the last counts not", stdout: goPass + "\n" + mark + "\n" + "\n" + mark + "\n" + profile, cov: cov, measured: true, want: "coverage: 50.00%"},
		{name: "no mark", stdout: goPass, cov: cov, want: "coverage: not measured (the run ended before writing its coverage report)"},
		{name: "empty profile", stdout: goPass + "\n" + mark + "\n", cov: cov, want: "coverage: not measured (the runner wrote no coverage report"},
		{name: "pytest without pytest-cov", runner: "pytest", stdout: "<testsuites><testsuite tests=\"1\"><testcase classname=\"t\" name=\"a\"/></testsuite></testsuites>\n" + mark + "\n",
			cov: &coverRun{format: coverage.Cobertura, mark: mark}, want: "coverage: not measured (pytest-cov is not installed in the sandbox)"},
		{name: "limit", stdout: goPass + "\n" + mark + "\n" + profile, limits: []string{"output"}, cov: cov, want: "coverage: not measured (a limit was reached: output)"},
		{name: "profile without blocks", stdout: goPass + "\n" + mark + "\nmode: set\n", cov: cov, want: "coverage: not measured (the coverage report lists no file)"},
		{name: "bad profile", stdout: goPass + "\n" + mark + "\nmode: nope\n", cov: cov, want: "coverage: the report could not be read"},
		{name: "runner without coverage", runner: "cargo", stdout: goPass, cov: &coverRun{}, want: "coverage: not measured (fluffy measures coverage with go, and with pytest when pytest-cov is installed; not with cargo)"},
		{name: "not asked", stdout: goPass},
	} {
		t.Run(c.name, func(t *testing.T) {
			runner, format := "go", testrun.GoJSON
			if c.runner == "pytest" {
				runner, format = "pytest", testrun.JUnitXML
			} else if c.runner != "" {
				runner = c.runner
			}
			res := collectTests(runner, format, c.cov, tool.CommandOutput{Stdout: []byte(c.stdout), Limits: c.limits})
			tr, ok := res.Data.(*testrun.Result)
			if !ok {
				t.Fatalf("no result: %s", res.Output)
			}
			if (tr.Coverage != nil) != c.measured {
				t.Errorf("coverage %+v, measured want %v", tr.Coverage, c.measured)
			}
			if c.want == "" && strings.Contains(string(res.Output), "coverage") || !strings.Contains(string(res.Output), c.want) {
				t.Errorf("output %q, want %q", res.Output, c.want)
			}
		})
	}
}

// FuzzCollectCoverage: whatever a run prints, collecting never panics, and
// a coverage report is kept only when it follows the mark.
func FuzzCollectCoverage(f *testing.F) {
	mark := "fluffy-coverage-F"
	f.Add([]byte(goPass + "\n" + mark + "\nmode: set\nm/a.go:1.1,2.2 1 1\n"))
	f.Add([]byte(goPass))
	f.Add([]byte("\n" + mark + "\n"))
	f.Fuzz(func(t *testing.T, stdout []byte) {
		res := collectTests("go", testrun.GoJSON, &coverRun{format: coverage.GoProfile, mark: mark}, tool.CommandOutput{Stdout: stdout})
		if tr, ok := res.Data.(*testrun.Result); ok && tr.Coverage != nil && !bytes.Contains(stdout, []byte("\n"+mark+"\n")) {
			t.Fatalf("coverage without a mark: %q", stdout)
		}
	})
}
