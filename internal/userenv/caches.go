package userenv

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// UserCaches finds the person's toolchain caches that a sandbox over ws
// may read (read-only; see sandbox.Template.ApplyCaches):
//   - Go's module cache as `go env GOMODCACHE` resolves it — $GOMODCACHE,
//     else the first entry of $GOPATH plus /pkg/mod, else
//     $HOME/go/pkg/mod — when it holds a download cache (cache/download,
//     what the sandbox's file proxy serves);
//   - cargo's registry cache, $CARGO_HOME/registry (else
//     $HOME/.cargo/registry), when it holds an index;
//   - pip's wheelhouse, the first absolute local directory in
//     $PIP_FIND_LINKS (pip's own variable; a URL is not a cache);
//   - npm's content cache, _cacache in $npm_config_cache (or
//     $NPM_CONFIG_CACHE; else $HOME/.npm), when it holds an index.
//
// A directory is left out when mounting it would show more than a cache:
// the root, the home directory or one of its ancestors, or a directory
// holding or inside any of fluffy's own files (keys, configuration,
// policy, binaries).
func (e *Env) UserCaches(ws string) sandbox.UserCaches {
	caches := sandbox.UserCaches{}
	if d := e.goModCache(); d != "" && e.cacheSafe(d, ws) {
		if fi, err := os.Stat(filepath.Join(d, "cache", "download")); err == nil && fi.IsDir() {
			caches[sandbox.UserGoModCache] = d
		}
	}
	if d := e.cargoRegistry(); d != "" && e.cacheSafe(d, ws) {
		if fi, err := os.Stat(filepath.Join(d, "index")); err == nil && fi.IsDir() {
			caches[sandbox.UserCargoRegistry] = d
		}
	}
	if d := e.pipWheelhouse(); d != "" && e.cacheSafe(d, ws) {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			caches[sandbox.UserPipWheels] = d
		}
	}
	if d := e.npmCache(); d != "" && e.cacheSafe(d, ws) {
		if fi, err := os.Stat(filepath.Join(d, "index-v5")); err == nil && fi.IsDir() {
			caches[sandbox.UserNpmCache] = d
		}
	}
	return caches
}

// npmCache is the _cacache directory of the person's npm cache, or "".
func (e *Env) npmCache() string {
	for _, k := range []string{"npm_config_cache", "NPM_CONFIG_CACHE"} {
		if d, ok := e.Getenv(k); ok && d != "" {
			return absOrEmpty(filepath.Join(d, "_cacache"))
		}
	}
	if h, ok := e.Getenv("HOME"); ok && h != "" {
		return absOrEmpty(filepath.Join(h, ".npm", "_cacache"))
	}
	return ""
}

// cargoRegistry is where the person's cargo keeps its registry cache, or
// "".
func (e *Env) cargoRegistry() string {
	if d, ok := e.Getenv("CARGO_HOME"); ok && d != "" {
		return absOrEmpty(filepath.Join(d, "registry"))
	}
	if h, ok := e.Getenv("HOME"); ok && h != "" {
		return absOrEmpty(filepath.Join(h, ".cargo", "registry"))
	}
	return ""
}

// pipWheelhouse is the first local directory of $PIP_FIND_LINKS (pip
// splits the variable at spaces), or "".
func (e *Env) pipWheelhouse() string {
	v, _ := e.Getenv("PIP_FIND_LINKS")
	for _, f := range strings.Fields(v) {
		f = strings.TrimPrefix(f, "file://")
		if filepath.IsAbs(f) {
			return absOrEmpty(f)
		}
	}
	return ""
}

// goModCache is where the person's go command keeps modules, or "".
func (e *Env) goModCache() string {
	if d, ok := e.Getenv("GOMODCACHE"); ok && d != "" {
		return absOrEmpty(d)
	}
	if p, ok := e.Getenv("GOPATH"); ok && p != "" {
		if list := filepath.SplitList(p); len(list) > 0 && list[0] != "" {
			return absOrEmpty(filepath.Join(list[0], "pkg", "mod"))
		}
	}
	if h, ok := e.Getenv("HOME"); ok && h != "" {
		return absOrEmpty(filepath.Join(h, "go", "pkg", "mod"))
	}
	return ""
}

