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
	for _, c := range GoCaches {
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
