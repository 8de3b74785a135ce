package config

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/fluffy-agent/fluffy/internal/spell"
	"github.com/fluffy-agent/fluffy/internal/units"
)

// Layer names, lowest precedence first.
const (
	LayerDefault = "default"
	LayerUser    = "user"
	LayerProject = "project"
	LayerEnv     = "env"
	LayerFlag    = "flag"
)

// EnvPrefix starts every environment variable that sets a key. Variables
// starting with EnvInternalPrefix belong to fluffy's own plumbing and are not
// configuration.
const (
	EnvPrefix         = "FLUFFY_"
	EnvInternalPrefix = "FLUFFY__"
)

// Origin says where a key's effective value came from.
type Origin struct {
	Layer  string `json:"layer"`
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
	Env    string `json:"env,omitempty"`
}

func (o Origin) String() string {
	switch {
	case o.File != "":
		return fmt.Sprintf("%s %s:%d:%d", o.Layer, o.File, o.Line, o.Column)
	case o.Env != "":
		return o.Layer + " " + o.Env
	}
	return o.Layer
}

// Error is one configuration problem, located as precisely as its source
// allows. Load returns them joined with errors.Join.
type Error struct {
	File   string // empty for env and flags
	Line   int
	Column int
	Env    string // the environment variable or flag, when not a file
	Key    string // the dotted key, when known
	Msg    string
}

func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", e.File, e.Line, e.Column)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Env != "":
		b.WriteString(e.Env + ": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Options says where to load from. Zero values mean "not present".
type Options struct {
	// Env supplies the environment (defaults, FLUFFY_* variables).
	Env Env
	// UserFile and ProjectFile are read when they exist; a missing file is
	// not an error.
	UserFile    string
	ProjectFile string
	// Flags are key=value settings from the command line, applied last in
	// order.
	Flags []string
}

// Loaded is an effective configuration and the origin of every key.
type Loaded struct {
	Config  Config
	Origins map[string]Origin
	// Files lists the files that existed and were read.
	Files []string
}

// Load builds the effective configuration. It never returns a partially
// loaded one: on error the *Loaded is nil.
func Load(opts Options) (*Loaded, error) {
	l := &Loaded{Config: Default(opts.Env), Origins: map[string]Origin{}}
	for _, k := range allKeys() {
		l.Origins[k.Name] = Origin{Layer: LayerDefault}
	}
	target := reflect.ValueOf(&l.Config).Elem()
	var errs []error
	for _, f := range []struct{ layer, path string }{{LayerUser, opts.UserFile}, {LayerProject, opts.ProjectFile}} {
		if f.path == "" {
			continue
		}
		data, err := readFile(f.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, &Error{File: f.path, Msg: err.Error()})
			continue
		}
		l.Files = append(l.Files, f.path)
		errs = append(errs, applyFile(target, l.Origins, f.layer, f.path, data)...)
	}
	errs = append(errs, applyEnv(target, l.Origins, opts.Env)...)
	for _, kv := range opts.Flags {
		errs = append(errs, applyFlag(target, l.Origins, kv)...)
	}
	errs = append(errs, validate(target, l.Origins)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return l, nil
}

// ValidateFile checks one file on its own, as the given layer (user or
// project), against the defaults.
func ValidateFile(path, layer string, env Env) error {
	data, err := readFile(path)
	if err != nil {
		return &Error{File: path, Msg: err.Error()}
	}
	cfg := Default(env)
	origins := map[string]Origin{}
	target := reflect.ValueOf(&cfg).Elem()
	errs := applyFile(target, origins, layer, path, data)
	errs = append(errs, validate(target, origins)...)
	return errors.Join(errs...)
}

// Key describes one configuration key.
type Key struct {
	Name     string   // dotted: sandbox.runtime
	Env      string   // FLUFFY_SANDBOX_RUNTIME
	Type     string   // human name of the expected type
	Enum     []string // allowed values, if restricted
	UserOnly bool     // a project file may not set it
	index    []int
	typ      reflect.Type
}

// Keys lists every configuration key, sorted by name.
func Keys() []Key {
	return slices.Clone(allKeys())
}

// allKeys is Keys, walked once per process: the keys are a function of
// the Config type alone, and the sandbox server loads a configuration per
// command (the walk was half of that). Callers must not modify it.
var allKeys = sync.OnceValue(func() []Key {
	var keys []Key
	walkKeys(reflect.TypeOf(Config{}), "", nil, &keys)
	sort.Slice(keys, func(i, j int) bool { return keys[i].Name < keys[j].Name })
	return keys
})

// keysByEnv indexes allKeys by environment variable, once.
var keysByEnv = sync.OnceValue(func() map[string]Key {
	m := map[string]Key{}
	for _, k := range allKeys() {
		m[k.Env] = k
	}
	return m
})

var textUnmarshaler = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()

func isLeaf(t reflect.Type) bool {
	return t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(textUnmarshaler)
}

func walkKeys(t reflect.Type, prefix string, index []int, out *[]Key) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		full := name
		if prefix != "" {
			full = prefix + "." + name
		}
		idx := append(append([]int(nil), index...), i)
		if !isLeaf(f.Type) {
			walkKeys(f.Type, full, idx, out)
			continue
		}
		k := Key{
			Name:     full,
			Env:      EnvPrefix + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(full)),
			Type:     typeName(f.Type),
			UserOnly: f.Tag.Get("scope") == "user",
			index:    idx,
			typ:      f.Type,
		}
		if e := f.Tag.Get("enum"); e != "" {
			k.Enum = strings.Split(e, ",")
		}
		*out = append(*out, k)
	}
}

