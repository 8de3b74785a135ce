package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestApplyCaches(t *testing.T) {
	tpl, err := TemplateByName("code-executor")
	if err != nil {
		t.Fatal(err)
	}
	root := CacheRoot(t.TempDir(), "/home/u/repo")
	spec := Spec{Argv: []string{"go", "test"}, Env: []string{"PATH=/usr/bin", "GOCACHE=/tmp/go-cache", "GOFLAGS=-mod=mod", "GOCACHE=/tmp/again"}}
	if err := tpl.ApplyCaches(&spec, root, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range ToolchainCaches {
		fi, err := os.Stat(filepath.Join(root, c.Name))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("cache dir %s: %v %v", c.Name, fi, err)
		}
		if !slices.Contains(spec.Mounts, Mount{Source: filepath.Join(root, c.Name), Target: c.Target, Writable: true}) {
			t.Errorf("no writable mount for %s in %+v", c.Name, spec.Mounts)
		}
	}
	count := map[string][]string{}
	for _, e := range spec.Env {
		k, v, _ := strings.Cut(e, "=")
		count[k] = append(count[k], v)
	}
	want := map[string]string{"GOCACHE": "/var/cache/fluffy/go-build", "GOMODCACHE": "/var/cache/fluffy/go-mod", "GOPROXY": "off", "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false -modcacherw", "PATH": "/usr/bin"}
	for k, v := range want {
		if len(count[k]) != 1 || count[k][0] != v {
			t.Errorf("%s = %q, want exactly %q", k, count[k], v)
		}
	}
	if err := spec.Validate(); err != nil {
		t.Errorf("spec with caches does not validate: %v", err)
	}
	// A template without caches leaves the spec alone; a relative root is refused.
	none, _ := TemplateByName("policy-sandbox")
	s2 := Spec{Argv: []string{"x"}}
	if err := none.ApplyCaches(&s2, "relative", nil); err != nil || len(s2.Mounts) != 0 {
		t.Errorf("policy-sandbox: %v %+v", err, s2.Mounts)
	}
	if err := tpl.ApplyCaches(&s2, "relative", nil); err == nil {
		t.Error("a relative cache root was accepted")
	}
}

// The person's module cache is mounted read-only (never writable) and
// becomes the offline file proxy; fluffy's own module cache stays the
// writable GOMODCACHE. Without the person's cache, GOPROXY stays off.
func TestApplyCachesUserGoModCache(t *testing.T) {
	tpl, err := TemplateByName("code-executor")
	if err != nil {
		t.Fatal(err)
	}
	root := CacheRoot(t.TempDir(), "/home/u/repo")
	spec := Spec{Argv: []string{"go", "test"}, Env: []string{"GOPROXY=off"}}
	if err := tpl.ApplyCaches(&spec, root, UserCaches{UserGoModCache: "/home/u/go/pkg/mod"}); err != nil {
		t.Fatal(err)
	}
	var seed []Mount
	for _, m := range spec.Mounts {
		if m.Source == "/home/u/go/pkg/mod" {
			seed = append(seed, m)
		}
	}
	if len(seed) != 1 || seed[0].Writable || seed[0].Target != userGoModTarget {
		t.Errorf("the person's cache is mounted as %+v, want once, read-only, at %s", seed, userGoModTarget)
	}
	env := map[string][]string{}
	for _, e := range spec.Env {
		k, v, _ := strings.Cut(e, "=")
		env[k] = append(env[k], v)
	}
	for k, v := range map[string]string{"GOPROXY": "file://" + userGoModTarget + "/cache/download", "GOSUMDB": "off", "GOMODCACHE": "/var/cache/fluffy/go-mod"} {
		if len(env[k]) != 1 || env[k][0] != v {
			t.Errorf("%s = %q, want exactly %q", k, env[k], v)
		}
	}
	if strings.Contains(strings.Join(env["GOFLAGS"], " "), "-mod=mod") {
		t.Errorf("GOFLAGS %q lets a build rewrite go.mod and go.sum", env["GOFLAGS"])
	}
	if err := spec.Validate(); err != nil {
		t.Errorf("spec with the person's cache does not validate: %v", err)
	}
	if err := tpl.ApplyCaches(&Spec{}, root, UserCaches{UserGoModCache: "relative/mod"}); err == nil {
		t.Error("a relative user cache was accepted")
	}
}

