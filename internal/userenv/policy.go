package userenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// PolicyFiles returns the files that define policy for this invocation.
func (e *Env) PolicyFiles() policy.Files {
	f := policy.Files{User: filepath.Join(filepath.Dir(e.UserFile()), "policy.yaml")}
	if root := config.ProjectRoot(e.Cwd); root != "" {
		f.Project = filepath.Join(root, ".fluffy", "policy.yaml")
	}
	return f
}

// PolicyOptions builds the engine options from the configuration: the
// default effect, what the built-in rules protect and the rules of the
// enabled package registries (net.registries).
func (e *Env) PolicyOptions() (policy.Options, error) {
	l, err := e.Config()
	if err != nil {
		return policy.Options{}, err
	}
	def, err := policy.ParseEffect(l.Config.Policy.Default)
	if err != nil {
		return policy.Options{}, fmt.Errorf("%w: policy.default: %v", ErrUsage, err)
	}
	home, _ := e.Getenv("HOME")
	prot, err := e.Protected(e.Workspace())
	if err != nil {
		return policy.Options{}, err
	}
	regs, err := e.Registries()
	if err != nil {
		return policy.Options{}, err
	}
	return policy.Options{Default: def, Protected: prot, Home: home, HostRules: registryRules(regs)}, nil
}

// Protected lists fluffy's own files for a workspace: what the policy's
// built-in rules keep the agent from writing (and the keys from reading),
// and what no apply of a change set over ws ever writes (ownFiles). One
// list, so the gate and the apply cannot disagree.
func (e *Env) Protected(ws string) (policy.Protected, error) {
	l, err := e.Config()
	if err != nil {
		return policy.Protected{}, err
	}
	// The project files are the workspace's own (the nearest .fluffy or
	// .git at or above ws), not those of the directory this process
	// happens to run in: a kernel serves many workspaces, and the
	// directory it was started in says nothing about theirs.
	files := e.PolicyFiles()
	if ws != "" {
		files = e.WithCwd(ws).PolicyFiles()
	}
	dd, err := datadir.New(l.Config.Home)
	if err != nil {
		return policy.Protected{}, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	var prot policy.Protected
	add := func(list *[]string, p string) {
		if p == "" || !filepath.IsAbs(p) {
			return
		}
		*list = append(*list, filepath.Clean(p))
		if c, err := policy.Canonicalize(p, "/"); err == nil && c != p {
			*list = append(*list, c)
		}
	}
	add(&prot.Paths, dd.Root)
	add(&prot.Paths, filepath.Dir(files.User))
	add(&prot.Paths, e.UserFile())
	// Installed skills change only through a reviewed re-pin
	// (docs/skills.md); their folder is the default
	// configuration directory's even when --config names another file.
	add(&prot.Paths, e.UserSkillsDir())
	if files.Project != "" {
		add(&prot.Paths, filepath.Dir(files.Project))
	}
	// The workspace's .fluffy directory is protected even before it
	// exists: in a directory with neither .git nor .fluffy (no project
	// root yet) the agent could otherwise create .fluffy/policy.yaml in
	// its change set and have it applied.
	add(&prot.Paths, filepath.Join(ws, ".fluffy"))
	// fluffy's own binaries: this one and those installed beside it.
	add(&prot.Paths, e.Self)
	for _, name := range []string{"fluffy", "fluffy-core", sandbox.InitBinaryName} {
		add(&prot.Paths, filepath.Join(filepath.Dir(e.Self), name))
	}
	add(&prot.Secret, dd.Path(datadir.Keys))
	return prot, nil
}

// OwnFiles returns the predicate changeset.ChangeSet.Protect takes for a
// change set over ws: the policy's protected paths.
func (e *Env) OwnFiles(ws string) (func(abs string) bool, error) {
	prot, err := e.Protected(ws)
	if err != nil {
		return nil, fmt.Errorf("cannot tell fluffy's own files from the rest, so nothing is applied: %w", err)
	}
	return prot.Covers, nil
}

// KernelOwnFiles is ownFiles for the kernel. The configuration was loaded
// when the kernel started, so it does not fail there; if it ever does,
// every path counts as fluffy's and applies are refused (fail closed).
func (e *Env) KernelOwnFiles(ws string) func(abs string) bool {
	own, err := e.OwnFiles(ws)
	if err != nil {
		return func(string) bool { return true }
	}
	return own
}

// PolicyEngine builds the effective policy engine validating toks
// (nil: presented tokens are ignored).
func (e *Env) PolicyEngine(toks *policy.Tokens) (*policy.Engine, policy.Files, error) {
	opts, err := e.PolicyOptions()
	if err != nil {
		return nil, policy.Files{}, err
	}
	opts.Tokens = toks
	files := e.PolicyFiles()
	eng, err := policy.Load(opts, files)
	if err != nil {
		return nil, files, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return eng, files, nil
}

// SandboxMasks returns the read-only mounts that hide, from a sandbox over
// the workspace ws, each of fluffy's own files (protected: the data
// directory with its keys, configuration, policy, binaries) that lies
// inside ws: an empty directory over a directory, an empty file over a
// file. A workspace that is the home directory holds the data directory;
// a repository built with 'make build' holds the binaries. The empty
// sources live in the data directory (never in a shared /tmp another
// user could fill). Paths that do not exist are not masked: a sandbox
// may create them in its change set, and no apply writes them.
func (e *Env) SandboxMasks(ws string) ([]sandbox.Mount, error) {
	if ws == "" {
		return nil, nil
	}
	cws, err := filepath.EvalSymlinks(ws)
	if err != nil {
		return nil, fmt.Errorf("hide fluffy's files from the sandbox: %w", err)
	}
	prot, err := e.Protected(cws)
	if err != nil {
		return nil, err
	}
	var inside []string
	for _, p := range append(append([]string(nil), prot.Paths...), prot.Secret...) {
		if p == cws || strings.HasPrefix(cws, p+"/") {
			// A sandbox over fluffy's own directory would see all of it.
			return nil, fmt.Errorf("%w: the workspace %s is inside fluffy's own files (%s); run in another directory", ErrUsage, ws, p)
		}
		if strings.HasPrefix(p, cws+"/") {
			inside = append(inside, p)
		}
	}
	if len(inside) == 0 {
		return nil, nil
	}
	slices.Sort(inside)
	var masks []sandbox.Mount
	var dir, file string
	covered := func(p string) bool {
		for _, m := range masks {
			if strings.HasPrefix(p, m.Target+"/") || p == m.Target {
				return true
			}
		}
		return false
	}
	for _, p := range inside {
		if covered(p) {
			continue // below a masked directory already
		}
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) || err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			// Absent, or a symlink (its target, when inside, is listed
			// in its canonical form).
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("hide fluffy's files from the sandbox: %w", err)
		}
		if dir == "" {
			if dir, file, err = e.maskSources(); err != nil {
				return nil, err
			}
		}
		src := file
		if fi.IsDir() {
			src = dir
		}
		masks = append(masks, sandbox.Mount{Source: src, Target: p})
	}
	return masks, nil
}

