package skill

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"go.yaml.in/yaml/v3"

	"github.com/fluffy-agent/fluffy/internal/regfile"
	"github.com/fluffy-agent/fluffy/internal/secret"
)

// The files of a skill's folder that fluffy reads.
const (
	// SkillFile is the Agent Skills document: front matter and body.
	SkillFile = "SKILL.md"
	// ManifestFile is the manifest; AltManifestFile is read when it is
	// absent (a folder with both is invalid: one would be ignored).
	ManifestFile    = "skill.yaml"
	AltManifestFile = "carapace.yaml"
)

// Bounds on what a skill's files may hold: a SKILL.md or manifest beyond
// them is refused rather than read into every session's memory.
const (
	maxSkillFile     = 256 << 10
	maxManifestFile  = 64 << 10
	maxNameLen       = 64
	maxDescription   = 1024
	maxEntrypoints   = 32
	maxListItems     = 64
	maxCommandLength = 64
)

// ErrInvalid is matched (errors.Is) by every *ParseError: the skill is
// skipped whole.
var ErrInvalid = errors.New("skill: invalid")

// Problem is one thing wrong with a skill's files, located.
type Problem struct {
	// File is the file's path; Line its 1-based line (0: the file as a
	// whole).
	File string
	Line int
	// Field is the dotted path of the field in question ("network[1]",
	// "entrypoints[0].command"); "" when the problem is not a field's.
	Field string
	Msg   string
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteString(":" + strconv.Itoa(p.Line))
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// ParseError lists every problem found in one skill's files.
type ParseError struct {
	Problems []Problem
	// Err, when set, is the error beneath them (a folder or SKILL.md
	// that is not there wraps fs.ErrNotExist).
	Err error
}

func (e *ParseError) Error() string {
	s := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		s[i] = p.String()
	}
	return strings.Join(s, "\n")
}

// Unwrap makes errors.Is(err, ErrInvalid) hold, and errors.Is with the
// error beneath when there is one.
func (e *ParseError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}

// problems collects the problems of one file.
type problems struct {
	file string
	list []Problem
}

