package docker

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The host's apt sources for the suite are found in both formats, in
// apt's order, without source packages, disabled stanzas, other suites or
// files apt does not read.
func TestHostSources(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"etc/apt/sources.list": `# a comment
deb [ arch=amd64 signed-by=/k/debian.gpg ] http://mirror.example/debian bookworm main contrib # trailing
deb-src http://mirror.example/debian bookworm main
deb http://mirror.example/debian trixie main
deb http://mirror.example/debian bookworm main contrib
`,
		"etc/apt/sources.list.d/b.sources": `Types: deb deb-src
URIs: http://deb.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

# disabled
Types: deb
URIs: http://off.example/debian
Suites: bookworm
Components: main
Enabled: no

Types: deb
URIs: http://inline.example/debian-security
Suites: bookworm-security
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 -----END PGP PUBLIC KEY BLOCK-----

Types: deb
URIs: https://deb.nodesource.example/node_20.x
Suites: nodistro
Components: main
`,
		"etc/apt/sources.list.d/a.list":                   "deb http://a.example/debian bookworm-backports main\n",
		"etc/apt/sources.list.d/c.list.disabled-by-admin": "deb http://c.example/debian bookworm main\n",
	})
	got, err := hostSources(filepath.Join(root, "etc/apt"), "bookworm")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"deb [signed-by=/k/debian.gpg] http://mirror.example/debian bookworm main contrib",
		"deb http://mirror.example/debian bookworm main contrib",
		"deb http://a.example/debian bookworm-backports main",
		"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.example/debian bookworm main",
		"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.example/debian bookworm-updates main",
		"deb http://inline.example/debian-security bookworm-security main",
	}
	if !slices.Equal(got, want) {
		t.Errorf("sources:\n got %q\nwant %q", got, want)
	}
}

// The recipe's hash decides whether a build is skipped: it ignores the
// order of the packages and changes with the package list, the suite and
// the sources.
func TestDebianRecipeHash(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"etc/os-release":       "NAME=\"Debian GNU/Linux\"\nVERSION_CODENAME=bookworm\n",
		"etc/apt/sources.list": "deb http://deb.example/debian bookworm main\n",
	})
	hash := func(o DebianOptions) string {
		t.Helper()
		o.HostRoot = root
		r, err := newDebianRecipe(o)
		if err != nil {
			t.Fatal(err)
		}
		return r.hash()
	}
	base := hash(DebianOptions{})
	if h := hash(DebianOptions{Packages: []string{"python3-pytest", "python3", "git", "ca-certificates"}}); h != base {
		t.Error("the default packages in another order hash differently")
	}
	for name, o := range map[string]DebianOptions{
		"packages": {Packages: []string{"ca-certificates", "git", "python3"}},
		"suite":    {Suite: "trixie", Sources: []string{"deb http://deb.example/debian trixie main"}},
		"sources":  {Sources: []string{"deb http://other.example/debian bookworm main"}},
	} {
		if hash(o) == base {
			t.Errorf("another %s, same hash", name)
		}
	}
	r, err := newDebianRecipe(DebianOptions{HostRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	argv := r.command("/out.tar")
	if argv[0] != "mmdebstrap" || !slices.Contains(argv, "--include=ca-certificates,git,python3,python3-pytest") ||
		!slices.Equal(argv[len(argv)-3:], []string{"bookworm", "/out.tar", "deb http://deb.example/debian bookworm main"}) {
		t.Errorf("builder argv %q", argv)
	}
	if _, err := newDebianRecipe(DebianOptions{HostRoot: root, Packages: []string{"git,evil"}}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("a package name with a comma: %v", err)
	}
}

// A host without a codename or without a source for it is reported as
// unavailable, naming the fix.
func TestDebianRecipeUnavailable(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"etc/os-release": "NAME=Other\n"})
	var ue *sandbox.UnavailableError
	if _, err := newDebianRecipe(DebianOptions{HostRoot: root}); !errors.As(err, &ue) {
		t.Errorf("no codename: %v", err)
	}
	writeFiles(t, root, map[string]string{"etc/os-release": "VERSION_CODENAME=bookworm\n", "etc/apt/sources.list": "deb http://x/ trixie main\n"})
	if _, err := newDebianRecipe(DebianOptions{HostRoot: root}); !errors.As(err, &ue) {
		t.Errorf("no source: %v", err)
	}
}

// The engine's progress stream: its text is kept, and an error in it is
// the build's (or import's) error, even after progress.
func TestReadProgress(t *testing.T) {
	text, err := readProgress(strings.NewReader(`{"stream":"Step 1/2\n"}{"status":"sha256:abc"}`))
	if err != nil || text != "Step 1/2\nsha256:abc\n" {
		t.Errorf("progress %q, %v", text, err)
	}
	if _, err := readProgress(strings.NewReader(`{"stream":"Step 1/2\n"}{"error":"no space left on device"}`)); err == nil || err.Error() != "no space left on device" {
		t.Errorf("an error in the stream: %v", err)
	}
	if _, err := readProgress(strings.NewReader(`{"stream":`)); err == nil {
		t.Error("a cut stream is no error")
	}
}