func typeName(t reflect.Type) string {
	switch t {
	case reflect.TypeOf(units.Size(0)):
		return "size"
	case reflect.TypeOf(units.Duration(0)):
		return "duration"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "integer"
	case reflect.String:
		return "string"
	case reflect.Slice:
		return "list of " + typeName(t.Elem())
	case reflect.Map:
		return "mapping"
	}
	return t.String()
}

// expected is the phrase used in type errors.
func expected(t reflect.Type) string {
	switch t {
	case reflect.TypeOf(units.Size(0)):
		return "a size: " + units.SizeForms
	case reflect.TypeOf(units.Duration(0)):
		return "a duration: " + units.DurationForms
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "a whole number"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	case reflect.Map:
		return "a mapping"
	}
	return t.String()
}

func keyByName() map[string]Key {
	m := map[string]Key{}
	for _, k := range allKeys() {
		m[k.Name] = k
	}
	return m
}

// applyFile decodes one YAML document onto target, key by key.
func applyFile(target reflect.Value, origins map[string]Origin, layer, path string, data []byte) []error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file sets nothing
		}
		return []error{yamlError(path, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return []error{&Error{File: path, Line: extra.Line, Column: extra.Column, Msg: "more than one YAML document; a config file holds one"}}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil
	}
	keys := keyByName()
	var errs []error
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind != yaml.MappingNode {
			what := "the top level"
			if prefix != "" {
				what = prefix
			}
			errs = append(errs, &Error{File: path, Line: n.Line, Column: n.Column, Key: prefix, Msg: what + " must be a mapping of keys to values"})
			return
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := n.Content[i], n.Content[i+1]
			name := kn.Value
			full := name
			if prefix != "" {
				full = prefix + "." + name
			}
			if seen[name] {
				errs = append(errs, &Error{File: path, Line: kn.Line, Column: kn.Column, Key: full, Msg: "set twice in the same mapping"})
				continue
			}
			seen[name] = true
			if k, ok := keys[full]; ok {
				if k.UserOnly && layer == LayerProject {
					errs = append(errs, &Error{File: path, Line: kn.Line, Column: kn.Column, Key: full,
						Msg: "may only be set by the user (user config, FLUFFY_* environment or flags), not by a project file"})
					continue
				}
				if err := setNode(target, k, vn); err != nil {
					line, col := vn.Line, vn.Column
					var ne *NodeError
					if errors.As(err, &ne) {
						line, col = ne.Line, ne.Column
					}
					errs = append(errs, &Error{File: path, Line: line, Column: col, Key: full, Msg: err.Error()})
					continue
				}
				origins[full] = Origin{Layer: layer, File: path, Line: vn.Line, Column: vn.Column}
				continue
			}
			if isSection(full, keys) {
				walk(vn, full)
				continue
			}
			errs = append(errs, &Error{File: path, Line: kn.Line, Column: kn.Column, Key: full, Msg: "unknown key" + suggest(full, keys)})
		}
	}
	walk(root, "")
	return errs
}