func (ps *problems) add(line int, field, format string, args ...any) {
	ps.list = append(ps.list, Problem{File: ps.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// Front is a SKILL.md's front matter in the Agent Skills format. Keys
// the format defines beyond name and description, and keys of other
// tools, are kept in Extra and otherwise ignored, as the format allows.
type Front struct {
	Name        string
	Description string
	Extra       map[string]any
}

// nameRE is the Agent Skills name: lower-case letters, digits and single
// hyphens, neither first nor last.
var nameRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// ParseSkillMD splits a SKILL.md (file names it in problems) into its
// front matter and body. The front matter opens on the first line with
// "---" and closes on the next line that is "---".
func ParseSkillMD(file string, data []byte) (Front, string, error) {
	ps := &problems{file: file}
	if !utf8.Valid(data) {
		ps.add(0, "", "not UTF-8 text")
		return Front{}, "", &ParseError{Problems: ps.list}
	}
	text := strings.TrimPrefix(string(data), "\ufeff")
	text = strings.ReplaceAll(text, "\r\n", "\n")
	first, rest, _ := strings.Cut(text, "\n")
	if strings.TrimRight(first, " \t") != "---" {
		ps.add(1, "", "no front matter: the file must start with a line \"---\", the YAML front matter (name, description), and a closing \"---\"")
		return Front{}, "", &ParseError{Problems: ps.list}
	}
	var fm string
	var body string
	closed := false
	for off := 0; off <= len(rest); {
		end := strings.IndexByte(rest[off:], '\n')
		line := rest[off:]
		next := len(rest) + 1
		if end >= 0 {
			line, next = rest[off:off+end], off+end+1
		}
		if strings.TrimRight(line, " \t") == "---" {
			fm, body, closed = rest[:off], rest[min(next, len(rest)):], true
			break
		}
		off = next
	}
	if !closed {
		ps.add(1, "", "the front matter is not closed by a line \"---\"")
		return Front{}, "", &ParseError{Problems: ps.list}
	}
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(fm), &root); err != nil {
		ps.add(yamlLine(err)+1, "", "front matter: %s", yamlMsg(err))
		return Front{}, "", &ParseError{Problems: ps.list}
	}
	f := Front{Extra: map[string]any{}}
	m := docMapping(&root)
	if m == nil {
		ps.add(2, "", "the front matter must be a mapping with name and description")
		return Front{}, "", &ParseError{Problems: ps.list}
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		line := k.Line + 1 // the front matter starts on the file's second line
		if seen[k.Value] {
			ps.add(line, k.Value, "given twice")
			continue
		}
		seen[k.Value] = true
		switch k.Value {
		case "name", "description":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!str" && v.Tag != "" {
				ps.add(line, k.Value, "must be a string")
				continue
			}
			if k.Value == "name" {
				f.Name = v.Value
			} else {
				f.Description = strings.TrimSpace(v.Value)
			}
		default:
			var x any
			if err := v.Decode(&x); err == nil {
				f.Extra[k.Value] = x
			}
		}
	}
	switch {
	case !seen["name"]:
		ps.add(1, "name", "is required")
	case len(f.Name) > maxNameLen || !nameRE.MatchString(f.Name):
		ps.add(lineOfKey(m, "name")+1, "name", "%q: lower-case letters, digits and single hyphens, neither first nor last, at most %d characters", f.Name, maxNameLen)
	}
	switch {
	case !seen["description"] || f.Description == "":
		ps.add(1, "description", "is required: one line saying what the skill does and when to use it")
	case utf8.RuneCountInString(f.Description) > maxDescription:
		ps.add(lineOfKey(m, "description")+1, "description", "longer than %d characters", maxDescription)
	}
	if len(ps.list) > 0 {
		return Front{}, "", &ParseError{Problems: ps.list}
	}
	return f, body, nil
}

// ParseManifest reads a manifest (file names it in problems) strictly:
// an unknown field, a value of the wrong type or one that breaks a rule
// is a problem, and one problem fails the whole manifest. dir, when not
// "", is the skill's folder: the files the manifest names must be in it.
func ParseManifest(file, dir string, data []byte) (Manifest, error) {
	ps := &problems{file: file}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		ps.add(yamlLine(err), "", "%s", yamlMsg(err))
		return Manifest{}, &ParseError{Problems: ps.list}
	}
	m := docMapping(&root)
	if m == nil {
		if root.Kind == 0 || len(root.Content) == 0 {
			return Manifest{}, nil // an empty manifest states nothing
		}
		ps.add(1, "", "a manifest is a mapping (credentials, network, classification, sandbox, image, entrypoints)")
		return Manifest{}, &ParseError{Problems: ps.list}
	}
	checkKeys(ps, m, reflect.TypeFor[Manifest](), "")
	if len(ps.list) > 0 {
		return Manifest{}, &ParseError{Problems: ps.list}
	}
	var man Manifest
	if err := m.Decode(&man); err != nil {
		ps.add(yamlLine(err), "", "%s", yamlMsg(err))
		return Manifest{}, &ParseError{Problems: ps.list}
	}
	validate(ps, m, &man, dir)
	if len(ps.list) > 0 {
		return Manifest{}, &ParseError{Problems: ps.list}
	}
	return man, nil
}

// docMapping is the document's top mapping, or nil.
func docMapping(root *yaml.Node) *yaml.Node {
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 && root.Content[0].Kind == yaml.MappingNode {
		return root.Content[0]
	}
	return nil
}

// checkKeys reports every key of n that t (a struct, by its yaml tags)
// does not have, recursing into struct fields and slices of structs; a
// map field (an entrypoint's args schema) is not checked.
func checkKeys(ps *problems, n *yaml.Node, t reflect.Type, at string) {
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		fields := map[string]reflect.Type{}
		for i := range t.NumField() {
			tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if tag != "" && tag != "-" {
				fields[tag] = t.Field(i).Type
			}
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			ft, ok := fields[k.Value]
			switch {
			case !ok:
				names := make([]string, 0, len(fields))
				for f := range fields {
					names = append(names, f)
				}
				slices.Sort(names)
				ps.add(k.Line, join(at, k.Value), "unknown field (known: %s)", strings.Join(names, ", "))
			case seen[k.Value]:
				ps.add(k.Line, join(at, k.Value), "given twice")
			default:
				checkKeys(ps, n.Content[i+1], ft, join(at, k.Value))
			}
			seen[k.Value] = true
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, c := range n.Content {
			checkKeys(ps, c, t.Elem(), fmt.Sprintf("%s[%d]", at, i))
		}
	}
}

