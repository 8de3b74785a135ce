package testrun

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// JUnit XML as pytest writes it (--junitxml); the same structure is written
// by many other runners (Maven Surefire, jest-junit, vitest's junit
// reporter), so the parser accepts a <testsuites> root or a lone
// <testsuite>, nested suites included.
type junitSuites struct {
	XMLName xml.Name     `xml:""`
	Suites  []junitSuite `xml:"testsuite"`
	// Cases directly under the root, when the root is a <testsuite>.
	Cases []junitCase `xml:"testcase"`
}

type junitSuite struct {
	Name   string       `xml:"name,attr"`
	Suites []junitSuite `xml:"testsuite"`
	Cases  []junitCase  `xml:"testcase"`
}

type junitCase struct {
	Classname string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	File      string        `xml:"file,attr"`
	Failures  []junitResult `xml:"failure"`
	Errors    []junitResult `xml:"error"`
	Skipped   []junitResult `xml:"skipped"`
}

type junitResult struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// pyFileLine finds "tests/test_x.py:12: AssertionError" or
// "test_x.py:1: in <module>" in a failure's text.
var pyFileLine = regexp.MustCompile(`(?m)^([^\s:]+\.py):\d+: `)

// maxSuiteDepth bounds nested <testsuite> elements.
const maxSuiteDepth = 32

// ParseJUnit reads a JUnit XML report. A <failure> is a failed test; an
// <error> is a failed test too, and when pytest reports it as a
// "collection failure" (the test module did not import: the Python
// equivalent of a compile error) it is a build failure.
func ParseJUnit(r io.Reader) (*Result, error) {
	data, err := readAll(r)
	if err != nil {
		return nil, err
	}
	var doc junitSuites
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = true
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: junit xml: %v", ErrFormat, err)
	}
	res := &Result{Runner: "junit"}
	switch doc.XMLName.Local {
	case "testsuites":
	case "testsuite":
		if err := junitAdd(res, junitSuite{Cases: doc.Cases, Suites: doc.Suites}, 0); err != nil {
			return nil, err
		}
		return res.finish(), nil
	default:
		return nil, fmt.Errorf("%w: junit xml: root element is <%s>, want <testsuites> or <testsuite>", ErrFormat, doc.XMLName.Local)
	}
	for _, s := range doc.Suites {
		if s.Name == "pytest" {
			res.Runner = "pytest"
		}
		if err := junitAdd(res, s, 0); err != nil {
			return nil, err
		}
	}
	return res.finish(), nil
}

func junitAdd(res *Result, s junitSuite, depth int) error {
	if depth > maxSuiteDepth {
		return fmt.Errorf("%w: junit xml: test suites nested deeper than %d", ErrFormat, maxSuiteDepth)
	}
	for _, c := range s.Cases {
		switch {
		case len(c.Failures) > 0 || len(c.Errors) > 0:
			res.Failed++
			f := Failure{Name: c.Name, Package: c.Classname, File: c.File}
			var r junitResult
			if len(c.Failures) > 0 {
				r = c.Failures[0]
			} else {
				r = c.Errors[0]
				if r.Message == "collection failure" {
					f.Build = true
					res.BuildFailed = true
				}
			}
			f.Message = r.Message
			if f.File == "" && looksLikeFile(c.Classname) {
				// Vitest and jest-junit name the test file as the
				// class; a "test" named after its file is the file
				// failing to load (a transform or import error).
				f.File = c.Classname
				if c.Name == c.Classname {
					f.Build = true
					res.BuildFailed = true
				}
			}
			if f.File == "" {
				if m := pyFileLine.FindAllStringSubmatch(r.Text, -1); m != nil {
					// The innermost frame that is a test file is
					// the last one pytest prints.
					f.File = m[len(m)-1][1]
					for _, x := range m {
						if strings.HasPrefix(pathBase(x[1]), "test_") || strings.HasSuffix(x[1], "_test.py") {
							f.File = x[1]
						}
					}
				}
			}
			res.addFailure(f)
		case len(c.Skipped) > 0:
			res.Skipped++
		default:
			res.Passed++
		}
	}
	for _, sub := range s.Suites {
		if err := junitAdd(res, sub, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func pathBase(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		return p[i+1:]
	}
	return p
}

// looksLikeFile tells a JUnit classname that is a file path
// ("src/calc.test.ts") from a dotted class or module name.
func looksLikeFile(classname string) bool {
	if strings.Contains(classname, "/") {
		return true
	}
	switch pathExt(classname) {
	case ".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".mts", ".cts", ".py", ".rb", ".go", ".rs":
		return true
	}
	return false
}

func pathExt(p string) string {
	if i := strings.LastIndexByte(p, '.'); i >= 0 && !strings.ContainsAny(p[i:], `/\`) {
		return p[i:]
	}
	return ""
}