func isSection(name string, keys map[string]Key) bool {
	for k := range keys {
		if strings.HasPrefix(k, name+".") {
			return true
		}
	}
	return false
}

// yamlError turns a yaml.v3 syntax error ("yaml: line 3: ...") into an
// *Error with the line split out.
func yamlError(path string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, after, ok := strings.Cut(rest, ": "); ok {
			if v, err := strconv.Atoi(n); err == nil {
				line, msg = v, after
			}
		}
	}
	return &Error{File: path, Line: line, Column: 1, Msg: "invalid YAML: " + msg}
}

func setNode(target reflect.Value, k Key, n *yaml.Node) error {
	v := reflect.New(k.typ)
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch {
	case k.typ.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return fmt.Errorf("expected %s, got %s", expected(k.typ), describe(n))
		}
	case k.typ.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			return fmt.Errorf("expected %s, got %s", expected(k.typ), describe(n))
		}
	default:
		if n.Kind != yaml.ScalarNode {
			return fmt.Errorf("expected %s, got %s", expected(k.typ), describe(n))
		}
		if reflect.PointerTo(k.typ).Implements(textUnmarshaler) {
			if err := v.Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.Value)); err != nil {
				return unitError(err)
			}
			target.FieldByIndex(k.index).Set(v.Elem())
			return nil
		}
		// Accept only YAML's own spelling of each scalar type, so that
		// "yes" or "1" never becomes true by accident.
		switch k.typ.Kind() {
		case reflect.Bool:
			if n.Tag != "!!bool" {
				return fmt.Errorf("expected %s, got %s", expected(k.typ), describe(n))
			}
		case reflect.Int, reflect.Int64, reflect.Int32:
			if n.Tag != "!!int" {
				return fmt.Errorf("expected %s, got %s", expected(k.typ), describe(n))
			}
		}
	}
	if err := n.Decode(v.Interface()); err != nil {
		var ne *NodeError
		if errors.As(err, &ne) {
			return ne
		}
		return fmt.Errorf("expected %s, got %s", expected(k.typ), describe(n))
	}
	target.FieldByIndex(k.index).Set(v.Elem())
	return nil
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}

// setString parses a value given as text (environment, flags).
func setString(target reflect.Value, k Key, s string) error {
	v := reflect.New(k.typ)
	switch {
	case reflect.PointerTo(k.typ).Implements(textUnmarshaler):
		if err := v.Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			return unitError(err)
		}
	case k.typ.Kind() == reflect.String:
		v.Elem().SetString(s)
	case k.typ.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("expected %s, got %q", expected(k.typ), s)
		}
		v.Elem().SetBool(b)
	case k.typ.Kind() == reflect.Int || k.typ.Kind() == reflect.Int64 || k.typ.Kind() == reflect.Int32:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("expected %s, got %q", expected(k.typ), s)
		}
		v.Elem().SetInt(n)
	case k.typ.Kind() == reflect.Float64 || k.typ.Kind() == reflect.Float32:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f != f {
			return fmt.Errorf("expected %s, got %q", expected(k.typ), s)
		}
		v.Elem().SetFloat(f)
	case k.typ.Kind() == reflect.Slice && k.typ.Elem().Kind() == reflect.String:
		var items []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				items = append(items, p)
			}
		}
		v.Elem().Set(reflect.ValueOf(items))
	default:
		return fmt.Errorf("is %s and can only be set in a config file", expected(k.typ))
	}
	target.FieldByIndex(k.index).Set(v.Elem())
	return nil
}

