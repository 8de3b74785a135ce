package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Template is a named way to run things: which seccomp profile, which
// network, whether the workspace is mounted. Callers apply a template to a
// Spec and then fill in the command, limits and paths.
type Template struct {
	Name        string
	Description string
	Seccomp     string
	Network     Network
	// Workspace says whether the workspace is mounted (as an overlay over
	// the change set). Without it the sandbox sees no project files.
	Workspace bool
	// Pending names what the template is still waiting for, when part of
	// its intent needs a facility that does not exist yet.
	Pending string
	// Caches are persistent build caches mounted read-write, some filled
	// from the person's own caches mounted read-only (see ApplyCaches).
	Caches []Cache
}

// Cache is a build cache a template keeps between executions: a directory
// of fluffy's own (never the user's cache) mounted read-write at Target,
// with Env pointing the tool at it.
type Cache struct {
	Name   string   // directory name under the cache root
	Target string   // absolute path inside the sandbox
	Env    []string // "KEY=value" set (replacing any earlier value) when mounted
	// Seed, when set, is the person's own cache this one is filled from
	// (see UserCaches): mounted read-only, never written.
	Seed *Seed
}

// Seed is how a sandbox reads one of the person's caches: the host
// directory UserCaches names for Kind is bound read-only at Target, and
// Env (replacing earlier values) points the tool at it. A cache the
// person does not have leaves the sandbox offline with fluffy's cache
// alone.
//
// With Dirs, only those subdirectories of the person's directory are
// bound, each at Target/dir (one missing is skipped): the tool reads them
// in place while the rest of its cache, which it must write (locks,
// extracted sources), is fluffy's. A Target inside the cache's own
// Target nests the read-only binds in fluffy's writable cache.
//
// Copy names subdirectories the tool rewrites whenever it reads them, so
// that no read-only bind can serve: they are copied (regular files and
// directories only) into fluffy's cache at the same place, once, when
// fluffy's cache has none. Only a nested seed copies.
type Seed struct {
	Kind   string   // key of UserCaches, e.g. UserGoModCache
	Target string   // absolute path inside the sandbox
	Dirs   []string // subdirectories bound instead of the whole directory
	Copy   []string // subdirectories copied into fluffy's cache
	Env    []string // "KEY=value" set when the seed is mounted
}

// UserCaches maps a kind of cache (UserGoModCache) to the person's host
// directory of that kind; userenv finds them.
type UserCaches map[string]string

// UserGoModCache is the kind of the person's Go module cache (go env
// GOMODCACHE).
const UserGoModCache = "go-mod"

// userGoModTarget is where the person's Go module cache appears, read-only.
const userGoModTarget = "/var/cache/fluffy/user/go-mod"

// UserCargoRegistry is the kind of the person's cargo registry cache
// ($CARGO_HOME/registry).
const UserCargoRegistry = "cargo-registry"

// UserPipWheels is the kind of the person's wheelhouse: a directory of
// wheels pip installs from with --find-links ($PIP_FIND_LINKS).
const UserPipWheels = "pip-wheels"

// UserNpmCache is the kind of the person's npm content cache: _cacache
// in npm's cache directory ($npm_config_cache, else ~/.npm).
const UserNpmCache = "npm-cacache"

// userPipWheelsTarget is where the person's wheelhouse appears, read-only.
const userPipWheelsTarget = "/var/cache/fluffy/user/pip-wheels"