func join(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}

// lineOfKey is the line of key in mapping m, else m's own.
func lineOfKey(m *yaml.Node, key string) int {
	if v := valueOf(m, key); v != nil {
		return v.Line
	}
	return m.Line
}

// valueOf is key's value node in mapping m, or nil.
func valueOf(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// item is the i-th element of sequence n, or n.
func item(n *yaml.Node, i int) *yaml.Node {
	if n != nil && n.Kind == yaml.SequenceNode && i < len(n.Content) {
		return n.Content[i]
	}
	return n
}

func line(n *yaml.Node, fallback *yaml.Node) int {
	if n != nil {
		return n.Line
	}
	return fallback.Line
}

var (
	classRE     = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	entryRE     = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)
	hostLabelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
)

// DefaultTemplate is the sandbox template of every skill run: no
// workspace overlay, network only through the egress proxy to the
// manifest's hosts (internal/sandbox names it).
const DefaultTemplate = "skill"

// validate checks the rules the types cannot state.
func validate(ps *problems, m *yaml.Node, man *Manifest, dir string) {
	nn := valueOf(m, "network")
	if len(man.Network) > maxListItems {
		ps.add(line(nn, m), "network", "more than %d hosts", maxListItems)
	}
	for i, h := range man.Network {
		if err := CheckHost(h); err != nil {
			ps.add(line(item(nn, i), m), fmt.Sprintf("network[%d]", i), "%v", err)
		}
	}
	cn := valueOf(m, "credentials")
	names := map[string]bool{}
	for i, c := range man.Credentials {
		at := fmt.Sprintf("credentials[%d]", i)
		ln := line(item(cn, i), m)
		ref := "env:X" // a stand-in, so that the rest is still checked
		if _, err := secret.ParseRef(c.Ref); err != nil {
			ps.add(ln, at+".ref", "%v", err)
		} else {
			ref = c.Ref
		}
		if c.As == string(secret.AsStdin) {
			ps.add(ln, at+".as", "stdin carries the run's arguments: a credential enters as env, file or proxy")
			continue
		}
		var bind []string
		if c.As == string(secret.AsProxy) {
			bind = c.Bind
		} else if len(c.Bind) > 0 {
			ps.add(ln, at+".bind", "lists the hosts of a proxy credential, and only of one")
		}
		// The run's commands all get it: the declaration's own program
		// list plays no part (a placeholder satisfies the check).
		if _, err := secret.NewUse(ref, c.As, c.Name, bind, []string{"skill"}, nil); err != nil {
			ps.add(ln, at, "%s", strings.TrimPrefix(err.Error(), secret.ErrUse.Error()+": "))
		}
		for _, b := range c.Bind {
			if !slices.Contains(man.Network, b) {
				ps.add(ln, at+".bind", "%q is not in network: the proxy swaps the value in only on the way to a host the skill may reach", b)
			}
		}
		key := c.As + ":" + c.Name
		if names[key] {
			ps.add(ln, at+".name", "%s %q is given twice", c.As, c.Name)
		}
		names[key] = true
	}
	kn := valueOf(m, "classification")
	for i, c := range man.Classification {
		if !classRE.MatchString(c) || len(c) > 64 {
			ps.add(line(item(kn, i), m), fmt.Sprintf("classification[%d]", i), "%q: lower case, letters, digits and hyphens (spends-money, sends-messages)", c)
		}
	}
	sn := valueOf(m, "sandbox")
	if t := man.Sandbox.Template; t != "" && t != DefaultTemplate {
		ps.add(line(valueOf(sn, "template"), m), "sandbox.template", "%q: a skill runs in the %s template (leave it out)", t, DefaultTemplate)
	}
	switch man.Sandbox.Runtime {
	case "", "native", "docker":
	default:
		ps.add(line(valueOf(sn, "runtime"), m), "sandbox.runtime", "%q: native, docker, or leave it out", man.Sandbox.Runtime)
	}
	if man.Sandbox.Memory < 0 || man.Sandbox.Timeout < 0 || man.Sandbox.PIDs < 0 {
		ps.add(line(sn, m), "sandbox", "limits cannot be negative")
	}
	if df := man.Image.Dockerfile; df != "" {
		ln := line(valueOf(valueOf(m, "image"), "dockerfile"), m)
		if err := inFolder(dir, df, false); err != nil {
			ps.add(ln, "image.dockerfile", "%v", err)
		}
	}
	validateEntrypoints(ps, m, man, dir)
}

