package approval

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

// Limits of what BindInputs reads for one operation. Past them the
// operation is Unbound: it can be approved each time, but no approval
// carries over.
const (
	maxInputCandidates = 512      // paths looked up
	maxInputs          = 64       // files hashed
	maxInputBytes      = 64 << 20 // bytes hashed
)

// buildFiles are the files a known build tool or test runner reads from
// the directory it runs in, by program name. They are bound whether or
// not the command names them: `make` runs the Makefile's recipes, `npm
// run` the scripts of package.json.
var buildFiles = map[string][]string{
	"make":     {"Makefile", "makefile", "GNUmakefile"},
	"gmake":    {"Makefile", "makefile", "GNUmakefile"},
	"just":     {"justfile", "Justfile", ".justfile"},
	"npm":      {"package.json", ".npmrc"},
	"npx":      {"package.json", ".npmrc"},
	"pnpm":     {"package.json", ".npmrc"},
	"yarn":     {"package.json", ".yarnrc", ".yarnrc.yml"},
	"bun":      {"package.json", "bunfig.toml"},
	"deno":     {"deno.json", "deno.jsonc"},
	"cargo":    {"Cargo.toml", "build.rs", ".cargo/config.toml"},
	"go":       {"go.mod", "go.work"},
	"pip":      {"pyproject.toml", "setup.py", "setup.cfg", "requirements.txt"},
	"pip3":     {"pyproject.toml", "setup.py", "setup.cfg", "requirements.txt"},
	"uv":       {"pyproject.toml", "uv.lock"},
	"poetry":   {"pyproject.toml"},
	"pytest":   {"pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini", "conftest.py"},
	"tox":      {"tox.ini", "pyproject.toml", "setup.cfg"},
	"nox":      {"noxfile.py"},
	"rake":     {"Rakefile", "rakefile"},
	"bundle":   {"Gemfile"},
	"mvn":      {"pom.xml"},
	"gradle":   {"build.gradle", "build.gradle.kts", "settings.gradle", "settings.gradle.kts"},
	"cmake":    {"CMakeLists.txt"},
	"ninja":    {"build.ninja"},
	"meson":    {"meson.build"},
	"bazel":    {"BUILD", "BUILD.bazel", "WORKSPACE", "MODULE.bazel", ".bazelrc"},
	"scons":    {"SConstruct"},
	"composer": {"composer.json"},
}

// pythonModules maps python -m MODULE to the build-tool table's key.
var pythonModules = map[string]string{"pip": "pip", "pytest": "pytest", "build": "pip", "tox": "tox"}

// InputPaths returns the files whose content op's commands run or build
// from, as candidates: canonical-looking absolute paths inside the
// session's workspace, sorted and without duplicates. The rule:
//
//   - every argument of every command (argv[0] included), the value of
//     every --option=value argument, and every environment assignment's
//     value, taken relative to the command's directory;
//   - a bare program name in each directory of a PATH the line sets, and
//     the module python -m runs (mod.py, mod/__main__.py, mod/__init__.py);
//   - every literal target of an input redirection (< file) in the
//     command line, relative to the workspace and to each command's
//     directory;
//   - the build files of a known build tool or test runner (make:
//     Makefile; npm: package.json; ...) in the directory it runs in and
//     in each directory its arguments could name (make -C dir).
//
// Candidates outside the workspace are left out: the sandbox shows the
// host's files read-only there. Whether a candidate is a file is for
// BindInputs to find out. The second result is false when there are more
// than maxInputCandidates.
func InputPaths(op *operation.Operation) ([]string, bool) {
	ws := op.Session.Workspace
	if ws == "" || !filepath.IsAbs(ws) {
		return nil, true
	}
	var out []string
	add := func(dir, word string) {
		if word == "" || word == "-" || strings.IndexByte(word, 0) >= 0 || len(word) > 4096 {
			return
		}
		p := word
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		p = filepath.Clean(p)
		if p != ws && strings.HasPrefix(p, ws+string(filepath.Separator)) {
			out = append(out, p)
		}
	}
	dirs := []string{ws}
	for i := range op.Commands {
		c := &op.Commands[i]
		dir := commandDir(ws, c.Dir)
		if !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
		for _, a := range c.Argv {
			add(dir, a)
			if strings.HasPrefix(a, "-") {
				if _, v, ok := strings.Cut(a, "="); ok {
					add(dir, v)
				}
			}
		}
		for _, e := range c.Env {
			if _, v, ok := strings.Cut(e, "="); ok {
				add(dir, v)
			}
		}
		if len(c.Argv) > 2 && strings.HasPrefix(filepath.Base(c.Argv[0]), "python") && c.Argv[1] == "-m" {
			// python -m mod runs mod.py or the package mod.
			mod := filepath.Join(strings.Split(c.Argv[2], ".")...)
			add(dir, mod+".py")
			add(dir, filepath.Join(mod, "__main__.py"))
			add(dir, filepath.Join(mod, "__init__.py"))
		}
		if len(c.Argv) > 0 {
			// The build files where the tool runs, and where any of its
			// arguments could send it (make -C dir, npm --prefix dir).
			bf := buildFiles[programName(c.Argv)]
			for _, f := range bf {
				add(dir, f)
			}
			for _, a := range c.Argv[1:] {
				if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "-") {
					a = v
				}
				if a == "" || strings.HasPrefix(a, "-") {
					continue
				}
				for _, f := range bf {
					add(dir, filepath.Join(a, f))
				}
			}
		}
	}
	// A bare program name runs from PATH: when the line sets PATH (X=…
	// prefix, env, export), the program as found in each of its
	// directories is bound too.
	redirs, linePaths := fromLine(op.CommandLine)
	var pathDirs []string
	for _, v := range linePaths {
		pathDirs = append(pathDirs, filepath.SplitList(v)...)
	}
	for _, c := range op.Commands {
		for _, w := range slices.Concat(c.Env, c.Argv) {
			if v, ok := strings.CutPrefix(w, "PATH="); ok {
				pathDirs = append(pathDirs, filepath.SplitList(v)...)
			}
		}
	}
	for i := range op.Commands {
		c := &op.Commands[i]
		if len(c.Argv) == 0 || strings.Contains(c.Argv[0], "/") {
			continue
		}
		dir := commandDir(ws, c.Dir)
		for _, d := range pathDirs {
			if d == "" {
				d = "." // an empty PATH entry is the current directory
			}
			add(dir, filepath.Join(d, c.Argv[0]))
		}
	}
	for _, r := range redirs {
		for _, d := range dirs {
			add(d, r)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return out, len(out) <= maxInputCandidates
}

// commandDir is the absolute directory a command runs in.
func commandDir(ws, dir string) string {
	switch {
	case dir == "":
		return ws
	case filepath.IsAbs(dir):
		return filepath.Clean(dir)
	}
	return filepath.Join(ws, dir)
}

// programName is the build-tool table's key for argv: the program's base
// name, and for python -m X the module's tool.
func programName(argv []string) string {
	name := filepath.Base(argv[0])
	if strings.HasPrefix(name, "python") && len(argv) > 2 && argv[1] == "-m" {
		if t, ok := pythonModules[argv[2]]; ok {
			return t
		}
	}
	if name == "gradlew" {
		return "gradle"
	}
	return name
}

// fromLine returns what the parsed commands do not keep of a command
// line: the literal targets of its input redirections (< file, <> file:
// `sh < x.sh` runs x.sh) and the literal values it assigns to PATH
// (export PATH=…, PATH=…;).
func fromLine(line string) (redirs, paths []string) {
	if !strings.Contains(line, "<") && !strings.Contains(line, "PATH=") {
		return nil, nil // spare the parse
	}
	f, err := syntax.NewParser().Parse(strings.NewReader(line), "")
	if err != nil {
		return nil, nil // a line that does not parse runs nothing statically known
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.Redirect:
			if (n.Op == syntax.RdrIn || n.Op == syntax.RdrInOut) && n.Word != nil {
				if lit := n.Word.Lit(); lit != "" {
					redirs = append(redirs, lit)
				}
			}
		case *syntax.Assign:
			if n.Name != nil && n.Name.Value == "PATH" && n.Value != nil {
				if lit := n.Value.Lit(); lit != "" {
					paths = append(paths, lit)
				}
			}
		}
		return true
	})
	return redirs, paths
}