// maskSources returns an empty directory and an empty file in the data
// directory, read-only, created if missing.
func (e *Env) maskSources() (string, string, error) {
	l, err := e.Config()
	if err != nil {
		return "", "", err
	}
	dd, err := datadir.New(l.Config.Home)
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if err := dd.Ensure(); err != nil {
		return "", "", err
	}
	root := dd.Path("mask")
	dir, file := filepath.Join(root, "empty"), filepath.Join(root, "empty-file")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("hide fluffy's files from the sandbox: %w", err)
	}
	if err := os.WriteFile(file, nil, 0o400); err != nil && !errors.Is(err, fs.ErrPermission) {
		return "", "", fmt.Errorf("hide fluffy's files from the sandbox: %w", err)
	}
	// Empty, whatever happened before: a mask that shows something
	// hides nothing.
	for _, p := range []string{dir, file} {
		fi, err := os.Lstat(p)
		if err != nil {
			return "", "", fmt.Errorf("hide fluffy's files from the sandbox: %w", err)
		}
		if fi.IsDir() {
			names, err := os.ReadDir(p)
			if err != nil || len(names) > 0 {
				return "", "", fmt.Errorf("hide fluffy's files from the sandbox: %s is not an empty directory; remove it", p)
			}
		} else if !fi.Mode().IsRegular() || fi.Size() != 0 {
			return "", "", fmt.Errorf("hide fluffy's files from the sandbox: %s is not an empty file; remove it", p)
		}
	}
	return dir, file, nil
}