func TestCacheRootPerWorkspace(t *testing.T) {
	a, b := CacheRoot("/c", "/w/one"), CacheRoot("/c", "/w/two")
	if a == b || filepath.Dir(a) != "/c" {
		t.Errorf("cache roots %q and %q", a, b)
	}
	if CacheRoot("/c", "/w/one/") != a {
		t.Error("the same workspace spelt differently has another cache")
	}
}

// The person's cargo registry lends only its index and downloaded
// crates, each bound read-only inside fluffy's writable CARGO_HOME (the
// mount points made there first); cargo's locks and extracted sources
// stay fluffy's. A subdirectory that links out of the person's registry
// is not bound.
func TestApplyCachesUserCargoRegistry(t *testing.T) {
	tpl, err := TemplateByName("code-executor")
	if err != nil {
		t.Fatal(err)
	}
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := filepath.Join(tmp, "person", "registry")
	for _, d := range []string{"index", "cache", "src"} {
		if err := os.MkdirAll(filepath.Join(reg, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root := CacheRoot(filepath.Join(tmp, "fluffy"), "/home/u/repo")
	spec := Spec{Argv: []string{"cargo", "test"}, Env: []string{"CARGO_HOME=/tmp/cargo"}}
	if err := tpl.ApplyCaches(&spec, root, UserCaches{UserCargoRegistry: reg}); err != nil {
		t.Fatal(err)
	}
	var seed []Mount
	for _, m := range spec.Mounts {
		if strings.HasPrefix(m.Source, reg) {
			seed = append(seed, m)
		}
	}
	want := []Mount{{Source: reg + "/index", Target: "/var/cache/fluffy/cargo/registry/index"}, {Source: reg + "/cache", Target: "/var/cache/fluffy/cargo/registry/cache"}}
	if !slices.Equal(seed, want) {
		t.Errorf("the person's registry is mounted as %+v, want %+v", seed, want)
	}
	own := slices.Index(spec.Mounts, Mount{Source: filepath.Join(root, "cargo"), Target: "/var/cache/fluffy/cargo", Writable: true})
	if own < 0 || own > slices.Index(spec.Mounts, want[0]) {
		t.Errorf("fluffy's CARGO_HOME is not mounted writable before the person's registry: %+v", spec.Mounts)
	}
	for _, d := range []string{"index", "cache"} {
		if fi, err := os.Stat(filepath.Join(root, "cargo", "registry", d)); err != nil || !fi.IsDir() {
			t.Errorf("no mount point for registry/%s: %v", d, err)
		}
	}
	env := map[string][]string{}
	for _, e := range spec.Env {
		k, v, _ := strings.Cut(e, "=")
		env[k] = append(env[k], v)
	}
	for k, v := range map[string]string{"CARGO_HOME": "/var/cache/fluffy/cargo", "CARGO_NET_OFFLINE": "true", "CARGO_CACHE_AUTO_CLEAN_FREQUENCY": "never"} {
		if len(env[k]) != 1 || env[k][0] != v {
			t.Errorf("%s = %q, want exactly %q", k, env[k], v)
		}
	}
	if err := spec.Validate(); err != nil {
		t.Errorf("spec with the person's registry does not validate: %v", err)
	}

	// index links out of the registry: only cache is bound.
	if err := os.RemoveAll(filepath.Join(reg, "index")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(tmp, filepath.Join(reg, "index")); err != nil {
		t.Fatal(err)
	}
	spec = Spec{Argv: []string{"cargo", "test"}}
	if err := tpl.ApplyCaches(&spec, root, UserCaches{UserCargoRegistry: reg}); err != nil {
		t.Fatal(err)
	}
	for _, m := range spec.Mounts {
		if m.Source == tmp || m.Target == want[0].Target {
			t.Errorf("a linked-out registry/index is mounted: %+v", m)
		}
	}
}

// The person's wheelhouse is bound read-only and named to pip as its
// find-links; pip's own cache is fluffy's and the index stays off.
func TestApplyCachesUserPipWheels(t *testing.T) {
	tpl, err := TemplateByName("code-executor")
	if err != nil {
		t.Fatal(err)
	}
	root := CacheRoot(t.TempDir(), "/home/u/repo")
	spec := Spec{Argv: []string{"pip", "install", "x"}}
	if err := tpl.ApplyCaches(&spec, root, UserCaches{UserPipWheels: "/home/u/wheels"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(spec.Mounts, Mount{Source: "/home/u/wheels", Target: userPipWheelsTarget}) {
		t.Errorf("the wheelhouse is not mounted read-only: %+v", spec.Mounts)
	}
	for _, kv := range []string{"PIP_FIND_LINKS=" + userPipWheelsTarget, "PIP_NO_INDEX=1", "PIP_CACHE_DIR=/var/cache/fluffy/pip"} {
		if !slices.Contains(spec.Env, kv) {
			t.Errorf("env lacks %s: %q", kv, spec.Env)
		}
	}
	spec = Spec{Argv: []string{"pip", "install", "x"}}
	if err := tpl.ApplyCaches(&spec, root, nil); err != nil {
		t.Fatal(err)
	}
	for _, e := range spec.Env {
		if strings.HasPrefix(e, "PIP_FIND_LINKS=") {
			t.Errorf("without a wheelhouse, %s", e)
		}
	}
}

// Of the person's npm cache the content is bound read-only inside
// fluffy's writable npm cache; the index, which npm rewrites as it reads,
// is copied there once (files and directories only) and not again.
func TestApplyCachesUserNpmCache(t *testing.T) {
	tpl, err := TemplateByName("code-executor")
	if err != nil {
		t.Fatal(err)
	}
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cacache := filepath.Join(tmp, "person", ".npm", "_cacache")
	bucket := filepath.Join(cacache, "index-v5", "ab", "cd", "bucket")
	if err := os.MkdirAll(filepath.Join(cacache, "content-v2", "sha512"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bucket, []byte("entry one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(cacache, "index-v5", "link")); err != nil {
		t.Fatal(err)
	}
	root := CacheRoot(filepath.Join(tmp, "fluffy"), "/home/u/repo")
	spec := Spec{Argv: []string{"npm", "ci"}}
	if err := tpl.ApplyCaches(&spec, root, UserCaches{UserNpmCache: cacache}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(spec.Mounts, Mount{Source: cacache + "/content-v2", Target: "/var/cache/fluffy/npm/_cacache/content-v2"}) {
		t.Errorf("the person's npm content is not bound read-only: %+v", spec.Mounts)
	}
	for _, m := range spec.Mounts {
		if strings.Contains(m.Source, "index-v5") {
			t.Errorf("the index is bound, not copied: %+v", m)
		}
	}
	copied := filepath.Join(root, "npm", "_cacache", "index-v5", "ab", "cd", "bucket")
	if b, err := os.ReadFile(copied); err != nil || string(b) != "entry one\n" {
		t.Errorf("index copy: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "npm", "_cacache", "index-v5", "link")); err == nil {
		t.Error("a symbolic link in the index was copied")
	}
	if fi, err := os.Stat(filepath.Join(root, "npm", "_cacache", "content-v2")); err != nil || !fi.IsDir() {
		t.Errorf("no mount point for content-v2: %v", err)
	}
	if !slices.Contains(spec.Env, "npm_config_offline=true") || !slices.Contains(spec.Env, "npm_config_cache=/var/cache/fluffy/npm") {
		t.Errorf("env %q", spec.Env)
	}
	// Once copied, fluffy's index is npm's to write: a later spec keeps it.
	if err := os.WriteFile(copied, []byte("entry one\nfluffy's own\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tpl.ApplyCaches(&Spec{}, root, UserCaches{UserNpmCache: cacache}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(copied); string(b) != "entry one\nfluffy's own\n" {
		t.Errorf("the index was copied again: %q", b)
	}
	if b, _ := os.ReadFile(bucket); string(b) != "entry one\n" {
		t.Errorf("the person's index changed: %q", b)
	}
}
