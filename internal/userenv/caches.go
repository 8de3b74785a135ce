package userenv

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// UserCaches finds the person's toolchain caches that a sandbox over ws
// may read (read-only; see sandbox.Template.ApplyCaches): Go's module
// cache as `go env GOMODCACHE` resolves it — $GOMODCACHE, else the first
// entry of $GOPATH plus /pkg/mod, else $HOME/go/pkg/mod — when it holds a
// download cache (cache/download, what the sandbox's file proxy serves).
//
// A directory is left out when mounting it would show more than a cache:
// the root, the home directory or one of its ancestors, or a directory
// holding any of fluffy's own files (keys, configuration, policy).
func (e *Env) UserCaches(ws string) sandbox.UserCaches {
	caches := sandbox.UserCaches{}
	if d := e.goModCache(); d != "" && e.cacheSafe(d, ws) {
		if fi, err := os.Stat(filepath.Join(d, "cache", "download")); err == nil && fi.IsDir() {
			caches[sandbox.UserGoModCache] = d
		}
	}
	return caches
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
// not the root, not the home directory nor above it, and holds none of
// fluffy's own files.
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
		if within(p, d) {
			return false
		}
	}
	return true
}
