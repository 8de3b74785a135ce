package policy

import (
	"github.com/fluffy-agent/fluffy/internal/spell"

	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

// Error is one problem in a policy file, located at the YAML node that
// causes it. Compile returns every problem found, joined with errors.Join.
type Error struct {
	File   string
	Line   int
	Column int
	Rule   string // the rule id, when known
	Msg    string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
	}
	b.WriteString(": ")
	if e.Rule != "" {
		b.WriteString("rule " + e.Rule + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrInvalid is wrapped by the error Compile returns for invalid policy.
var ErrInvalid = errors.New("invalid policy")

// Source is one policy file's content. Name is its path, used in messages
// and to resolve the extensions it names; Layer is LayerUser or
// LayerProject.
type Source struct {
	Name  string
	Layer Layer
	Data  []byte
	// Extensions maps an extension file name, as the policy file writes
	// it, to its content. Files.Read fills it; tests may too.
	Extensions map[string][]byte
}

// maxFileSize bounds a policy file; larger ones are refused, not truncated.
const maxFileSize = 4 << 20

var idRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// file is a parsed policy file before compilation.
type file struct {
	rules             []*rule
	extensions        []extRef
	trustProjectAllow bool
	exec              *execTable
}

type extRef struct {
	name      string
	line, col int
}

type loader struct {
	src  Source
	errs []error
	env  *celEnv
	home string
	rule string // id of the rule being read, for messages
}

func (l *loader) errf(n *yaml.Node, format string, args ...any) {
	e := &Error{File: l.src.Name, Rule: l.rule, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	l.errs = append(l.errs, e)
}

// parseFile reads one policy file. It returns nil and records errors when
// anything is wrong.
func (l *loader) parseFile() *file {
	if len(l.src.Data) > maxFileSize {
		l.errf(nil, "file is larger than %d bytes", maxFileSize)
		return nil
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(l.src.Data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &file{} // an empty file is an empty policy
		}
		l.errs = append(l.errs, &Error{File: l.src.Name, Line: yamlErrLine(err), Msg: strings.TrimPrefix(err.Error(), "yaml: ")})
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		l.errf(&extra, "a policy file holds one YAML document")
		return nil
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return &file{}
	}
	f := &file{}
	l.mapping(root, map[string]func(k, v *yaml.Node){
		"version": func(_, v *yaml.Node) {
			if v.Kind != yaml.ScalarNode || v.Value != "1" {
				l.errf(v, "version: only version 1 exists")
			}
		},
		"rules": func(_, v *yaml.Node) {
			if v.Kind != yaml.SequenceNode {
				l.errf(v, "rules: expected a list of rules")
				return
			}
			for _, rn := range v.Content {
				if r := l.parseRule(rn); r != nil {
					f.rules = append(f.rules, r)
				}
			}
		},
		"extensions": func(_, v *yaml.Node) {
			for _, s := range l.strings(v, "extensions") {
				f.extensions = append(f.extensions, extRef{name: s.Value, line: s.Line, col: s.Column})
			}
		},
		"exec_capable": func(_, v *yaml.Node) { f.exec = l.parseExecTable(v) },
		"trust_project_allow": func(_, v *yaml.Node) {
			if l.src.Layer != LayerUser {
				l.errf(v, "trust_project_allow: only the user's policy file may set it")
				return
			}
			f.trustProjectAllow = l.boolean(v, "trust_project_allow")
		},
	})
	seen := map[string]*rule{}
	for _, r := range f.rules {
		if prev, ok := seen[r.id]; ok {
			l.errs = append(l.errs, &Error{File: l.src.Name, Line: r.line, Column: r.col, Rule: r.id, Msg: "duplicate rule id (first at line " + fmt.Sprint(prev.line) + ")"})
		}
		seen[r.id] = r
	}
	if len(l.errs) > 0 {
		return nil
	}
	return f
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

func yamlErrLine(err error) int {
	m := yamlLineRE.FindStringSubmatch(err.Error())
	if m == nil {
		return 0
	}
	var n int
	fmt.Sscan(m[1], &n)
	return n
}

// mapping walks a mapping node, calling the handler of each known key and
// reporting unknown keys with the closest known one.
func (l *loader) mapping(n *yaml.Node, keys map[string]func(k, v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		l.errf(n, "expected a mapping")
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		h, ok := keys[k.Value]
		if !ok {
			known := make([]string, 0, len(keys))
			for name := range keys {
				known = append(known, name)
			}
			sort.Strings(known)
			if s := closest(k.Value, known); s != "" {
				l.errf(k, "unknown key %q (did you mean %q?)", k.Value, s)
			} else {
				l.errf(k, "unknown key %q; known keys: %s", k.Value, strings.Join(known, ", "))
			}
			continue
		}
		if seen[k.Value] {
			l.errf(k, "key %q appears twice", k.Value)
			continue
		}
		seen[k.Value] = true
		h(k, v)
	}
}

// closest returns the known key within edit distance 2 of s, if any.
func closest(s string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := spell.Distance(s, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

func (l *loader) scalar(n *yaml.Node, key string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		l.errf(n, "%s: expected a string", key)
		return "", false
	}
	if strings.IndexByte(n.Value, 0) >= 0 {
		l.errf(n, "%s: contains a NUL byte", key)
		return "", false
	}
	return n.Value, true
}

func (l *loader) boolean(n *yaml.Node, key string) bool {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		l.errf(n, "%s: expected true or false", key)
		return false
	}
	return n.Value == "true"
}

// strings reads a string or a list of strings.
func (l *loader) strings(n *yaml.Node, key string) []*yaml.Node {
	switch n.Kind {
	case yaml.ScalarNode:
		if _, ok := l.scalar(n, key); ok {
			return []*yaml.Node{n}
		}
		return nil
	case yaml.SequenceNode:
		var out []*yaml.Node
		for _, c := range n.Content {
			if _, ok := l.scalar(c, key); ok {
				out = append(out, c)
			}
		}
		if len(out) == 0 && len(n.Content) == 0 {
			l.errf(n, "%s: empty list", key)
		}
		return out
	}
	l.errf(n, "%s: expected a string or a list of strings", key)
	return nil
}

func (l *loader) parseRule(n *yaml.Node) *rule {
	l.rule = ""
	defer func() { l.rule = "" }()
	r := &rule{layer: l.src.Layer, source: l.src.Name, line: n.Line, col: n.Column}
	before := len(l.errs)
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "id" {
				l.rule = n.Content[i+1].Value
			}
		}
	}
	var whenNode, effectNode *yaml.Node
	l.mapping(n, map[string]func(k, v *yaml.Node){
		"id": func(_, v *yaml.Node) {
			if s, ok := l.scalar(v, "id"); ok {
				if !idRE.MatchString(s) || strings.HasPrefix(s, "builtin.") || strings.HasPrefix(s, "token:") {
					l.errf(v, "id %q: use lower-case letters, digits, '.', '_' and '-' (at most 64), not starting with builtin.", s)
				}
				r.id = s
			}
		},
		"description": func(_, v *yaml.Node) { r.description, _ = l.scalar(v, "description") },
		"message":     func(_, v *yaml.Node) { r.message, _ = l.scalar(v, "message") },
		"effect": func(_, v *yaml.Node) {
			effectNode = v
			if s, ok := l.scalar(v, "effect"); ok {
				e, err := ParseEffect(s)
				if err != nil {
					l.errf(v, "%v", err)
				}
				r.effect = e
			}
		},
		"match": func(_, v *yaml.Node) { r.match = l.parseMatcher(v, "match") },
		"except": func(_, v *yaml.Node) {
			// One matcher, or a list of them: any that matches excepts.
			if v.Kind == yaml.SequenceNode {
				if len(v.Content) == 0 {
					l.errf(v, "except: empty list")
				}
				for _, c := range v.Content {
					r.except = append(r.except, l.parseMatcher(c, "except"))
				}
				return
			}
			r.except = []*matcher{l.parseMatcher(v, "except")}
		},
		"when": func(_, v *yaml.Node) {
			whenNode = v
			r.whenSrc, _ = l.scalar(v, "when")
		},
		"classify": func(_, v *yaml.Node) {
			if s, ok := l.scalar(v, "classify"); ok {
				if strings.TrimSpace(s) == "" {
					l.errf(v, "classify: empty instruction")
				}
				r.classify = s
			}
		},
	})
	if n.Kind != yaml.MappingNode {
		return nil
	}
	if r.id == "" {
		l.errf(n, "rule has no id")
	}
	if r.effect == 0 && effectNode == nil {
		l.errf(n, "rule has no effect (allow, approve or block)")
	}
	if r.match == nil && len(l.errs) == before {
		l.errf(n, "rule has no match (use match: {} deliberately to match everything)")
	}
	if r.whenSrc != "" && len(l.errs) == before {
		prg, err := l.env.compile(r.whenSrc)
		if err != nil {
			l.errf(whenNode, "when: %v", err)
		}
		r.when = prg
	}
	if len(l.errs) > before {
		return nil
	}
	r.index()
	return r
}

func (l *loader) parseMatcher(n *yaml.Node, key string) *matcher {
	m := &matcher{}
	if n.Kind == yaml.MappingNode && len(n.Content) == 0 {
		return m
	}
	l.mapping(n, map[string]func(k, v *yaml.Node){
		"tool": func(_, v *yaml.Node) {
			for _, s := range l.strings(v, key+".tool") {
				m.tools = append(m.tools, compileGlob(s.Value))
			}
		},
		"action": func(_, v *yaml.Node) {
			for _, s := range l.strings(v, key+".action") {
				a := operation.Action(s.Value)
				if !a.Valid() {
					l.errf(s, "%s.action: unknown action %q; use read, write, exec, net, secret or message", key, s.Value)
					continue
				}
				m.actions = append(m.actions, a)
			}
		},
		"path": func(_, v *yaml.Node) {
			for _, s := range l.strings(v, key+".path") {
				g, err := compilePathGlob(s.Value, l.home)
				if err != nil {
					l.errf(s, "%s.path: %v", key, err)
					continue
				}
				m.paths = append(m.paths, g)
			}
		},
		"argv": func(_, v *yaml.Node) {
			if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
				l.errf(v, "%s.argv: expected a list of arguments, or a list of such lists", key)
				return
			}
			lists := [][]*yaml.Node{v.Content}
			if v.Content[0].Kind == yaml.SequenceNode {
				lists = nil
				for _, c := range v.Content {
					if c.Kind != yaml.SequenceNode {
						l.errf(c, "%s.argv: mix of lists and strings", key)
						return
					}
					lists = append(lists, c.Content)
				}
			}
			for _, list := range lists {
				var words []string
				for _, w := range list {
					if s, ok := l.scalar(w, key+".argv"); ok {
						words = append(words, s)
					}
				}
				a, err := compileArgv(words)
				if err != nil {
					l.errf(v, "%s.argv: %v", key, err)
					continue
				}
				m.argv = append(m.argv, a)
			}
		},
		"host": func(_, v *yaml.Node) {
			for _, s := range l.strings(v, key+".host") {
				h, err := compileHost(s.Value)
				if err != nil {
					l.errf(s, "%s.host: %v", key, err)
					continue
				}
				m.hosts = append(m.hosts, h)
			}
		},
		"tag": func(_, v *yaml.Node) {
			for _, s := range l.strings(v, key+".tag") {
				m.tags = append(m.tags, compileGlob(s.Value))
			}
		},
		"env": func(_, v *yaml.Node) {
			for _, s := range l.strings(v, key+".env") {
				m.env = append(m.env, compileGlob(s.Value))
			}
		},
		"workspace": func(_, v *yaml.Node) { b := l.boolean(v, key+".workspace"); m.workspace = &b },
		"exec_capable": func(_, v *yaml.Node) {
			b := l.boolean(v, key+".exec_capable")
			m.execCapable = &b
		},
		"written_by_agent": func(_, v *yaml.Node) {
			b := l.boolean(v, key+".written_by_agent")
			m.writtenByAgent = &b
		},
		"wrapper": func(_, v *yaml.Node) { b := l.boolean(v, key+".wrapper"); m.wrapper = &b },
		"dynamic": func(_, v *yaml.Node) { b := l.boolean(v, key+".dynamic"); m.dynamic = &b },
	})
	return m
}
