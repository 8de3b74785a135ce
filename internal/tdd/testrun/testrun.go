// Package testrun turns the output of real test runners into one
// language-neutral Result: which tests passed, which failed, whether the
// build (compilation, collection, transform) of a test failed, and whether
// any test ran at all.
//
// Parsers exist for `go test -json`, pytest's JUnit XML (--junitxml), the
// Jest and Vitest JSON reports (--json / --reporter=json) and the text
// that `cargo test` prints. They read outside input that a sandboxed
// process wrote, so they are strict about structure, bounded in what they
// keep, and fuzzed; a parser never panics and never reports a pass it did
// not see.
//
// The TDD machine only needs Result.Outcome and the failures' files and
// packages; everything else is for people.
package testrun

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/tdd/coverage"
)

// Outcome is what a run means for the TDD machine.
type Outcome string

// The outcomes. A run that ran no test is NoTests: it is neither red nor
// green and moves nothing.
const (
	Passed  Outcome = "passed"
	Failed  Outcome = "failed"
	NoTests Outcome = "no_tests"
)

// Failure is one failing test, or one test file or package whose build
// failed.
type Failure struct {
	// Name is the test's name as the runner reports it; for a build
	// failure, the package or file that did not build.
	Name string `json:"name"`
	// Package is the Go import path, Python module, or test binary.
	Package string `json:"package,omitempty"`
	// File is the test file as the runner names it (often relative to
	// the project root), when known.
	File string `json:"file,omitempty"`
	// Build is set when the failure is a compile, collection or
	// transform error rather than a failed assertion.
	Build bool `json:"build,omitempty"`
	// Message is the first line of the failure, capped.
	Message string `json:"message,omitempty"`
	// Output is, for a build failure, what the build said (the compile
	// error, or the module that could not be fetched and why): a few
	// lines, capped, control characters removed.
	Output string `json:"output,omitempty"`
}

// Result is one parsed test run.
type Result struct {
	// Runner names the format: go, pytest, jest, vitest, cargo.
	Runner  string `json:"runner"`
	Passed  int    `json:"passed"`
	Failed  int    `json:"failed"`
	Skipped int    `json:"skipped"`
	// BuildFailed is set when some test code did not compile or load.
	BuildFailed bool `json:"build_failed,omitempty"`
	// Failures lists at most MaxFailures failures, sorted.
	Failures []Failure `json:"failures,omitempty"`
	// Coverage is the coverage the same run measured, when the runner
	// was asked for it (nil: not measured). The parsers here never set
	// it; the caller that ran the runner attaches it.
	Coverage *coverage.Report `json:"coverage,omitempty"`
}

// MaxFailures caps the failures a Result keeps (the counts stay exact).
const MaxFailures = 50

// maxMessage caps Failure.Message; maxOutputLines and maxOutputLine
// cap Failure.Output.
const (
	maxMessage     = 200
	maxOutputLines = 8
	maxOutputLine  = 512
)

func capLine(l string) string {
	if len(l) > maxOutputLine {
		return l[:maxOutputLine] + "…"
	}
	return l
}

// maxInput caps what a parser reads: 64 MiB is far more than any runner's
// report and bounds memory when a process writes garbage.
const maxInput = 64 << 20

// ErrFormat is wrapped by every parse error: the input is not the format
// the parser expects. Callers treat such a run as neither red nor green.
var ErrFormat = errors.New("testrun: malformed runner output")

// Outcome classifies the run: any failed test or failed build is Failed
// (a compile failure of a new test counts as red); otherwise any passed
// test is Passed; otherwise NoTests.
func (r *Result) Outcome() Outcome {
	switch {
	case r.Failed > 0 || r.BuildFailed:
		return Failed
	case r.Passed > 0:
		return Passed
	default:
		return NoTests
	}
}

// Format names a runner's output format.
type Format string

// The formats Parse understands.
const (
	GoJSON     Format = "go-json"
	JUnitXML   Format = "junit-xml"
	JestJSON   Format = "jest-json"
	VitestJSON Format = "vitest-json"
	CargoText  Format = "cargo-text"
)

// Formats lists the formats, in a stable order.
func Formats() []Format { return []Format{GoJSON, JUnitXML, JestJSON, VitestJSON, CargoText} }

// Parse reads one report in the given format.
func Parse(f Format, r io.Reader) (*Result, error) {
	switch f {
	case GoJSON:
		return ParseGoJSON(r)
	case JUnitXML:
		return ParseJUnit(r)
	case JestJSON:
		return ParseJestJSON(r, "jest")
	case VitestJSON:
		return ParseJestJSON(r, "vitest")
	case CargoText:
		return ParseCargo(r)
	}
	return nil, fmt.Errorf("testrun: unknown format %q (known: go-json, junit-xml, jest-json, vitest-json, cargo-text)", f)
}

func readAll(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return nil, fmt.Errorf("testrun: read: %w", err)
	}
	if len(b) > maxInput {
		return nil, fmt.Errorf("%w: report larger than %d bytes", ErrFormat, maxInput)
	}
	return b, nil
}

func (r *Result) addFailure(f Failure) {
	f.Message = firstLine(controlFree(stripANSI(f.Message)))
	var lines []string
	for _, l := range strings.Split(f.Output, "\n") {
		if l = controlFree(stripANSI(l)); strings.TrimSpace(l) != "" && len(lines) < maxOutputLines {
			lines = append(lines, capLine(l))
		}
	}
	f.Output = strings.Join(lines, "\n")
	r.Failures = append(r.Failures, f)
}

// finish sorts and caps the failures.
func (r *Result) finish() *Result {
	sort.SliceStable(r.Failures, func(i, j int) bool {
		a, b := r.Failures[i], r.Failures[j]
		if a.Package != b.Package {
			return a.Package < b.Package
		}
		if a.File != b.File {
			return a.File < b.File
		}
		return a.Name < b.Name
	})
	if len(r.Failures) > MaxFailures {
		r.Failures = r.Failures[:MaxFailures]
	}
	return r
}

func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			s = s[:i]
			break
		}
	}
	if len(s) > maxMessage {
		s = s[:maxMessage]
	}
	return s
}

// controlFree drops C0 control characters other than tab and newline and
// DEL: runner messages are shown to the model and to terminals.
func controlFree(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t' && c != '\n') || c == 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t' && c != '\n') || c == 0x7f {
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}