func validateEntrypoints(ps *problems, m *yaml.Node, man *Manifest, dir string) {
	en := valueOf(m, "entrypoints")
	if len(man.Entrypoints) > maxEntrypoints {
		ps.add(line(en, m), "entrypoints", "more than %d", maxEntrypoints)
	}
	seen := map[string]bool{}
	for i, e := range man.Entrypoints {
		at := fmt.Sprintf("entrypoints[%d]", i)
		n := item(en, i)
		ln := line(n, m)
		if !entryRE.MatchString(e.Name) || len(e.Name) > 64 {
			ps.add(line(valueOf(n, "name"), n), at+".name", "%q: lower case, starting with a letter, then letters, digits, _ and -", e.Name)
		}
		if seen[e.Name] {
			ps.add(ln, at+".name", "%q is given twice", e.Name)
		}
		seen[e.Name] = true
		cl := line(valueOf(n, "command"), n)
		switch {
		case len(e.Command) == 0 || e.Command[0] == "":
			ps.add(cl, at+".command", "is required: the program and its arguments")
		case len(e.Command) > maxCommandLength:
			ps.add(cl, at+".command", "more than %d words", maxCommandLength)
		case strings.HasPrefix(e.Command[0], "/"):
			// A program of the image (/usr/bin/python3) or of the
			// skill as mounted: /skills/<name>/... is the folder.
		case strings.Contains(e.Command[0], "/"):
			if err := inFolder(dir, e.Command[0], true); err != nil {
				ps.add(cl, at+".command", "%v", err)
			}
		}
		for j, w := range e.Command {
			if strings.ContainsRune(w, 0) {
				ps.add(cl, fmt.Sprintf("%s.command[%d]", at, j), "holds a NUL byte")
			}
		}
		if e.Args != nil {
			if err := checkArgsSchema(e.Args); err != nil {
				ps.add(line(valueOf(n, "args"), n), at+".args", "%v", err)
			}
		}
	}
}

// ArgsSchema is an entrypoint's argument schema as the tool describes
// it; nil when it takes none.
func ArgsSchema(args map[string]any) (*jsonschema.Schema, error) {
	if args == nil {
		return nil, nil
	}
	b, err := yamlToJSON(args)
	if err != nil {
		return nil, err
	}
	var s jsonschema.Schema
	if err := s.UnmarshalJSON(b); err != nil {
		return nil, err
	}
	return &s, nil
}

func checkArgsSchema(args map[string]any) error {
	s, err := ArgsSchema(args)
	if err != nil {
		return fmt.Errorf("not a JSON Schema: %w", err)
	}
	if s.Type != "object" {
		return errors.New("the arguments are one JSON object: the schema's type must be object")
	}
	if _, err := s.Resolve(nil); err != nil {
		return fmt.Errorf("not a usable JSON Schema: %w", err)
	}
	return nil
}

// inFolder checks that rel names a regular file inside dir (no "..", not
// absolute, no symlink leading out); exec also wants it executable. An
// empty dir checks the name only.
func inFolder(dir, rel string, exec bool) error {
	clean := path.Clean(rel)
	if path.IsAbs(rel) || clean == ".." || strings.HasPrefix(clean, "../") || clean == "." {
		return fmt.Errorf("%q must be a path inside the skill's folder", rel)
	}
	if dir == "" {
		return nil
	}
	p := filepath.Join(dir, filepath.FromSlash(clean))
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return fmt.Errorf("%q: %w", rel, errors.Unwrap(err))
	}
	rdir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(real, rdir+string(filepath.Separator)) {
		return fmt.Errorf("%q leads out of the skill's folder", rel)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%q is not a regular file", rel)
	}
	if exec && fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%q is not executable (chmod +x)", rel)
	}
	return nil
}

