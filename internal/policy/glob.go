package policy

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

// maxSpread bounds the '**' of a path pattern and the '...' of an argv
// pattern (matching is linear in them anyway; more are never needed).
const maxSpread = 4

// glob is a compiled pattern where '*' matches any run of characters and
// '?' exactly one. A pattern without wildcards is compared exactly.
type glob struct {
	pat     string
	literal bool
}

func compileGlob(p string) glob {
	return glob{pat: p, literal: !strings.ContainsAny(p, "*?")}
}

func (g glob) match(s string) bool {
	if g.literal {
		return g.pat == s
	}
	return wildMatch(g.pat, s)
}

// wildMatch is the classic iterative wildcard match: linear in practice,
// O(len(p)*len(s)) at worst, never exponential.
func wildMatch(p, s string) bool {
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == s[si]):
			pi++
			si++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

func anyGlob(gs []glob, s string) bool {
	for _, g := range gs {
		if g.match(s) {
			return true
		}
	}
	return false
}

// pathGlob matches canonical absolute paths component by component: '*' and
// '?' stay within a component, '**' spans any number of components (zero
// included). A relative pattern is relative to the workspace root and never
// matches outside it.
type pathGlob struct {
	raw      string
	relative bool
	parts    []glob
}

func compilePathGlob(p, home string) (pathGlob, error) {
	if p == "" {
		return pathGlob{}, fmt.Errorf("empty path pattern")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return pathGlob{}, fmt.Errorf("path pattern contains a NUL byte")
	}
	g := pathGlob{raw: p}
	switch {
	case p == "~" || strings.HasPrefix(p, "~/"):
		if home == "" {
			return pathGlob{}, fmt.Errorf("path pattern %q uses ~ but the home directory is unknown", p)
		}
		p = home + p[1:]
	case !strings.HasPrefix(p, "/"):
		g.relative = true
	}
	for _, c := range strings.Split(strings.Trim(p, "/"), "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			return pathGlob{}, fmt.Errorf("path pattern %q contains '..'", g.raw)
		}
		if strings.Contains(c, "**") && c != "**" {
			return pathGlob{}, fmt.Errorf("path pattern %q: '**' must be a whole path component", g.raw)
		}
		g.parts = append(g.parts, compileGlob(c))
	}
	if n := strings.Count(p, "**"); n > maxSpread {
		return pathGlob{}, fmt.Errorf("path pattern %q has %d '**'; at most %d", g.raw, n, maxSpread)
	}
	return g, nil
}

// match reports whether abs (canonical, absolute) matches, given the
// workspace root ws ("" for none).
func (g pathGlob) match(abs, ws string) bool {
	var rest string
	if g.relative {
		if ws == "" || !within(abs, ws) {
			return false
		}
		rest = strings.TrimPrefix(abs[len(ws):], "/")
	} else {
		rest = strings.TrimPrefix(abs, "/")
	}
	var buf [48]string
	comps := buf[:0]
	for rest != "" {
		c, r, _ := strings.Cut(rest, "/")
		comps = append(comps, c)
		rest = r
	}
	return matchComps(g.parts, comps)
}

func matchComps(pats []glob, comps []string) bool { return seqMatch(pats, comps, "**") }

// seqMatch matches items against pats, where a pattern equal to spread
// matches any number of items (zero included) and any other pattern exactly
// one. It is wildMatch's algorithm over sequences: greedy, backtracking
// only to the last spread, so O(len(pats)*len(items)) at worst.
func seqMatch(pats []glob, items []string, spread string) bool {
	pi, ii := 0, 0
	star, mark := -1, 0
	for ii < len(items) {
		switch {
		case pi < len(pats) && pats[pi].pat == spread:
			star, mark = pi, ii
			pi++
		case pi < len(pats) && pats[pi].match(items[ii]):
			pi++
			ii++
		case star >= 0:
			pi = star + 1
			mark++
			ii = mark
		default:
			return false
		}
	}
	for pi < len(pats) && pats[pi].pat == spread {
		pi++
	}
	return pi == len(pats)
}

// within reports whether p is dir or below it; both canonical absolute.
func within(p, dir string) bool {
	if dir == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == dir || strings.HasPrefix(p, dir) && len(p) > len(dir) && p[len(dir)] == '/'
}

// argvPattern matches one argv: one glob per argument, where "..." matches
// zero or more arguments. The first element names the program: a bare name
// (no '/') matches the program written the same way; it also matches an
// absolute program path with that base name in a system directory
// (/usr/bin/rm), and — for approve and block rules only — any path with that
// base name (./rm, /tmp/x/rm). An allow rule never matches a program run
// from an arbitrary path: ./go is not go.
type argvPattern struct {
	raw   []string
	elems []glob
}

// systemDirs hold programs installed by the system; a bare program name in
// an allow rule matches them when written as absolute paths.
var systemDirs = []string{"/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin", "/usr/local/go/bin"}

func compileArgv(p []string) (argvPattern, error) {
	if len(p) == 0 {
		return argvPattern{}, fmt.Errorf("empty argv pattern")
	}
	if p[0] == "..." {
		return argvPattern{}, fmt.Errorf("argv pattern must name the program first, not '...'")
	}
	a := argvPattern{raw: p}
	n := 0
	for _, e := range p {
		if e == "..." {
			n++
		}
		if strings.IndexByte(e, 0) >= 0 {
			return argvPattern{}, fmt.Errorf("argv pattern contains a NUL byte")
		}
		a.elems = append(a.elems, compileGlob(e))
	}
	if n > maxSpread {
		return argvPattern{}, fmt.Errorf("argv pattern has %d '...'; at most %d", n, maxSpread)
	}
	return a, nil
}

func (a argvPattern) match(argv []string, strict bool) bool {
	if len(argv) == 0 || !matchProgram(a.elems[0], argv[0], strict) {
		return false
	}
	return matchArgs(a.elems[1:], argv[1:])
}

func matchProgram(g glob, prog string, strict bool) bool {
	if g.match(prog) {
		return true
	}
	if strings.Contains(g.pat, "/") || !strings.Contains(prog, "/") {
		return false
	}
	dir, base := path.Split(prog)
	if !g.match(base) {
		return false
	}
	if !strict {
		return true
	}
	dir = path.Clean(dir)
	for _, d := range systemDirs {
		if dir == d {
			return true
		}
	}
	return false
}

func matchArgs(pats []glob, args []string) bool { return seqMatch(pats, args, "...") }

// hostPattern matches "name:port": a glob on the lower-cased name (a
// trailing dot ignored) and an optional port, '*' for any.
type hostPattern struct {
	raw  string
	name glob
	port int // 0: any
}

func compileHost(p string) (hostPattern, error) {
	h := hostPattern{raw: p}
	name, port, hasPort := strings.Cut(p, ":")
	if name == "" {
		return h, fmt.Errorf("host pattern %q has no name", p)
	}
	if hasPort && port != "*" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return h, fmt.Errorf("host pattern %q: port must be 1-65535 or *", p)
		}
		h.port = n
	}
	h.name = compileGlob(strings.TrimSuffix(strings.ToLower(name), "."))
	return h, nil
}

func (h hostPattern) match(name string, port int) bool {
	if h.port != 0 && h.port != port {
		return false
	}
	return h.name.match(strings.TrimSuffix(strings.ToLower(name), "."))
}