func applyEnv(target reflect.Value, origins map[string]Origin, env Env) []error {
	if env == nil {
		return nil
	}
	var errs []error
	for _, k := range allKeys() {
		// An empty variable counts as unset, as shells make "unset" hard
		// to express inline (FLUFFY_X= cmd).
		s, ok := env(k.Env)
		if !ok || s == "" {
			continue
		}
		if err := setString(target, k, s); err != nil {
			errs = append(errs, &Error{Env: k.Env, Key: k.Name, Msg: err.Error()})
			continue
		}
		origins[k.Name] = Origin{Layer: LayerEnv, Env: k.Env}
	}
	return errs
}

// UnknownEnv returns the FLUFFY_* variables in environ that name no key, each
// with a suggestion. A typo in a variable would otherwise be silently
// ignored.
func UnknownEnv(environ []string) []error {
	byEnv := keysByEnv()
	var errs []error
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || strings.HasPrefix(name, EnvInternalPrefix) {
			continue
		}
		if _, ok := byEnv[name]; ok {
			continue
		}
		best, dist := "", 4
		for e := range byEnv {
			if d := spell.Distance(name, e); d < dist || d == dist && e < best {
				best, dist = e, d
			}
		}
		msg := "unknown configuration variable"
		if best != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", best)
		}
		errs = append(errs, &Error{Env: name, Msg: msg})
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errs
}

func applyFlag(target reflect.Value, origins map[string]Origin, kv string) []error {
	name, val, ok := strings.Cut(kv, "=")
	flag := "--set " + kv
	if !ok {
		return []error{&Error{Env: flag, Msg: "expected key=value"}}
	}
	keys := keyByName()
	k, ok := keys[name]
	if !ok {
		return []error{&Error{Env: flag, Key: name, Msg: "unknown key" + suggest(name, keys)}}
	}
	if err := setString(target, k, val); err != nil {
		return []error{&Error{Env: flag, Key: name, Msg: err.Error()}}
	}
	origins[name] = Origin{Layer: LayerFlag, Env: "--set " + name}
	return nil
}

// validate checks enums on the merged value and reports against the origin
// that supplied the bad value.
func validate(target reflect.Value, origins map[string]Origin) []error {
	var errs []error
	for _, k := range allKeys() {
		v := target.FieldByIndex(k.index)
		if len(k.Enum) > 0 {
			s := v.String()
			ok := false
			for _, e := range k.Enum {
				ok = ok || s == e
			}
			if !ok {
				errs = append(errs, originError(origins[k.Name], k.Name, fmt.Sprintf("%q is not one of %s", s, strings.Join(k.Enum, ", "))))
			}
		}
		if v.Kind() == reflect.Int && v.Int() < 0 {
			errs = append(errs, originError(origins[k.Name], k.Name, "must not be negative"))
		}
		if strings.HasPrefix(k.Name, "net.registries.") {
			if err := CheckRegistryURL(v.String()); err != nil {
				errs = append(errs, originError(origins[k.Name], k.Name, err.Error()))
			}
		}
	}
	if h := target.FieldByName("Home").String(); h == "" || !filepath.IsAbs(h) {
		errs = append(errs, originError(origins["home"], "home", fmt.Sprintf("must be an absolute path, got %q (set FLUFFY_HOME or HOME)", h)))
	}
	return errs
}

func originError(o Origin, key, msg string) error {
	return &Error{File: o.File, Line: o.Line, Column: o.Column, Env: o.Env, Key: key, Msg: msg}
}

// suggest returns " (did you mean X?)" for the closest known key. A key
// whose last segment exists in several sections (timeout at the top level)
// gets every candidate.
func suggest(name string, keys map[string]Key) string {
	last := name[strings.LastIndex(name, ".")+1:]
	var same []string
	for k := range keys {
		if k != name && k[strings.LastIndex(k, ".")+1:] == last {
			same = append(same, k)
		}
	}
	if len(same) > 0 {
		sort.Strings(same)
		return fmt.Sprintf(" (did you mean %s?)", strings.Join(same, " or "))
	}
	best, dist := "", max(3, 1+len(name)/3)
	for k := range keys {
		if d := spell.Distance(name, k); d < dist || d == dist && k < best {
			best, dist = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// unitError drops the units sentinel's generic prefix: the key is already
// named, the specific reason is what helps.
func unitError(err error) error {
	return errors.New(strings.TrimPrefix(err.Error(), units.ErrSyntax.Error()+": "))
}