// CheckHost checks one network entry: host, host:port or *.suffix (with
// or without a port), lower case, no scheme or path.
func CheckHost(h string) error {
	if h == "" {
		return errors.New("empty host")
	}
	if strings.ContainsAny(h, "/@?#[] \t") {
		return fmt.Errorf("%q: a host, host:port or *.suffix, without scheme or path", h)
	}
	name, port, hasPort := strings.Cut(h, ":")
	if hasPort {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return fmt.Errorf("%q: the port must be 1-65535", h)
		}
	}
	name = strings.TrimPrefix(name, "*.")
	if name == "" || len(name) > 253 {
		return fmt.Errorf("%q: no host name", h)
	}
	for l := range strings.SplitSeq(name, ".") {
		if !hostLabelRE.MatchString(l) {
			return fmt.Errorf("%q: host names are lower-case labels of letters, digits and hyphens", h)
		}
	}
	return nil
}

// yamlLine is the line a yaml error names, 0 when it names none.
func yamlLine(err error) int {
	var te *yaml.TypeError
	msg := err.Error()
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	i := strings.Index(msg, "line ")
	if i < 0 {
		return 0
	}
	n := 0
	for _, c := range msg[i+5:] {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// yamlMsg is a yaml error without its "yaml: " prefix and line.
func yamlMsg(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return strings.Join(te.Errors, "; ")
	}
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

// yamlToJSON turns a decoded YAML value (maps with string keys) into
// JSON; a key that is not a string is refused.
func yamlToJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("keys must be strings: %w", err)
	}
	return b, nil
}

// Load reads the skill in dir (found in scope): SKILL.md, and skill.yaml
// or carapace.yaml when present. Any problem fails the whole skill: a
// *ParseError lists them all. A folder that is gone or holds no SKILL.md
// is an error wrapping fs.ErrNotExist: no skill (any more).
func Load(dir string, scope Scope) (Skill, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Skill{}, err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return Skill{}, &ParseError{Problems: []Problem{{File: dir, Msg: err.Error()}}, Err: err}
	}
	mdPath := filepath.Join(abs, SkillFile)
	data, err := regfile.ReadFile(mdPath, maxSkillFile)
	if err != nil {
		return Skill{}, &ParseError{Problems: []Problem{{File: mdPath, Msg: readMsg(err)}}, Err: err}
	}
	front, body, err := ParseSkillMD(mdPath, data)
	if err != nil {
		return Skill{}, err
	}
	if base := filepath.Base(abs); front.Name != base {
		return Skill{}, &ParseError{Problems: []Problem{{File: mdPath, Line: 2, Field: "name",
			Msg: fmt.Sprintf("%q must be the folder's name (%q)", front.Name, base)}}}
	}
	s := Skill{Name: front.Name, Description: front.Description, Body: body, Dir: abs, Scope: scope}
	mf, err := manifestPath(abs)
	if err != nil {
		return Skill{}, err
	}
	if mf == "" {
		return s, nil
	}
	data, err = regfile.ReadFile(mf, maxManifestFile)
	if err != nil {
		return Skill{}, &ParseError{Problems: []Problem{{File: mf, Msg: readMsg(err)}}}
	}
	if s.Manifest, err = ParseManifest(mf, abs, data); err != nil {
		return Skill{}, err
	}
	return s, nil
}

// manifestPath is the folder's manifest, "" when it has none.
func manifestPath(dir string) (string, error) {
	var found []string
	for _, n := range []string{ManifestFile, AltManifestFile} {
		p := filepath.Join(dir, n)
		if _, err := os.Lstat(p); err == nil {
			found = append(found, p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", &ParseError{Problems: []Problem{{File: p, Msg: err.Error()}}}
		}
	}
	if len(found) > 1 {
		return "", &ParseError{Problems: []Problem{{File: found[1], Msg: "the folder has both " + ManifestFile + " and " + AltManifestFile + ": keep one"}}}
	}
	if len(found) == 0 {
		return "", nil
	}
	return found[0], nil
}

func readMsg(err error) string {
	switch {
	case errors.Is(err, regfile.ErrTooLarge):
		return "too large"
	case errors.Is(err, fs.ErrNotExist):
		return "missing"
	}
	return err.Error()
}
