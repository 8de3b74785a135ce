package testrun

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// testKey names one test of one package.
type testKey struct{ pkg, test string }

// goEvent is one line of `go test -json` (cmd/test2json), including the
// build events Go 1.24 added.
type goEvent struct {
	Action      string `json:"Action"`
	Package     string `json:"Package"`
	Test        string `json:"Test"`
	Output      string `json:"Output"`
	ImportPath  string `json:"ImportPath"`
	FailedBuild string `json:"FailedBuild"`
}

// goFileLine finds "name_test.go:12:" (test output, indented) or
// "dir/name_test.go:12:3:" (compiler output) in one line.
var goFileLine = regexp.MustCompile(`^\s*([^\s:]+\.go):\d+:`)

// ParseGoJSON reads the output of `go test -json`. Lines that are not JSON
// objects (stray stderr) are ignored; input without a single event is
// ErrFormat. Counts are of top-level tests; a package that fails without a
// failing test (a panic in init, a timeout, a TestMain exit) counts as one
// failure; a package whose test build failed sets BuildFailed.
func ParseGoJSON(r io.Reader) (*Result, error) {
	data, err := readAll(r)
	if err != nil {
		return nil, err
	}
	res := &Result{Runner: "go"}
	fileOf := map[testKey]string{}   // first file:line in a test's output
	buildFile := map[string]string{} // import path -> first file in build output
	buildOut := map[string]string{}  // import path -> build output, without its "# pkg" header
	failedTests := map[string]int{}  // package -> failing top-level tests
	events := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxInput)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var ev goEvent
		if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
			continue
		}
		events++
		switch ev.Action {
		case "build-output":
			pkg := goImportPath(ev.ImportPath)
			if _, ok := buildFile[pkg]; !ok {
				if m := goFileLine.FindStringSubmatch(ev.Output); m != nil {
					buildFile[pkg] = m[1]
				}
			}
			if !strings.HasPrefix(ev.Output, "# ") && len(buildOut[pkg]) < maxOutputLines*maxOutputLine {
				buildOut[pkg] += ev.Output
			}
		case "output":
			if ev.Test != "" {
				k := testKey{ev.Package, ev.Test}
				if _, ok := fileOf[k]; !ok {
					if m := goFileLine.FindStringSubmatch(ev.Output); m != nil {
						fileOf[k] = m[1]
					}
				}
			}
		case "pass", "fail", "skip":
			if ev.Test == "" {
				if ev.Action != "fail" {
					continue
				}
				if ev.FailedBuild != "" {
					pkg := goImportPath(ev.FailedBuild)
					res.BuildFailed = true
					res.addFailure(Failure{Name: pkg, Package: ev.Package, File: buildFile[pkg], Build: true, Message: "build failed", Output: buildOut[pkg]})
				} else if failedTests[ev.Package] == 0 {
					res.Failed++
					res.addFailure(Failure{Name: ev.Package, Package: ev.Package, Message: "package failed without a failing test"})
				}
				continue
			}
			if strings.Contains(ev.Test, "/") {
				// Subtests roll up into their top-level test.
				continue
			}
			switch ev.Action {
			case "pass":
				res.Passed++
			case "skip":
				res.Skipped++
			case "fail":
				res.Failed++
				failedTests[ev.Package]++
				res.addFailure(Failure{Name: ev.Test, Package: ev.Package, File: goFirstFile(fileOf, ev.Package, ev.Test)})
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: go test -json: %v", ErrFormat, err)
	}
	if events == 0 {
		return nil, fmt.Errorf("%w: go test -json: no test2json event found", ErrFormat)
	}
	// A build-fail without the matching package event (older Go prints
	// the package event; keep the build failure either way).
	return res.finish(), nil
}

// goFirstFile finds the file of a failing test in its own output or, for a
// test that failed only through its subtests, in theirs.
func goFirstFile(fileOf map[testKey]string, pkg, test string) string {
	if f, ok := fileOf[testKey{pkg, test}]; ok {
		return f
	}
	best := ""
	for k, f := range fileOf {
		if k.pkg == pkg && strings.HasPrefix(k.test, test+"/") && (best == "" || f < best) {
			best = f
		}
	}
	return best
}

// goImportPath strips the " [pkg.test]" suffix of a test build's name.
func goImportPath(s string) string {
	if i := strings.Index(s, " ["); i >= 0 {
		return s[:i]
	}
	return s
}
