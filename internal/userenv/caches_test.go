package userenv

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// UserCaches finds Go's module cache where the go command does
// ($GOMODCACHE, else $GOPATH's first entry, else $HOME/go), only when it
// holds a download cache, and never a directory that would show the home
// directory or fluffy's own files to the sandbox.
func TestUserCachesGoModCache(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "home")
	mk := func(d string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(d, "cache", "download"), 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}
	explicit := mk(filepath.Join(root, "modcache"))
	gopath := mk(filepath.Join(root, "gopath", "pkg", "mod"))
	dflt := mk(filepath.Join(home, "go", "pkg", "mod"))
	empty := filepath.Join(root, "empty")
	if err := os.MkdirAll(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(root, "data")
	mk(data)
	base := []string{"HOME=" + home, "FLUFFY_HOME=" + data, "XDG_CONFIG_HOME=" + root + "/config"}
	for _, c := range []struct {
		name string
		env  []string
		want string
	}{
		{"GOMODCACHE", []string{"GOMODCACHE=" + explicit, "GOPATH=" + root + "/gopath"}, explicit},
		{"GOPATH's first entry", []string{"GOPATH=" + root + "/gopath:" + root + "/other"}, gopath},
		{"HOME/go", nil, dflt},
		{"relative GOMODCACHE", []string{"GOMODCACHE=rel/mod"}, ""},
		{"no download cache", []string{"GOMODCACHE=" + empty}, ""},
		{"missing", []string{"GOMODCACHE=" + root + "/nowhere"}, ""},
		{"the home directory", []string{"GOMODCACHE=" + mk(home)}, ""},
		{"above the home directory", []string{"GOMODCACHE=" + mk(root)}, ""},
		{"fluffy's data directory", []string{"GOMODCACHE=" + data}, ""},
		{"the root", []string{"GOMODCACHE=/"}, ""},
	} {
		e := &Env{Cwd: root, Environ: append(append([]string(nil), base...), c.env...)}
		got := e.UserCaches(filepath.Join(root, "ws"))[sandbox.UserGoModCache]
		if got != c.want {
			t.Errorf("%s: go-mod cache %q, want %q", c.name, got, c.want)
		}
	}
}

// UserCaches finds cargo's registry where cargo keeps it ($CARGO_HOME,
// else $HOME/.cargo) when it holds an index, and pip's wheelhouse as the
// first local directory of $PIP_FIND_LINKS; never fluffy's own files.
func TestUserCachesCargoAndPip(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "home")
	mk := func(d string) string {
		t.Helper()
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}
	explicit := mk(filepath.Join(root, "cargo", "registry", "index"))
	dflt := mk(filepath.Join(home, ".cargo", "registry", "index"))
	mk(filepath.Join(root, "noindex", "registry"))
	wheels := mk(filepath.Join(root, "wheels"))
	data := mk(filepath.Join(root, "data"))
	base := []string{"HOME=" + home, "FLUFFY_HOME=" + data, "XDG_CONFIG_HOME=" + root + "/config"}
	for _, c := range []struct {
		name       string
		env        []string
		cargo, pip string
	}{
		{"CARGO_HOME", []string{"CARGO_HOME=" + root + "/cargo"}, filepath.Dir(explicit), ""},
		{"HOME/.cargo", nil, filepath.Dir(dflt), ""},
		{"no index", []string{"CARGO_HOME=" + root + "/noindex"}, "", ""},
		{"relative CARGO_HOME", []string{"CARGO_HOME=rel"}, "", ""},
		{"wheelhouse", []string{"PIP_FIND_LINKS=https://example.com/simple file://" + wheels}, filepath.Dir(dflt), wheels},
		{"no local find-links", []string{"PIP_FIND_LINKS=https://example.com/simple"}, filepath.Dir(dflt), ""},
		{"fluffy's data directory", []string{"PIP_FIND_LINKS=" + data}, filepath.Dir(dflt), ""},
	} {
		e := &Env{Cwd: root, Environ: append(append([]string(nil), base...), c.env...)}
		got := e.UserCaches(filepath.Join(root, "ws"))
		if got[sandbox.UserCargoRegistry] != c.cargo || got[sandbox.UserPipWheels] != c.pip {
			t.Errorf("%s: cargo %q pip %q, want %q %q", c.name, got[sandbox.UserCargoRegistry], got[sandbox.UserPipWheels], c.cargo, c.pip)
		}
	}
}

// ToolchainMounts shows the PATH's toolchain directories read-only at
// the PATH's own paths (a Go installation or a Rust toolchain whole, even
// in the home directory), and leaves out what the sandbox sees already, must not see,
// or could not run (launchers in the home directory, shims).
func TestToolchainMounts(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "home")
	ws := filepath.Join(root, "src", "repo")
	dirs := []string{root + "/tools/bin", home + "/sdk/go/bin", home + "/sdk/go/pkg/tool", home + "/sdk/go/src/runtime",
		ws + "/bin", root + "/real/bin", root + "/data/bin", home + "/.cargo/bin", root + "/opt/pyenv/shims",
		home + "/.rustup/toolchains/stable/bin", home + "/.rustup/toolchains/stable/lib/rustlib"}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(root+"/real/bin", root+"/link"); err != nil {
		t.Fatal(err)
	}
	path := []string{root + "/tools/bin", home + "/sdk/go/bin", "/usr/local/go/bin", "/bin", "relative/bin", ws + "/bin",
		root + "/src", root + "/missing", home, "/", root + "/data/bin", root + "/link", root + "/tools/bin",
		home + "/.cargo/bin", root + "/opt/pyenv/shims", home + "/.rustup/toolchains/stable/bin"}
	e := &Env{Cwd: ws, Environ: []string{"HOME=" + home, "FLUFFY_HOME=" + root + "/data", "XDG_CONFIG_HOME=" + root + "/config",
		"PATH=" + strings.Join(path, ":")}}
	got := e.ToolchainMounts(ws)
	want := []sandbox.Mount{
		{Source: root + "/tools/bin", Target: root + "/tools/bin"},
		{Source: home + "/sdk/go", Target: home + "/sdk/go"},
		{Source: root + "/real/bin", Target: root + "/link"},
		{Source: home + "/.rustup/toolchains/stable", Target: home + "/.rustup/toolchains/stable"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("toolchain mounts\n got %+v\nwant %+v", got, want)
	}
	if got := e.ToolchainMounts(""); got != nil {
		t.Errorf("toolchain mounts without a workspace: %+v", got)
	}
}

// npm's cache is where npm keeps it ($npm_config_cache, else ~/.npm),
// when its _cacache holds an index.
func TestUserCachesNpm(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "home")
	for _, d := range []string{home + "/.npm/_cacache/index-v5", root + "/npmc/_cacache/index-v5", root + "/noindex/_cacache"} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		env  []string
		want string
	}{
		{nil, home + "/.npm/_cacache"},
		{[]string{"npm_config_cache=" + root + "/npmc"}, root + "/npmc/_cacache"},
		{[]string{"NPM_CONFIG_CACHE=" + root + "/npmc"}, root + "/npmc/_cacache"},
		{[]string{"npm_config_cache=" + root + "/noindex"}, ""},
	} {
		e := &Env{Cwd: root, Environ: append([]string{"HOME=" + home, "FLUFFY_HOME=" + root + "/data", "XDG_CONFIG_HOME=" + root + "/config"}, c.env...)}
		if got := e.UserCaches(filepath.Join(root, "ws"))[sandbox.UserNpmCache]; got != c.want {
			t.Errorf("%q: npm cache %q, want %q", c.env, got, c.want)
		}
	}
}
