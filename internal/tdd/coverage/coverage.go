// Package coverage reads statement coverage into a language-neutral
// Report: for each source file, how many statements (or lines, for
// formats that count lines) exist and how many ran. The TDD machine uses
// it for explore mode's tech-debt budget: coverage of the files changed
// without a test must not fall below the baseline minus the budget.
//
// Go's -coverprofile format and Cobertura XML (coverage.py for Python,
// Jest and Vitest for JS/TS, Java tools) are parsed here; another format
// plugs in by producing a Report, nothing in the machine is
// language-specific. Percentages are integer basis points
// (1 % = 100 bp) so that decisions and their hashes are exact.
package coverage

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// FileCoverage is the coverage of one file.
type FileCoverage struct {
	Covered int64 `json:"covered"`
	Total   int64 `json:"total"`
}

// BP is the coverage in basis points, 0..10000; a file with no statement
// is fully covered.
func (f FileCoverage) BP() int64 {
	if f.Total <= 0 {
		return 10000
	}
	return f.Covered * 10000 / f.Total
}

// Report is the coverage of one run, by file as the tool names it (Go:
// "module/path/file.go").
type Report struct {
	Files map[string]FileCoverage `json:"files"`
}

// Total sums every file.
func (r *Report) Total() FileCoverage {
	var t FileCoverage
	for _, f := range r.Files {
		t.Covered += f.Covered
		t.Total += f.Total
	}
	return t
}

// Lookup finds the coverage of a workspace-relative slash path: the file
// whose name equals it or ends with "/"+rel. When several match (the same
// relative path in two modules) the longest name wins, then the first in
// order, so the answer is deterministic.
func (r *Report) Lookup(rel string) (FileCoverage, bool) {
	if f, ok := r.Files[rel]; ok {
		return f, true
	}
	names := make([]string, 0, len(r.Files))
	for name := range r.Files {
		if strings.HasSuffix(name, "/"+rel) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return FileCoverage{}, false
	}
	sort.Slice(names, func(i, j int) bool {
		if len(names[i]) != len(names[j]) {
			return len(names[i]) > len(names[j])
		}
		return names[i] < names[j]
	})
	return r.Files[names[0]], true
}

// Format names a coverage format.
type Format string

// GoProfile is the text `go test -coverprofile` writes.
const GoProfile Format = "go-cover"

// ErrFormat is wrapped by every parse error.
var ErrFormat = errors.New("coverage: malformed profile")

// maxInput caps what a parser reads.
const maxInput = 256 << 20

// Parse reads a report in the given format.
func Parse(f Format, r io.Reader) (*Report, error) {
	switch f {
	case GoProfile:
		return ParseGoProfile(r)
	case Cobertura:
		return ParseCobertura(r)
	}
	return nil, fmt.Errorf("coverage: unknown format %q (known: go-cover, cobertura)", f)
}

type block struct {
	file string
	pos  string
}

// ParseGoProfile reads a Go coverage profile: a "mode: set|count|atomic"
// line, then one line per block, "file:l.c,l.c statements count". A block
// that appears several times (profiles merged from several packages)
// counts once, covered when any of its counts is non-zero.
func ParseGoProfile(r io.Reader) (*Report, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return nil, fmt.Errorf("coverage: read: %w", err)
	}
	if len(data) > maxInput {
		return nil, fmt.Errorf("%w: profile larger than %d bytes", ErrFormat, maxInput)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	type stat struct {
		stmts   int64
		covered bool
	}
	blocks := map[block]*stat{}
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if lineNo == 1 {
			mode, ok := strings.CutPrefix(line, "mode: ")
			if !ok || (mode != "set" && mode != "count" && mode != "atomic") {
				return nil, fmt.Errorf("%w: line 1: want \"mode: set|count|atomic\", got %q", ErrFormat, line)
			}
			continue
		}
		if line == "" {
			continue
		}
		// Split from the right: file names may contain colons.
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("%w: line %d: %q", ErrFormat, lineNo, line)
		}
		countStr := line[sp+1:]
		rest := line[:sp]
		sp = strings.LastIndexByte(rest, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("%w: line %d: %q", ErrFormat, lineNo, line)
		}
		stmtStr := rest[sp+1:]
		loc := rest[:sp]
		colon := strings.LastIndexByte(loc, ':')
		if colon <= 0 {
			return nil, fmt.Errorf("%w: line %d: no file in %q", ErrFormat, lineNo, line)
		}
		file, pos := loc[:colon], loc[colon+1:]
		if !validPos(pos) {
			return nil, fmt.Errorf("%w: line %d: bad position %q", ErrFormat, lineNo, pos)
		}
		stmts, err1 := strconv.ParseInt(stmtStr, 10, 32)
		count, err2 := strconv.ParseInt(countStr, 10, 64)
		if err1 != nil || err2 != nil || stmts < 0 || count < 0 {
			return nil, fmt.Errorf("%w: line %d: bad counts in %q", ErrFormat, lineNo, line)
		}
		k := block{file, pos}
		s := blocks[k]
		if s == nil {
			s = &stat{stmts: stmts}
			blocks[k] = s
		}
		s.covered = s.covered || count > 0
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if lineNo == 0 {
		return nil, fmt.Errorf("%w: empty profile", ErrFormat)
	}
	rep := &Report{Files: map[string]FileCoverage{}}
	for k, s := range blocks {
		fc := rep.Files[k.file]
		fc.Total += s.stmts
		if s.covered {
			fc.Covered += s.stmts
		}
		rep.Files[k.file] = fc
	}
	return rep, nil
}

// validPos checks "l.c,l.c".
func validPos(p string) bool {
	a, b, ok := strings.Cut(p, ",")
	return ok && validLC(a) && validLC(b)
}

func validLC(s string) bool {
	l, c, ok := strings.Cut(s, ".")
	if !ok {
		return false
	}
	_, err1 := strconv.ParseUint(l, 10, 32)
	_, err2 := strconv.ParseUint(c, 10, 32)
	return err1 == nil && err2 == nil
}
