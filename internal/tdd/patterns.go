package tdd

import (
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

// Class is what a written file is to the machine.
type Class string

// The classes, in the order Classify tries them.
const (
	ClassOutside         Class = "outside"         // not in the workspace: the policy engine's business
	ClassInstrumentation Class = "instrumentation" // declared in debug mode; reverted at the end
	ClassTest            Class = "test"
	ClassExempt          Class = "exempt"
	ClassSource          Class = "source"
)

// File is one written file, classified.
type File struct {
	// Path is workspace-relative with slashes (absolute when outside).
	Path  string `json:"path"`
	Class Class  `json:"class"`
}

// Language groups a language's source extensions and test-file patterns;
// the patterns are named in refusals ("test files here match *_test.go").
type Language struct {
	Name       string
	Extensions []string
	Tests      []string
}

// DefaultLanguages returns the built-in languages. Patterns are globs on
// the workspace-relative slash path: a pattern without "/" matches the
// base name, "**" matches any number of directories, {a,b} alternates.
//
// Rust's inline #[cfg(test)] modules live in source files and so count as
// source: keep Rust tests in tests/ or in a tests.rs module file.
func DefaultLanguages() []Language {
	js := "{js,jsx,mjs,cjs,ts,tsx,mts,cts}"
	return []Language{
		{Name: "Go", Extensions: []string{".go"}, Tests: []string{"*_test.go"}},
		{Name: "Python", Extensions: []string{".py"}, Tests: []string{"test_*.py", "*_test.py", "conftest.py", "**/tests/**/*.py"}},
		{Name: "JavaScript/TypeScript", Extensions: []string{".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".mts", ".cts"},
			Tests: []string{"*.{test,spec}." + js, "**/__tests__/**/*." + js}},
		{Name: "Rust", Extensions: []string{".rs"}, Tests: []string{"tests/**/*.rs", "**/tests/**/*.rs", "tests.rs", "*_test.rs"}},
		{Name: "Java/Kotlin", Extensions: []string{".java", ".kt", ".kts"},
			Tests: []string{"**/src/test/**", "*Test.java", "*Tests.java", "*IT.java", "*Test.kt", "*Tests.kt"}},
	}
}

// DefaultTestPatterns are test files in every language (fixtures).
func DefaultTestPatterns() []string { return []string{"**/testdata/**"} }

// DefaultExemptPatterns are files any state may write: documentation,
// configuration, lock files and generated code.
func DefaultExemptPatterns() []string {
	return []string{
		"*.{md,markdown,rst,txt,adoc}", "**/docs/**", "LICENSE*", "COPYING*", "NOTICE*",
		"*.{yaml,yml,toml,ini,cfg,conf,json}", ".gitignore", ".gitattributes", ".editorconfig",
		"go.mod", "go.sum", "*.lock", "package-lock.json",
		"*.pb.go", "*_gen.go", "*.gen.*", "zz_generated*", "*_generated.*", "*.min.js",
		// The repository itself, as git.commit names it: a commit
		// records changes, it writes no test or source. Files inside
		// .git (config, hooks) written one by one stay unexempt.
		".git",
	}
}

// Rules is the machine's configuration: what is a test, what is exempt,
// and explore mode's tech-debt budget.
type Rules struct {
	Languages []Language
	// Tests are test patterns of no particular language.
	Tests  []string
	Exempt []string
	// BudgetBP is how far (in basis points, 100 = 1 %) the coverage of
	// a file changed without a test may fall below its baseline.
	BudgetBP int64
}

// Options configures New.
type Options struct {
	// TestPatterns and ExemptPatterns are added to the defaults.
	TestPatterns   []string
	ExemptPatterns []string
	// NoDefaults drops the built-in patterns (tests of the matcher;
	// odd layouts).
	NoDefaults bool
	// BudgetPercent is the explore-mode coverage budget, 0..100.
	BudgetPercent int
}

// Machine classifies operations and answers Allowed. It holds only its
// rules and is safe for concurrent use.
type Machine struct {
	rules  Rules
	tests  []glob
	exempt []glob
	langs  []langGlobs
}

type langGlobs struct {
	Language
	globs []glob
}

// New builds a Machine, checking every pattern.
func New(opts Options) (*Machine, error) {
	if opts.BudgetPercent < 0 || opts.BudgetPercent > 100 {
		return nil, fmt.Errorf("tdd: debt budget %d%% out of range 0..100", opts.BudgetPercent)
	}
	r := Rules{BudgetBP: int64(opts.BudgetPercent) * 100}
	if !opts.NoDefaults {
		r.Languages = DefaultLanguages()
		r.Tests = DefaultTestPatterns()
		r.Exempt = DefaultExemptPatterns()
	}
	r.Tests = append(r.Tests, opts.TestPatterns...)
	r.Exempt = append(r.Exempt, opts.ExemptPatterns...)
	m := &Machine{rules: r}
	var err error
	if m.tests, err = compileAll(r.Tests); err != nil {
		return nil, err
	}
	if m.exempt, err = compileAll(r.Exempt); err != nil {
		return nil, err
	}
	for _, l := range r.Languages {
		g, err := compileAll(l.Tests)
		if err != nil {
			return nil, err
		}
		m.langs = append(m.langs, langGlobs{l, g})
	}
	return m, nil
}

// Rules returns the machine's rules.
func (m *Machine) Rules() Rules { return m.rules }

// Classify says what a written path is, given the session's status (for
// declared instrumentation) and workspace root.
func (m *Machine) Classify(s *Status, workspace string, p operation.Path) File {
	if !p.InWorkspace || workspace == "" {
		return File{Path: p.Abs, Class: ClassOutside}
	}
	rel, err := filepath.Rel(workspace, p.Abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		// InWorkspace disagrees with the paths: fail closed, the
		// strictest class.
		return File{Path: filepath.ToSlash(p.Abs), Class: ClassSource}
	}
	rel = filepath.ToSlash(rel)
	return File{Path: rel, Class: m.classifyRel(s, rel)}
}

func (m *Machine) classifyRel(s *Status, rel string) Class {
	if s != nil && contains(s.Instrumented, rel) {
		return ClassInstrumentation
	}
	base := path.Base(rel)
	var segs []string
	if matchAny(m.tests, rel, base, &segs) {
		return ClassTest
	}
	for _, l := range m.langs {
		if matchAny(l.globs, rel, base, &segs) {
			return ClassTest
		}
	}
	if matchAny(m.exempt, rel, base, &segs) {
		return ClassExempt
	}
	return ClassSource
}

// TestHint names the test-file patterns that apply to a source file,
// for refusals: those of its language, or every language's when unknown.
func (m *Machine) TestHint(rel string) string {
	ext := path.Ext(rel)
	var pats []string
	for _, l := range m.langs {
		for _, e := range l.Extensions {
			if e == ext {
				pats = append(pats, l.Tests...)
			}
		}
	}
	if len(pats) == 0 {
		for _, l := range m.langs {
			pats = append(pats, l.Tests...)
		}
		pats = append(pats, m.rules.Tests...)
	}
	return strings.Join(pats, ", ")
}

// glob is one compiled pattern (brace alternatives expanded). Base-name
// alternatives that are a literal, "*suffix" or "prefix*" skip path.Match:
// they are most patterns, and the gate is on the fast path.
type glob struct {
	alts []string
	fast []fastAlt
	segs [][]seg // alts split at "/", for those that contain one
}

// seg is one segment of a pattern with a "/".
type seg struct {
	s     string
	lit   bool // no glob metacharacter: compare with ==
	dstar bool // "**"
}

type fastKind uint8

const (
	general fastKind = iota
	literal
	suffix
	prefix
)

type fastAlt struct {
	kind fastKind
	s    string
}

func compileFast(a string) fastAlt {
	if strings.Contains(a, "/") {
		return fastAlt{}
	}
	const meta = `*?[\`
	switch {
	case !strings.ContainsAny(a, meta):
		return fastAlt{literal, a}
	case strings.HasPrefix(a, "*") && !strings.ContainsAny(a[1:], meta):
		return fastAlt{suffix, a[1:]}
	case strings.HasSuffix(a, "*") && !strings.ContainsAny(a[:len(a)-1], meta):
		return fastAlt{prefix, a[:len(a)-1]}
	}
	return fastAlt{}
}

func compileAll(pats []string) ([]glob, error) {
	out := make([]glob, 0, len(pats))
	for _, p := range pats {
		g, err := compileGlob(p)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

func compileGlob(p string) (glob, error) {
	if p == "" || strings.HasPrefix(p, "/") {
		return glob{}, fmt.Errorf("tdd: pattern %q: must be a non-empty workspace-relative glob", p)
	}
	alts, err := expandBraces(p, 0)
	if err != nil {
		return glob{}, fmt.Errorf("tdd: pattern %q: %w", p, err)
	}
	for _, a := range alts {
		for _, seg := range strings.Split(a, "/") {
			if seg == "**" {
				continue
			}
			if _, err := path.Match(seg, ""); err != nil {
				return glob{}, fmt.Errorf("tdd: pattern %q: %w", p, err)
			}
		}
	}
	g := glob{alts: alts}
	for _, a := range alts {
		g.fast = append(g.fast, compileFast(a))
		var segs []seg
		if strings.Contains(a, "/") {
			for _, x := range strings.Split(a, "/") {
				segs = append(segs, seg{s: x, lit: !strings.ContainsAny(x, `*?[\`), dstar: x == "**"})
			}
		}
		g.segs = append(g.segs, segs)
	}
	return g, nil
}

// expandBraces expands {a,b} alternatives (nested allowed, bounded).
func expandBraces(p string, depth int) ([]string, error) {
	if depth > 8 {
		return nil, fmt.Errorf("braces nested too deep")
	}
	open := strings.IndexByte(p, '{')
	if open < 0 {
		if strings.IndexByte(p, '}') >= 0 {
			return nil, fmt.Errorf("unbalanced }")
		}
		return []string{p}, nil
	}
	level, end := 0, -1
	var parts []string
	start := open + 1
	for i := open; i < len(p) && end < 0; i++ {
		switch p[i] {
		case '{':
			level++
		case '}':
			level--
			if level == 0 {
				parts = append(parts, p[start:i])
				end = i
			}
		case ',':
			if level == 1 {
				parts = append(parts, p[start:i])
				start = i + 1
			}
		}
	}
	if end < 0 {
		return nil, fmt.Errorf("unbalanced {")
	}
	var out []string
	for _, part := range parts {
		rest, err := expandBraces(p[:open]+part+p[end+1:], depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, rest...)
		if len(out) > 256 {
			return nil, fmt.Errorf("too many brace alternatives")
		}
	}
	sort.Strings(out)
	return out, nil
}

// matchSplit matches with the base name and (lazily, through relSegs) the
// segments of rel computed once by the caller.
func (g *glob) matchSplit(rel, base string, relSegs *[]string) bool {
	for i, a := range g.alts {
		switch f := g.fast[i]; f.kind {
		case literal:
			if base == f.s {
				return true
			}
			continue
		case suffix:
			if strings.HasSuffix(base, f.s) {
				return true
			}
			continue
		case prefix:
			if strings.HasPrefix(base, f.s) {
				return true
			}
			continue
		}
		if g.segs[i] == nil {
			if ok, _ := path.Match(a, base); ok {
				return true
			}
			continue
		}
		var segs []string
		if relSegs != nil {
			if *relSegs == nil {
				*relSegs = strings.Split(rel, "/")
			}
			segs = *relSegs
		} else {
			segs = strings.Split(rel, "/")
		}
		if matchSegs(g.segs[i], segs) {
			return true
		}
	}
	return false
}

// matchSegs matches path segments, "**" standing for zero or more.
func matchSegs(pat []seg, segs []string) bool {
	for len(pat) > 0 {
		if pat[0].dstar {
			for len(pat) > 0 && pat[0].dstar {
				pat = pat[1:]
			}
			if len(pat) == 0 {
				return true
			}
			for i := 0; i <= len(segs); i++ {
				if matchSegs(pat, segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if pat[0].lit {
			if pat[0].s != segs[0] {
				return false
			}
		} else if ok, _ := path.Match(pat[0].s, segs[0]); !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

func matchAny(gs []glob, rel, base string, segs *[]string) bool {
	for i := range gs {
		if gs[i].matchSplit(rel, base, segs) {
			return true
		}
	}
	return false
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