// absOrEmpty is the canonical form of an absolute path (symlinks
// resolved, so the checks below see what the mount shows), or "" when p
// is relative (the go command ignores a relative GOMODCACHE too) or does
// not exist.
func absOrEmpty(p string) string {
	if !filepath.IsAbs(p) {
		return ""
	}
	c, err := filepath.EvalSymlinks(p)
	if err != nil {
		return ""
	}
	return c
}

// cacheSafe reports whether d may be shown to a sandbox over ws: it is
// not the root, not the home directory nor above it, and neither holds
// nor lies inside fluffy's own files.
func (e *Env) cacheSafe(d, ws string) bool {
	within := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	if d == "/" {
		return false
	}
	if h, ok := e.Getenv("HOME"); ok && filepath.IsAbs(h) {
		if ch, err := filepath.EvalSymlinks(h); err == nil {
			h = ch
		}
		if within(filepath.Clean(h), d) {
			return false
		}
	}
	prot, err := e.Protected(ws)
	if err != nil {
		return false
	}
	for _, p := range append(append([]string(nil), prot.Paths...), prot.Secret...) {
		if within(p, d) || within(d, p) {
			return false
		}
	}
	return true
}

// ToolchainMounts are read-only mounts that make the toolchains on the
// person's PATH visible in a sandbox over the workspace ws, at the same
// paths (the sandbox's PATH is the person's: sandbox.BaseEnv). A Go
// installation's bin directory brings its whole GOROOT (the go command
// needs its tools and standard library beside it), a Rust toolchain's its
// whole sysroot (rustc loads its driver from ../lib and the standard
// library from lib/rustlib). Other PATH directories
// are mounted when they lie outside the home directory and are not
// version-manager shims: what lives on PATH under the home directory
// (rustup's proxies, pip's --user scripts, pyenv's or rbenv's shims) is
// mostly launchers that need more of the home directory than the PATH
// names, and a broken launcher would shadow the system's working tool.
// Never mounted: a relative or missing directory, one below the system
// directories every sandbox shows already (sandbox.SystemDirs), inside
// the workspace (seen through it), the root, the home directory, an
// ancestor of either or of the workspace, or one holding or inside any of
// fluffy's own files. Without a workspace there are none: only a
// workspace's sandbox gets the idmapped mounts that let root's sandboxes
// (another uid) reach directories under 0700 parents.
func (e *Env) ToolchainMounts(ws string) []sandbox.Mount {
	if ws == "" {
		return nil
	}
	path, _ := e.Getenv("PATH")
	home, _ := e.Getenv("HOME")
	if ch, err := filepath.EvalSymlinks(home); err == nil {
		home = ch
	}
	var mounts []sandbox.Mount
	seen := map[string]bool{}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		target := filepath.Clean(dir)
		src := absOrEmpty(target)
		if src == "" {
			continue
		}
		if root := filepath.Dir(src); filepath.Base(src) == "bin" && (isGoRoot(root) || isRustSysroot(root)) {
			src, target = root, filepath.Dir(target)
		} else if filepath.Base(src) == "shims" || filepath.IsAbs(home) && (underAny(src, []string{home}) || underAny(target, []string{home})) {
			continue
		}
		if seen[target] || underAny(target, sandbox.SystemDirs()) || underAny(src, sandbox.SystemDirs()) || !e.toolchainSafe(src, ws) {
			continue
		}
		seen[target] = true
		mounts = append(mounts, sandbox.Mount{Source: src, Target: target})
	}
	return mounts
}

// isGoRoot reports whether dir looks like a Go installation.
func isGoRoot(dir string) bool {
	for _, p := range []string{"pkg/tool", "src/runtime"} {
		if fi, err := os.Stat(filepath.Join(dir, p)); err != nil || !fi.IsDir() {
			return false
		}
	}
	return true
}

// isRustSysroot reports whether dir looks like a Rust toolchain
// (rustc --print sysroot).
func isRustSysroot(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "lib", "rustlib"))
	return err == nil && fi.IsDir()
}

// underAny reports whether p is one of dirs or below one.
func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// toolchainSafe reports whether the toolchain directory d may be shown
// to a sandbox over ws: cacheSafe, not inside ws (the sandbox sees it
// through the workspace) and not above it (that would show the
// workspace's siblings).
func (e *Env) toolchainSafe(d, ws string) bool {
	if ws != "" {
		if cws, err := filepath.EvalSymlinks(ws); err == nil {
			ws = cws
		}
		if underAny(d, []string{ws}) || underAny(ws, []string{d}) {
			return false
		}
	}
	return e.cacheSafe(d, ws)
}