// GoCaches are the Go toolchain's build and module caches. Offline and
// pinned to the installed toolchain (GOTOOLCHAIN=local), so a build never
// reaches the network; -buildvcs=false because the sandbox has no VCS
// metadata worth stamping; -modcacherw so the person can delete fluffy's
// module cache (the sandbox can write all of it anyway: read-only module
// directories would protect nothing there). GOFLAGS sets no -mod: the go command's default
// (readonly, or vendor when vendor/ is consistent) refuses to rewrite
// go.mod or go.sum behind the person's back; 'go get' and 'go mod tidy'
// still can, and what they write lands in the change set.
//
// The module cache is fluffy's, per workspace, and writable; when the
// person has a module cache, it is mounted read-only and serves as a file
// proxy (GOPROXY=file://…/cache/download): Go copies what a build needs
// from it into fluffy's cache, never writing the person's. GOSUMDB=off
// because the checksum database is out of reach offline; it is safe only
// because the workspace's go.sum still verifies every module Go takes
// from the proxy (and without -mod=mod, a module missing from go.sum is
// an error rather than a silent addition). Without the person's cache
// GOPROXY stays off.
var GoCaches = []Cache{
	{Name: "go-build", Target: "/var/cache/fluffy/go-build", Env: []string{"GOCACHE=/var/cache/fluffy/go-build", "GOTOOLCHAIN=local", "GOPROXY=off", "GOFLAGS=-buildvcs=false -modcacherw"}},
	{Name: "go-mod", Target: "/var/cache/fluffy/go-mod", Env: []string{"GOMODCACHE=/var/cache/fluffy/go-mod"},
		Seed: &Seed{Kind: UserGoModCache, Target: userGoModTarget, Env: []string{"GOPROXY=file://" + userGoModTarget + "/cache/download", "GOSUMDB=off"}}},
}

// CargoCaches is cargo's home, fluffy's and writable per workspace
// (locks, the global cache tracker, extracted sources, `cargo install`),
// offline. When the person has a registry cache, its index and its
// downloaded .crate files are bound read-only at the places cargo looks
// for them (registry/index and registry/cache); cargo extracts what a
// build needs into fluffy's registry/src. Offline, cargo resolves only
// from the index entries the person's cargo stored, so a crate the person
// never fetched is an error, not a download. Automatic cache cleaning is
// off: cargo would otherwise try to delete the person's old .crate files.
// A rustup proxy on PATH (~/.cargo/bin) is not mounted (see
// userenv.ToolchainMounts): cargo runs in the sandbox when the toolchain's
// own bin directory, or a system cargo, is on PATH.
var CargoCaches = []Cache{
	{Name: "cargo", Target: "/var/cache/fluffy/cargo", Env: []string{"CARGO_HOME=/var/cache/fluffy/cargo", "CARGO_NET_OFFLINE=true", "CARGO_CACHE_AUTO_CLEAN_FREQUENCY=never"},
		Seed: &Seed{Kind: UserCargoRegistry, Target: "/var/cache/fluffy/cargo/registry", Dirs: []string{"index", "cache"}}},
}

// PipCaches is pip's cache, fluffy's and writable per workspace, with
// the index off (PIP_NO_INDEX). pip's own cache cannot serve an offline
// install: with no index pip never reads its HTTP cache, and its wheel
// cache holds only wheels it built from source distributions. What the
// person keeps for installing offline is a wheelhouse
// (`pip download`/`pip wheel -w`, named by PIP_FIND_LINKS): when there is
// one, it is bound read-only and pip finds packages in it.
var PipCaches = []Cache{
	{Name: "pip", Target: "/var/cache/fluffy/pip", Env: []string{"PIP_CACHE_DIR=/var/cache/fluffy/pip", "PIP_NO_INDEX=1", "PIP_DISABLE_PIP_VERSION_CHECK=1"},
		Seed: &Seed{Kind: UserPipWheels, Target: userPipWheelsTarget, Env: []string{"PIP_FIND_LINKS=" + userPipWheelsTarget}}},
}

