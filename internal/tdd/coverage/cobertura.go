package coverage

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"path"
	"strings"
)

// Cobertura is the XML coverage format written by coverage.py
// (`coverage xml`), Jest and Vitest (--coverageReporters=cobertura /
// --coverage.reporter=cobertura), JaCoCo converters and others: the
// report for Python, JS/TS and Java projects.
const Cobertura Format = "cobertura"

type cobCoverage struct {
	XMLName  xml.Name     `xml:"coverage"`
	Sources  []string     `xml:"sources>source"`
	Packages []cobPackage `xml:"packages>package"`
}

type cobPackage struct {
	Classes []cobClass `xml:"classes>class"`
}

type cobClass struct {
	Filename string    `xml:"filename,attr"`
	Lines    []cobLine `xml:"lines>line"`
}

type cobLine struct {
	Number int64 `xml:"number,attr"`
	Hits   int64 `xml:"hits,attr"`
}

// ParseCobertura reads a Cobertura XML report. Coverage is by line: each
// distinct line number of a file counts once, covered when any class
// listing it has hits > 0 (Java's inner classes share a file). File names
// are as the report gives them, relative to its <source> directories;
// absolute names under a source are made relative to it, so that Lookup
// by workspace-relative path works.
func ParseCobertura(r io.Reader) (*Report, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return nil, fmt.Errorf("coverage: read: %w", err)
	}
	if len(data) > maxInput {
		return nil, fmt.Errorf("%w: report larger than %d bytes", ErrFormat, maxInput)
	}
	var doc cobCoverage
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = true
	// The DOCTYPE Jest writes names an external DTD; it is never fetched.
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: cobertura: %v", ErrFormat, err)
	}
	type lineKey struct {
		file string
		line int64
	}
	covered := map[lineKey]bool{}
	rep := &Report{Files: map[string]FileCoverage{}}
	for _, p := range doc.Packages {
		for _, c := range p.Classes {
			if strings.TrimSpace(c.Filename) == "" {
				return nil, fmt.Errorf("%w: cobertura: class without a filename", ErrFormat)
			}
			name := relToSources(c.Filename, doc.Sources)
			if _, ok := rep.Files[name]; !ok {
				rep.Files[name] = FileCoverage{}
			}
			for _, l := range c.Lines {
				if l.Number <= 0 || l.Hits < 0 {
					return nil, fmt.Errorf("%w: cobertura: %s: bad line %d hits %d", ErrFormat, name, l.Number, l.Hits)
				}
				k := lineKey{name, l.Number}
				was, seen := covered[k]
				covered[k] = was || l.Hits > 0
				fc := rep.Files[name]
				if !seen {
					fc.Total++
				}
				if !was && l.Hits > 0 {
					fc.Covered++
				}
				rep.Files[name] = fc
			}
		}
	}
	return rep, nil
}

func relToSources(name string, sources []string) string {
	name = strings.ReplaceAll(name, `\`, "/")
	if !path.IsAbs(name) {
		return path.Clean(name)
	}
	for _, s := range sources {
		s = strings.TrimRight(strings.ReplaceAll(s, `\`, "/"), "/")
		if s != "" && strings.HasPrefix(name, s+"/") {
			return name[len(s)+1:]
		}
	}
	return path.Clean(name)
}
