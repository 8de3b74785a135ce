package builtin

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tdd/coverage"
	"github.com/fluffy-agent/fluffy/internal/tdd/testrun"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// Template is the sandbox template of shell.exec and test.run.
const Template = "code-executor"

// maxTimeout bounds the timeout a call may ask for.
const maxTimeout = 30 * time.Minute

// ShellIn is shell.exec's input.
type ShellIn struct {
	Command        string `json:"command" jsonschema:"a shell command line, run by /bin/sh -c in the workspace"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this many seconds; default 120"`
}

func (b *builtins) shell() (*tool.Tool, error) {
	return tool.New(tool.Definition[ShellIn]{
		Name: "shell.exec",
		Description: "Run a shell command in a sandbox over the workspace (no network). Files it writes go to your change set. " +
			"Output is capped; a non-zero exit is reported as an error.",
		Action:    operation.Exec,
		Tags:      []string{tool.TagExec},
		Execution: tool.Execution{Class: tool.Sandbox, Template: Template},
		Refine: func(s *jsonschema.Schema) error {
			s.Properties["timeout_seconds"].Minimum = ptr(1.0)
			s.Properties["timeout_seconds"].Maximum = ptr(maxTimeout.Seconds())
			return nil
		},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *ShellIn, op *operation.Operation) error {
			if strings.TrimSpace(in.Command) == "" {
				return errors.New("the command is empty")
			}
			op.CommandLine = in.Command
			return nil
		},
		Command: func(_ context.Context, in *ShellIn) (tool.Command, error) {
			return tool.Command{Argv: []string{"/bin/sh", "-c", in.Command}, Timeout: time.Duration(in.TimeoutSeconds) * time.Second}, nil
		},
	})
}

func ptr[T any](v T) *T { return &v }

// TestIn is test.run's input.
type TestIn struct {
	Runner         string   `json:"runner,omitempty" jsonschema:"go, cargo, pytest, jest or vitest; default: detected from the workspace"`
	Args           []string `json:"args,omitempty" jsonschema:"extra arguments for the runner (packages, test filters)"`
	TimeoutSeconds int      `json:"timeout_seconds,omitempty" jsonschema:"kill the run after this many seconds; default 120"`
}

// runner says how to run and parse one test runner. Argv is what the
// policy judges; Exec is what runs (a fixed wrapper when the runner's
// machine-readable report needs one). Cover, when the runner can measure
// coverage, is what runs instead when coverage is wanted: a fixed wrapper
// that writes the coverage report to the sandbox's private /tmp (never
// the workspace, so never the change set) and prints it after the
// runner's report and a line holding mark alone; coverFormat is its
// format.
type runner struct {
	argv        func(args []string) []string
	exec        func(args []string) []string
	cover       func(mark string, args []string) []string
	coverFormat coverage.Format
	env         []string
	format      testrun.Format
}

var runners = map[string]runner{
	"go": {
		argv: func(a []string) []string { return append([]string{"go", "test", "-json"}, orAll(a, "./...")...) },
		cover: func(mark string, a []string) []string {
			return append([]string{"/bin/sh", "-c", `go test -json -coverprofile=/tmp/fluffy-cover.out "$@"; s=$?; printf '\n%s\n' "$0"; cat /tmp/fluffy-cover.out 2>/dev/null; exit $s`, mark}, orAll(a, "./...")...)
		},
		coverFormat: coverage.GoProfile,
		env:         []string{"GOCACHE=/tmp/go-cache", "GOPATH=/tmp/go", "GOTOOLCHAIN=local", "GOPROXY=off", "CGO_ENABLED=0"},
		format:      testrun.GoJSON,
	},
	"cargo": {
		argv:   func(a []string) []string { return append([]string{"cargo", "test"}, a...) },
		env:    []string{"CARGO_HOME=/tmp/cargo", "CARGO_NET_OFFLINE=true"},
		format: testrun.CargoText,
	},
	"pytest": {
		argv: func(a []string) []string { return append([]string{"pytest", "-q"}, a...) },
		exec: func(a []string) []string {
			return []string{"/bin/sh", "-c", `pytest -q --junitxml=/tmp/fluffy-junit.xml -p no:cacheprovider "$@" >&2; s=$?; cat /tmp/fluffy-junit.xml 2>/dev/null; exit $s`, "pytest"}
		},
		// Coverage needs pytest-cov; without it the report after the
		// mark is empty and the result says so. Its data file goes to
		// /tmp, not the workspace.
		cover: func(mark string, a []string) []string {
			return append([]string{"/bin/sh", "-c", `if pytest --help 2>/dev/null | grep -q -- '--cov='; then set -- --cov=. --cov-report=xml:/tmp/fluffy-cov.xml "$@"; fi; ` +
				`COVERAGE_FILE=/tmp/fluffy-coverage pytest -q --junitxml=/tmp/fluffy-junit.xml -p no:cacheprovider "$@" >&2; s=$?; cat /tmp/fluffy-junit.xml 2>/dev/null; ` +
				`printf '\n%s\n' "$0"; cat /tmp/fluffy-cov.xml 2>/dev/null; exit $s`, mark}, a...)
		},
		coverFormat: coverage.Cobertura,
		env:         []string{"PYTHONDONTWRITEBYTECODE=1"},
		format:      testrun.JUnitXML,
	},
	"jest": {
		argv:   func(a []string) []string { return append([]string{"npx", "--no-install", "jest", "--json"}, a...) },
		format: testrun.JestJSON,
	},
	"vitest": {
		argv: func(a []string) []string {
			return append([]string{"npx", "--no-install", "vitest", "run", "--reporter=json"}, a...)
		},
		format: testrun.VitestJSON,
	},
}