// NpmCaches is npm's cache directory, fluffy's and writable per
// workspace, offline (npm_config_offline: a package not in the cache is
// an error, not a download). npm cannot read a read-only cache: every
// lookup compacts (rewrites) the index bucket it reads, and a failed
// rewrite reads as a miss. So of the person's _cacache only the content
// (content-v2, the tarballs and packuments by hash, which npm never
// rewrites) is bound read-only; the index (index-v5, small) is copied
// into fluffy's cache the first time a sandbox over the workspace runs,
// and what the person fetches after that is not seen until fluffy's copy
// is removed.
var NpmCaches = []Cache{
	{Name: "npm", Target: "/var/cache/fluffy/npm", Env: []string{"npm_config_cache=/var/cache/fluffy/npm", "npm_config_offline=true", "npm_config_update_notifier=false", "npm_config_audit=false", "npm_config_fund=false"},
		Seed: &Seed{Kind: UserNpmCache, Target: "/var/cache/fluffy/npm/_cacache", Dirs: []string{"content-v2"}, Copy: []string{"index-v5"}}},
}

// ToolchainCaches are the caches of every toolchain a runner uses: Go,
// cargo, pip, npm.
var ToolchainCaches = concatCaches(GoCaches, CargoCaches, PipCaches, NpmCaches)

func concatCaches(lists ...[]Cache) []Cache {
	var out []Cache
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// Templates returns the built-in templates.
func Templates() []Template {
	return []Template{
		{Name: "code-executor", Description: "the model's commands: standard seccomp, no network, workspace through the overlay, persistent toolchain caches (Go, cargo, pip, npm)", Seccomp: "standard", Network: NetworkNone, Workspace: true, Caches: ToolchainCaches},
		{Name: "integration-test", Description: "tests that need sockets: standard-net seccomp; network only to allow-listed hosts through the egress proxy; persistent toolchain caches (Go, cargo, pip, npm)", Seccomp: "standard-net", Network: NetworkProxy, Workspace: true, Caches: ToolchainCaches},
		{Name: "policy-sandbox", Description: "policy extensions: strict seccomp, no network, no workspace", Seccomp: "strict", Network: NetworkNone, Workspace: false},
		{Name: "skill", Description: "a skill's runs (skill.run): standard seccomp; no workspace overlay (the run mounts the skill's folder and the workspace read-only); network only to the hosts its manifest names, through the egress proxy", Seccomp: "standard", Network: NetworkNone, Workspace: false},
		{Name: "ai-provider", Description: "provider clients: strict seccomp (AF_UNIX only: they speak to the proxy socket); network to allow-listed hosts through the egress proxy", Seccomp: "strict", Network: NetworkProxy, Workspace: false},
	}
}

// TemplateByName returns a built-in template.
func TemplateByName(name string) (Template, error) {
	var names []string
	for _, t := range Templates() {
		if t.Name == name {
			return t, nil
		}
		names = append(names, t.Name)
	}
	return Template{}, fmt.Errorf("unknown sandbox template %q (have %s)", name, strings.Join(names, ", "))
}

// Apply sets the template's fields on spec. Without Workspace in the
// template, the spec's workspace and change set are cleared.
func (t Template) Apply(spec *Spec) {
	spec.Seccomp = t.Seccomp
	spec.Network = t.Network
	if !t.Workspace {
		spec.Workspace, spec.ChangeSet = "", ""
	}
}

// CacheRoot is the directory holding the caches of sandboxes run over
// workspace: base/<first 16 hex digits of SHA-256(workspace)>. Caches are
// keyed per workspace, so what one repository's sandboxed code writes to a
// build cache never reaches a build of another repository.
func CacheRoot(base, workspace string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(workspace)))
	return filepath.Join(base, hex.EncodeToString(sum[:8]))
}

