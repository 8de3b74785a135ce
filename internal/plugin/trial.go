package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
)

// TestsDir is the folder of a plugin's test cases (`fluffy plugin
// test`): one JSON file per case, *.json.
const TestsDir = "tests"

// maxTestFile bounds one test case's file.
const maxTestFile = 1 << 20

// ErrTestCase is a test case's file that does not parse or check.
var ErrTestCase = errors.New("plugin: bad test case")

// TestCase is one tool call of a plugin's tests and what its answer must
// be: tests/<name>.json holding
//
//	{"tool": "count", "arguments": {"text": "a b"}, "expect": "\"words\":2"}
//
// Expect is a regular expression (RE2) the result's text must match;
// Error says the call must fail (a tool error), when true.
type TestCase struct {
	// Name is the file's name without .json.
	Name      string          `json:"-"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Expect    string          `json:"expect,omitempty"`
	Error     bool            `json:"error,omitempty"`
}

// ReadTests reads dir's tests/*.json in name order; none when there is
// no tests folder. A file that does not parse (unknown fields too) or
// whose expect is no regular expression is an error wrapping
// ErrTestCase.
func ReadTests(dir string) ([]TestCase, error) {
	files, err := filepath.Glob(filepath.Join(dir, TestsDir, "*.json"))
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	out := make([]TestCase, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("plugin tests: %w", err)
		}
		if len(b) > maxTestFile {
			return nil, fmt.Errorf("%w: %s: larger than %d bytes", ErrTestCase, f, maxTestFile)
		}
		var c TestCase
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		if err := d.Decode(&c); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrTestCase, f, err)
		}
		if c.Tool == "" {
			return nil, fmt.Errorf("%w: %s: no tool", ErrTestCase, f)
		}
		if _, err := regexp.Compile(c.Expect); err != nil {
			return nil, fmt.Errorf("%w: %s: expect: %w", ErrTestCase, f, err)
		}
		if len(c.Arguments) == 0 {
			c.Arguments = json.RawMessage("{}")
		}
		c.Name = filepath.Base(f[:len(f)-len(".json")])
		out = append(out, c)
	}
	return out, nil
}

// TestResult is one case's outcome.
type TestResult struct {
	Case TestCase
	Pass bool
	// Output is the result's text as fluffy gives it to the model
	// (labelled untrusted, capped).
	Output string
	// Why says why a case failed.
	Why string
}

// TestReport is what `fluffy plugin test` found: the plugin's tools as
// its server lists them, and each case's outcome.
type TestReport struct {
	Manifest Manifest
	// Runtime is the sandbox runtime the server ran in.
	Runtime string
	Tools   []ToolPin
	// Refused are tools fluffy would not register, each with why.
	Refused []string
	Results []TestResult
	// Err is why the server did not start or answer tools/list.
	Err error
}

// Passed reports whether the server answered and every case passed.
func (r TestReport) Passed() bool {
	if r.Err != nil {
		return false
	}
	for _, c := range r.Results {
		if !c.Pass {
			return false
		}
	}
	return true
}