func orAll(a []string, all string) []string {
	if len(a) == 0 {
		return []string{all}
	}
	return a
}

// detect picks the runner from the workspace's files.
func (b *builtins) detect() (string, error) {
	has := func(p string) bool { _, err := b.o.ChangeSet.Stat(p); return err == nil }
	switch {
	case has("go.mod"):
		return "go", nil
	case has("Cargo.toml"):
		return "cargo", nil
	case has("pytest.ini") || has("pyproject.toml") || has("setup.cfg") || has("conftest.py"):
		return "pytest", nil
	case has("package.json"):
		data, _ := b.readAll("test.run", "package.json")
		if bytes.Contains(data, []byte("vitest")) {
			return "vitest", nil
		}
		return "jest", nil
	}
	return "", errors.New("no test runner detected (looked for go.mod, Cargo.toml, pytest.ini/pyproject.toml/setup.cfg/conftest.py, package.json); pass runner")
}

func (b *builtins) runnerOf(in *TestIn) (string, runner, error) {
	name := in.Runner
	if name == "" {
		var err error
		if name, err = b.detect(); err != nil {
			return "", runner{}, err
		}
	}
	r, ok := runners[name]
	if !ok {
		return "", runner{}, fmt.Errorf("unknown runner %q (have go, cargo, pytest, jest, vitest)", name)
	}
	return name, r, nil
}

func (b *builtins) testRun() (*tool.Tool, error) {
	return tool.New(tool.Definition[TestIn]{
		Name: "test.run",
		Description: "Run the project's tests in a sandbox (runner detected: go, cargo, pytest, jest, vitest — or given). " +
			"Returns a summary of passed and failed tests; the result moves the TDD cycle (red → green).",
		Action:    operation.Exec,
		Tags:      []string{tool.TagExec, "test"},
		Execution: tool.Execution{Class: tool.Sandbox, Template: Template},
		Refine: func(s *jsonschema.Schema) error {
			s.Properties["runner"].Enum = []any{"go", "cargo", "pytest", "jest", "vitest"}
			s.Properties["timeout_seconds"].Minimum = ptr(1.0)
			s.Properties["timeout_seconds"].Maximum = ptr(maxTimeout.Seconds())
			return nil
		},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *TestIn, op *operation.Operation) error {
			_, r, err := b.runnerOf(in)
			if err != nil {
				return err
			}
			op.Argv = r.argv(in.Args)
			return nil
		},
		Command: func(_ context.Context, in *TestIn) (tool.Command, error) {
			name, r, err := b.runnerOf(in)
			if err != nil {
				return tool.Command{}, err
			}
			argv := r.argv(in.Args)
			if r.exec != nil {
				argv = append(r.exec(in.Args), in.Args...)
			}
			var cov *coverRun
			if b.o.Coverage != nil && b.o.Coverage() {
				cov = &coverRun{}
				if r.cover != nil {
					cov.format, cov.mark = r.coverFormat, newMark()
					argv = r.cover(cov.mark, in.Args)
				}
			}
			return tool.Command{
				Argv: argv, Env: r.env, Timeout: time.Duration(in.TimeoutSeconds) * time.Second,
				Collect: func(out tool.CommandOutput) (tool.Result, error) { return collectTests(name, r.format, cov, out), nil },
			}, nil
		},
	})
}

// coverRun is a test run asked to measure coverage: the report's format
// and the line that separates it from the runner's report (empty when
// the runner cannot measure coverage).
type coverRun struct {
	format coverage.Format
	mark   string
}

