package testrun

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// jestReport is the JSON report Jest writes with --json and Vitest with
// --reporter=json (Vitest copies Jest's shape).
type jestReport struct {
	NumTotalTests *int             `json:"numTotalTests"`
	TestResults   []jestFileResult `json:"testResults"`
}

type jestFileResult struct {
	Name             string          `json:"name"`
	Status           string          `json:"status"`
	Message          string          `json:"message"`
	AssertionResults []jestAssertion `json:"assertionResults"`
}

type jestAssertion struct {
	FullName        string   `json:"fullName"`
	Title           string   `json:"title"`
	Status          string   `json:"status"`
	FailureMessages []string `json:"failureMessages"`
}

// ParseJestJSON reads a Jest (--json) or Vitest (--reporter=json) report;
// runner names it in the Result. A test file that failed without any
// assertion result ("Test suite failed to run": a syntax, transform or
// import error) is a build failure. Statuses other than passed and failed
// (pending, skipped, todo, disabled) count as skipped.
func ParseJestJSON(r io.Reader, runner string) (*Result, error) {
	data, err := readAll(r)
	if err != nil {
		return nil, err
	}
	var rep jestReport
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&rep); err != nil {
		return nil, fmt.Errorf("%w: %s json: %v", ErrFormat, runner, err)
	}
	if rep.NumTotalTests == nil || rep.TestResults == nil {
		return nil, fmt.Errorf("%w: %s json: numTotalTests or testResults missing (not a Jest/Vitest report)", ErrFormat, runner)
	}
	res := &Result{Runner: runner}
	for _, f := range rep.TestResults {
		if f.Status == "failed" && len(f.AssertionResults) == 0 {
			res.BuildFailed = true
			res.addFailure(Failure{Name: f.Name, File: f.Name, Build: true, Message: f.Message})
			continue
		}
		for _, a := range f.AssertionResults {
			switch a.Status {
			case "passed":
				res.Passed++
			case "failed":
				res.Failed++
				msg := ""
				if len(a.FailureMessages) > 0 {
					msg = a.FailureMessages[0]
				}
				name := a.FullName
				if name == "" {
					name = a.Title
				}
				res.addFailure(Failure{Name: name, File: f.Name, Message: msg})
			default:
				res.Skipped++
			}
		}
		if f.Status == "failed" && f.Message != "" && !hasFailed(f.AssertionResults) {
			// The file failed outside any test (an error in a
			// hook or at import after tests were collected).
			res.Failed++
			res.addFailure(Failure{Name: f.Name, File: f.Name, Message: f.Message})
		}
	}
	return res.finish(), nil
}

func hasFailed(as []jestAssertion) bool {
	for _, a := range as {
		if a.Status == "failed" {
			return true
		}
	}
	return false
}

// stripANSI removes terminal escape sequences (CSI and OSC) from runner
// messages, which are shown to the model and to people.
func stripANSI(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != 0x1b {
			b = append(b, c)
			continue
		}
		if i+1 >= len(s) {
			break
		}
		switch s[i+1] {
		case '[':
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
		case ']':
			j := i + 2
			for j < len(s) && s[j] != 0x07 && !(s[j] == 0x1b && j+1 < len(s) && s[j+1] == '\\') {
				j++
			}
			if j < len(s) && s[j] == 0x1b {
				j++
			}
			i = j
		default:
			i++
		}
	}
	return string(b)
}