// Source reads files as the operation's command would see them: the
// session's merged change-set view. Resolve canonicalizes an absolute
// path (symlinks followed through the same view) and reports whether it
// is inside the workspace; Open opens a regular file without following a
// final symlink, failing with fs.ErrNotExist when none is there.
type Source interface {
	Resolve(abs string) (canonical string, inWorkspace bool, err error)
	Open(abs string) (io.ReadCloser, error)
}

// ErrNotRegular is what a Source's Open returns for a directory or a
// special file: not an input.
var ErrNotRegular = errors.New("not a regular file")

// BindInputs fills op.Inputs with the content digests of the regular
// files among InputPaths(op), read through src, or sets op.Unbound when
// they cannot all be read within the limits. A file that does not exist
// is not an input, so creating it later changes the operation too.
func BindInputs(op *operation.Operation, src Source) {
	op.Inputs, op.Unbound = nil, ""
	paths, ok := InputPaths(op)
	if !ok {
		op.Unbound = fmt.Sprintf("the command names more than %d paths in the workspace", maxInputCandidates)
		return
	}
	var total int64
	var buf []byte
	seen := map[string]bool{}
	for _, p := range paths {
		c, inWS, err := src.Resolve(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			op.Unbound = fmt.Sprintf("%s: %v", p, err)
			return
		}
		if !inWS || seen[c] {
			continue
		}
		seen[c] = true
		r, err := src.Open(c)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrNotRegular) {
				continue
			}
			op.Unbound = fmt.Sprintf("%s: %v", c, err)
			return
		}
		if len(op.Inputs) == maxInputs {
			r.Close()
			op.Inputs, op.Unbound = nil, fmt.Sprintf("the command names more than %d files of the workspace", maxInputs)
			return
		}
		if buf == nil {
			buf = make([]byte, 8<<10)
		}
		h := sha256.New()
		n, err := io.CopyBuffer(h, io.LimitReader(r, maxInputBytes-total+1), buf)
		r.Close()
		total += n
		if err != nil {
			op.Inputs, op.Unbound = nil, fmt.Sprintf("%s: %v", c, err)
			return
		}
		if total > maxInputBytes {
			op.Inputs, op.Unbound = nil, fmt.Sprintf("the files the command names hold more than %d MiB", maxInputBytes>>20)
			return
		}
		op.Inputs = append(op.Inputs, operation.Input{Path: c, SHA256: hex.EncodeToString(h.Sum(nil))})
	}
	slices.SortFunc(op.Inputs, func(a, b operation.Input) int { return strings.Compare(a.Path, b.Path) })
}
