package testrun

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

var (
	// cargoTest is "test tests::adds ... ok" (or FAILED, ignored).
	cargoTest = regexp.MustCompile(`^test (\S+) \.\.\. (ok|FAILED|ignored|ignored, .*)$`)
	// cargoSummary is "test result: ok. 1 passed; 0 failed; 1 ignored; ...".
	cargoSummary = regexp.MustCompile(`^test result: (ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored;`)
	// cargoRunning is "     Running tests/sub.rs (target/debug/deps/sub-…)".
	cargoRunning = regexp.MustCompile(`^\s+Running (?:unittests )?(\S+)`)
	// cargoCompileErr is "error: could not compile `calc` (test "mul") due to …".
	cargoCompileErr = regexp.MustCompile("^error: could not compile `([^`]+)`(?: \\(([^)]*)\\))?")
	// cargoErrAt is " --> tests/mul.rs:3:30" after an error[...] line.
	cargoErrAt = regexp.MustCompile(`^\s*--> ([^\s:]+\.rs):\d+:\d+`)
	// cargoPanic is "thread 'subtracts' (123) panicked at tests/sub.rs:3:18:".
	cargoPanic = regexp.MustCompile(`^thread '([^']+)'.* panicked at ([^\s:]+\.rs):\d+:\d+`)
)

// ParseCargo reads what `cargo test` prints (stdout and stderr together,
// as `cargo test 2>&1` gives them). Counts come from the "test result:"
// summary lines, one per test binary; failing test names from the per-test
// lines; "error: could not compile" is a build failure, located by the
// first "-->" after an error line. Output with neither a summary nor a
// compile error is ErrFormat.
func ParseCargo(r io.Reader) (*Result, error) {
	data, err := readAll(r)
	if err != nil {
		return nil, err
	}
	res := &Result{Runner: "cargo"}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxInput)
	var (
		binary     string // the test target now running
		seen       bool
		inError    bool
		errFile    string
		panicFiles = map[string]string{}
		failed     []Failure
	)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if m := cargoRunning.FindStringSubmatch(line); m != nil {
			binary = m[1]
			continue
		}
		if strings.HasPrefix(line, "error[") || strings.HasPrefix(line, "error:") {
			inError = true
		}
		if m := cargoErrAt.FindStringSubmatch(line); m != nil && inError && errFile == "" {
			errFile = m[1]
		}
		if m := cargoCompileErr.FindStringSubmatch(line); m != nil {
			seen = true
			res.BuildFailed = true
			name := m[1]
			if m[2] != "" {
				name += " (" + m[2] + ")"
			}
			res.addFailure(Failure{Name: name, Package: m[1], File: errFile, Build: true, Message: line})
			errFile, inError = "", false
			continue
		}
		if m := cargoPanic.FindStringSubmatch(line); m != nil {
			if _, ok := panicFiles[m[1]]; !ok {
				panicFiles[m[1]] = m[2]
			}
			continue
		}
		if m := cargoTest.FindStringSubmatch(line); m != nil {
			if m[2] == "FAILED" {
				failed = append(failed, Failure{Name: m[1], Package: binary})
			}
			continue
		}
		if m := cargoSummary.FindStringSubmatch(line); m != nil {
			seen = true
			p, err1 := strconv.Atoi(m[2])
			f, err2 := strconv.Atoi(m[3])
			ig, err3 := strconv.Atoi(m[4])
			if err1 != nil || err2 != nil || err3 != nil || p > maxInput || f > maxInput || ig > maxInput {
				return nil, fmt.Errorf("%w: cargo test: bad count in %q", ErrFormat, line)
			}
			res.Passed += p
			res.Failed += f
			res.Skipped += ig
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: cargo test: %v", ErrFormat, err)
	}
	if !seen {
		return nil, fmt.Errorf("%w: cargo test: no \"test result:\" line and no compile error", ErrFormat)
	}
	for _, f := range failed {
		f.File = panicFiles[f.Name]
		if f.File == "" && strings.HasSuffix(f.Package, ".rs") {
			f.File = f.Package
		}
		res.addFailure(f)
	}
	if res.Failed < len(failed) {
		// A per-test FAILED line without its summary (the run was cut
		// short): the failure stands.
		res.Failed = len(failed)
	}
	return res.finish(), nil
}