// newMark is a separator line no runner prints by chance. The tests run
// in the same sandbox and could print it on purpose, but they could as
// well write the coverage report: coverage is the project's own
// statement about itself, a discipline the machine keeps, not a boundary
// against hostile code.
func newMark() string {
	return "fluffy-coverage-" + rand.Text()
}

// splitCoverage separates the coverage report that follows the last
// mark line from the runner's report before it; found is false when no
// mark line is there (the run was cut short).
func splitCoverage(stdout []byte, mark string) (report, cov []byte, found bool) {
	sep := []byte("\n" + mark + "\n")
	i := bytes.LastIndex(stdout, sep)
	if i < 0 {
		return stdout, nil, false
	}
	return stdout[:i], stdout[i+len(sep):], true
}

// measure reads the coverage a run wrote after its report: the report
// (nil when there is none) and one line for the model either way.
func measure(name string, cov *coverRun, out *tool.CommandOutput) (*coverage.Report, string) {
	if cov.mark == "" {
		return nil, "coverage: not measured (fluffy measures coverage with go, and with pytest when pytest-cov is installed; not with " + name + ")"
	}
	report, data, found := splitCoverage(out.Stdout, cov.mark)
	out.Stdout = report
	switch {
	case len(out.Limits) > 0:
		return nil, "coverage: not measured (a limit was reached: " + strings.Join(out.Limits, ", ") + ")"
	case !found:
		return nil, "coverage: not measured (the run ended before writing its coverage report)"
	case len(bytes.TrimSpace(data)) == 0:
		if name == "pytest" {
			return nil, "coverage: not measured (pytest-cov is not installed in the sandbox)"
		}
		return nil, "coverage: not measured (the runner wrote no coverage report; did the build fail?)"
	}
	rep, err := coverage.Parse(cov.format, bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Sprintf("coverage: the report could not be read (%v)", err)
	}
	if len(rep.Files) == 0 {
		// A build that failed leaves a profile with its mode line only.
		return nil, "coverage: not measured (the coverage report lists no file)"
	}
	t := rep.Total()
	return rep, fmt.Sprintf("coverage: %d.%02d%% of %d %s in %d file(s)", t.BP()/100, t.BP()%100, t.Total, coverUnit(cov.format), len(rep.Files))
}

func coverUnit(f coverage.Format) string {
	if f == coverage.GoProfile {
		return "statements"
	}
	return "lines"
}

// collectTests parses a runner's report into a summary for the model and
// the structured result for the TDD machine; cov, when not nil, says the
// run was asked to measure coverage.
func collectTests(name string, f testrun.Format, cov *coverRun, out tool.CommandOutput) tool.Result {
	var rep *coverage.Report
	var covLine string
	if cov != nil {
		rep, covLine = measure(name, cov, &out)
	}
	res, err := testrun.Parse(f, bytes.NewReader(out.Stdout))
	if err != nil || res == nil {
		var sb strings.Builder
		fmt.Fprintf(&sb, "%s: the runner's report could not be read (%v); exit status %d", name, err, out.ExitCode)
		if len(out.Limits) > 0 {
			fmt.Fprintf(&sb, "; limit reached: %s", strings.Join(out.Limits, ", "))
		}
		sb.WriteString("\n")
		sb.Write(tail(out.Stderr, 8<<10))
		return tool.Result{Output: []byte(sb.String()), IsError: true}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: %s — %d passed, %d failed, %d skipped (exit status %d)\n", name, res.Outcome(), res.Passed, res.Failed, res.Skipped, out.ExitCode)
	for i, fl := range res.Failures {
		if i == 20 {
			fmt.Fprintf(&sb, "... and %d more failures\n", len(res.Failures)-i)
			break
		}
		fmt.Fprintf(&sb, "FAIL %s", fl.Name)
		if fl.File != "" {
			fmt.Fprintf(&sb, " (%s)", fl.File)
		}
		if fl.Message != "" {
			fmt.Fprintf(&sb, ": %s", fl.Message)
		}
		sb.WriteByte('\n')
		for _, l := range strings.Split(fl.Output, "\n") {
			if l != "" {
				fmt.Fprintf(&sb, "    %s\n", l)
			}
		}
	}
	if res.Failed > 0 || out.ExitCode != 0 {
		if len(res.Failures) == 0 && len(out.Stderr) > 0 {
			sb.Write(tail(out.Stderr, 8<<10))
		}
	}
	if covLine != "" {
		sb.WriteString(covLine)
		sb.WriteByte('\n')
		res.Coverage = rep
	}
	return tool.Result{Output: []byte(sb.String()), IsError: res.Outcome() == testrun.Failed || out.ExitCode != 0, Data: res}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
