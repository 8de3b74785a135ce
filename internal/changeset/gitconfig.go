package changeset

import (
	"io"
	"path"
	"strings"
)

// A repository's config can make git read or run files that lie anywhere
// in the working tree: core.hooksPath names a directory of hooks (husky's
// ".husky", say), include.path and includeIf.*.path name more config, and
// command settings (core.fsmonitor, core.pager, an alias starting with
// "!", a filter's clean and smudge...) may name a script by a relative
// path. A change to such a file runs code as surely as a change to a hook,
// so apply treats it the same way. configRefs finds them in the config of
// each repository around a change, as it is in the real tree (a change to
// the config itself is sensitive on its own).

// gitConfigRefs is what one config file points at, as paths relative to
// the workspace.
type gitConfigRefs struct {
	// dirs are directories whose contents git runs (core.hooksPath).
	dirs []string
	// files are files git reads as config or runs as programs.
	files []string
}

// commandKeys are the final key names (lower case) whose value is a
// command line git runs; its first word may name a file in the tree.
var commandKeys = map[string]bool{
	"fsmonitor": true, "sshcommand": true, "editor": true, "pager": true,
	"askpass": true, "external": true, "program": true, "helper": true,
	"textconv": true, "command": true, "driver": true, "clean": true,
	"smudge": true, "process": true, "gitproxy": true, "packobjectshook": true,
}

// maxConfigBytes bounds how much of a config file is read.
const maxConfigBytes = 1 << 20

// parseGitConfig returns the settings of a git config text that name
// files: each as (section, key, value), section lower-cased and without
// its subsection, key lower-cased. It is tolerant: a line it cannot read
// is skipped, never an error (what git reads is what matters, and git
// refuses a config it cannot parse).
func parseGitConfig(text string) [][3]string {
	var out [][3]string
	section := ""
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		// A value continued on the next line ends with a backslash.
		for strings.HasSuffix(line, "\\") && !strings.HasSuffix(line, "\\\\") && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, "\\") + strings.TrimSpace(lines[i])
		}
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				continue
			}
			name := strings.TrimSpace(line[1:end])
			if sp := strings.IndexAny(name, " \t\""); sp >= 0 {
				name = name[:sp]
			}
			if dot := strings.IndexByte(name, '.'); dot >= 0 {
				name = name[:dot]
			}
			section = strings.ToLower(name)
			// "[section] key = value" on one line.
			line = strings.TrimSpace(line[end+1:])
			if line == "" || line[0] == '#' || line[0] == ';' {
				continue
			}
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		key = strings.ToLower(strings.TrimSpace(key))
		out = append(out, [3]string{section, key, configValue(value)})
	}
	return out
}

// configValue unquotes a config value: quotes removed, \" \\ \n \t
// unescaped, an unquoted comment dropped.
func configValue(v string) string {
	var b strings.Builder
	quoted := false
	v = strings.TrimSpace(v)
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '"':
			quoted = !quoted
		case c == '\\' && i+1 < len(v):
			i++
			switch v[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte(v[i])
			}
		case (c == '#' || c == ';') && !quoted:
			return strings.TrimSpace(b.String())
		default:
			b.WriteByte(c)
		}
	}
	return strings.TrimSpace(b.String())
}

// configRefs reads a config text found at cfgDir (the directory holding
// the config file, workspace-relative) of a repository whose working tree
// is top, and returns what it points at inside the workspace ws.
func configRefs(text, cfgDir, top, ws string) gitConfigRefs {
	var r gitConfigRefs
	add := func(list *[]string, dir, p string) {
		if t, ok := relTarget(dir, p, ws); ok {
			*list = append(*list, t)
		}
	}
	for _, kv := range parseGitConfig(text) {
		section, key, value := kv[0], kv[1], kv[2]
		switch {
		case value == "":
		case section == "core" && key == "hookspath":
			add(&r.dirs, top, value)
		case (section == "include" || section == "includeif") && key == "path":
			add(&r.files, cfgDir, value)
		case section == "alias" && strings.HasPrefix(value, "!"), commandKeys[key]:
			if prog := firstWord(strings.TrimPrefix(value, "!")); strings.Contains(prog, "/") {
				add(&r.files, top, prog)
			}
		}
	}
	return r
}

// firstWord returns a command line's first word, unquoted simply.
func firstWord(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if q := s[0]; q == '"' || q == '\'' {
		if end := strings.IndexByte(s[1:], q); end >= 0 {
			return s[1 : 1+end]
		}
		return s[1:]
	}
	if i := strings.IndexAny(s, " \t;|&<>()"); i >= 0 {
		return s[:i]
	}
	return s
}

// configRefsAt returns what the real config of the repository whose
// working tree is top (workspace-relative) points at: top/.git/config,
// and for the workspace root also .gitconfig (git's user configuration
// when the workspace is the home directory). Cached per top.
func (j *judge) configRefsAt(top string) gitConfigRefs {
	if r, ok := j.configs[top]; ok {
		return r
	}
	var r gitConfigRefs
	files := []string{path.Join(top, ".git", "config")}
	if top == "." {
		files = append(files, ".gitconfig")
	}
	for _, f := range files {
		b, err := readReal(j.cs.workspace, f, maxConfigBytes)
		if err != nil {
			continue
		}
		x := configRefs(string(b), path.Dir(f), top, j.cs.workspace)
		r.dirs = append(r.dirs, x.dirs...)
		r.files = append(r.files, x.files...)
	}
	j.configs[top] = r
	return r
}

// readReal reads up to n bytes of the real file at rel (no symlink
// followed).
func readReal(root, rel string, n int64) ([]byte, error) {
	f, err := openFile(root, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

// configReason returns why rel is a file the config of a repository
// around it makes git run or read, or "".
func (j *judge) configReason(rel string) string {
	for d := path.Dir(rel); ; d = path.Dir(d) {
		r := j.configRefsAt(d)
		for _, h := range r.dirs {
			if rel == h || strings.HasPrefix(rel, h+"/") || h == "." {
				return "in the hooks directory core.hooksPath names (" + quote("", h) + "): git runs it"
			}
		}
		for _, f := range r.files {
			if rel == f {
				return "named by the repository's git config (an include, or a program git runs)"
			}
		}
		if d == "." {
			return ""
		}
	}
}