// ApplyCaches creates the template's caches under root (0700) and adds
// them to spec as writable mounts, with their variables replacing any
// earlier value in spec.Env. A cache with a Seed the person has (in user)
// also gets the person's directory as a read-only mount. A template
// without caches changes nothing.
func (t Template) ApplyCaches(spec *Spec, root string, user UserCaches) error {
	if len(t.Caches) == 0 {
		return nil
	}
	if !filepath.IsAbs(root) {
		return fmt.Errorf("%w: cache root %q is not an absolute path", ErrInvalidSpec, root)
	}
	for _, c := range t.Caches {
		dir := filepath.Join(root, c.Name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("sandbox cache %s: %w", c.Name, err)
		}
		spec.Mounts = append(spec.Mounts, Mount{Source: dir, Target: c.Target, Writable: true})
		for _, e := range c.Env {
			spec.Env = setEnv(spec.Env, e)
		}
	}
	// Seeds after every cache's own variables: a seed's GOPROXY replaces
	// the offline default.
	for _, c := range t.Caches {
		if c.Seed == nil {
			continue
		}
		src := user[c.Seed.Kind]
		if src == "" {
			continue
		}
		if !filepath.IsAbs(src) {
			return fmt.Errorf("%w: the person's %s cache %q is not an absolute path", ErrInvalidSpec, c.Seed.Kind, src)
		}
		if err := c.seedMounts(spec, filepath.Join(root, c.Name), src); err != nil {
			return err
		}
		for _, e := range c.Seed.Env {
			spec.Env = setEnv(spec.Env, e)
		}
	}
	return nil
}

// seedMounts adds the read-only mounts of c's seed from the person's
// directory src; dir is c's own host directory. The mount points of a
// seed nested in c's Target are made in dir first, so every backend finds
// them.
func (c Cache) seedMounts(spec *Spec, dir, src string) error {
	if len(c.Seed.Dirs) == 0 {
		spec.Mounts = append(spec.Mounts, Mount{Source: src, Target: c.Seed.Target})
		return nil
	}
	rel, nested := strings.CutPrefix(c.Seed.Target, c.Target+"/")
	for _, d := range c.Seed.Dirs {
		sub, ok := within(src, filepath.Join(src, d))
		if !ok {
			continue
		}
		if nested {
			if err := os.MkdirAll(filepath.Join(dir, rel, d), 0o700); err != nil {
				return fmt.Errorf("sandbox cache %s: %w", c.Name, err)
			}
		}
		spec.Mounts = append(spec.Mounts, Mount{Source: sub, Target: filepath.Join(c.Seed.Target, d)})
	}
	if !nested {
		return nil
	}
	for _, d := range c.Seed.Copy {
		sub, ok := within(src, filepath.Join(src, d))
		if !ok {
			continue
		}
		if err := copyOnce(sub, filepath.Join(dir, rel, d)); err != nil {
			return fmt.Errorf("sandbox cache %s: %w", c.Name, err)
		}
	}
	return nil
}

// copyOnce copies the tree src to dst unless dst exists, through a
// temporary sibling renamed into place, so an interrupted copy is never
// taken for a whole one. Only directories and regular files are copied.
func copyOnce(src, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dst), "."+filepath.Base(dst)+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	err = filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(tmp, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o700)
		case d.Type().IsRegular():
			return copyFile(p, to)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		if _, serr := os.Lstat(dst); serr == nil {
			return nil // another sandbox's copy came first
		}
		return err
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// within resolves p's symbolic links and reports whether it is a
// directory inside dir: a subdirectory of the person's cache that links
// elsewhere would show more than the cache.
func within(dir, p string) (string, bool) {
	r, err := filepath.EvalSymlinks(p)
	if err != nil || !strings.HasPrefix(r, dir+"/") {
		return "", false
	}
	if fi, err := os.Stat(r); err != nil || !fi.IsDir() {
		return "", false
	}
	return r, true
}

// setEnv returns env with kv ("KEY=value") replacing every entry of the
// same key.
func setEnv(env []string, kv string) []string {
	k, _, _ := strings.Cut(kv, "=")
	out := env[:0:0]
	for _, e := range env {
		if ek, _, _ := strings.Cut(e, "="); ek != k {
			out = append(out, e)
		}
	}
	return append(out, kv)
}
