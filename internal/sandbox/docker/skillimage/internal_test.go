package skillimage

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseDockerfile(t *testing.T) {
	src := "# a comment\n\nFROM fluffy-base AS b\nRUN a \\\n  # dropped\n  b\nCOPY x /x\n"
	ins := parseDockerfile([]byte(src))
	if len(ins) != 3 {
		t.Fatalf("instructions = %+v, want 3", ins)
	}
	want := []struct {
		line      int
		cmd, args string
	}{{3, "FROM", "fluffy-base AS b"}, {4, "RUN", "a  b"}, {7, "COPY", "x /x"}}
	for i, w := range want {
		if ins[i].line != w.line || ins[i].cmd != w.cmd || ins[i].args != w.args {
			t.Errorf("instruction %d = %+v, want %+v", i, ins[i], w)
		}
	}
	// The escape directive changes the continuation character.
	ins = parseDockerfile([]byte("# escape=`\nFROM scratch\nRUN a `\n b\n"))
	if len(ins) != 2 || ins[1].args != "a  b" {
		t.Errorf("with escape=`: %+v", ins)
	}
}

// The builder refuses what would reach a registry or the network, and
// names the line.
func TestCheckRefuses(t *testing.T) {
	for _, tc := range []struct {
		src  string
		line int
	}{
		{"FROM python:3.12\n", 1},
		{"FROM fluffy-base\nRUN true\nCOPY --from=alpine /bin/sh /x\n", 3},
		{"FROM fluffy-base\n\nADD https://example.com/x.tgz /x\n", 3},
		{"FROM fluffy-base\nADD git@github.com:a/b.git /x\n", 2},
		{"# nothing\n", 1},
		{"FROM scratch AS a\nFROM b\n", 2},
	} {
		_, err := check("/s/Dockerfile", parseDockerfile([]byte(tc.src)))
		var de *DockerfileError
		if !errors.As(err, &de) || !errors.Is(err, ErrRefused) || de.Line != tc.line {
			t.Errorf("%q: err = %v, want a refusal at line %d", tc.src, err, tc.line)
		}
	}
	for _, ok := range []string{
		"FROM fluffy-base\nRUN true\n",
		"FROM fluffy-base:latest AS build\nFROM build\nCOPY --from=build /a /b\nCOPY --from=0 /a /c\n",
		"FROM scratch\nADD local.tar /\n",
	} {
		if _, err := check("/s/Dockerfile", parseDockerfile([]byte(ok))); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

func TestRewriteBase(t *testing.T) {
	src := []byte("FROM fluffy-base AS b\nRUN echo fluffy-base\nFROM --platform=linux/amd64 fluffy-base:latest\n")
	from, err := check("Dockerfile", parseDockerfile(src))
	if err != nil {
		t.Fatal(err)
	}
	got := string(rewriteBase(src, from, "sha256:abc"))
	want := "FROM sha256:abc AS b\nRUN echo fluffy-base\nFROM --platform=linux/amd64 sha256:abc\n"
	if got != want {
		t.Errorf("rewritten:\n%s\nwant:\n%s", got, want)
	}
}

func TestIgnore(t *testing.T) {
	rules, err := parseIgnore([]byte("# c\n/build\n**/*.pyc\n*.log\n!keep.log\ncache/*\n"))
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		"build":            true,
		"build/x":          true,
		"a/build":          false,
		"x.pyc":            true,
		"a/b/x.pyc":        true,
		"a.log":            true,
		"keep.log":         false,
		"sub/a.log":        false,
		"cache/x":          true,
		"cache":            false,
		"requirements.txt": false,
	} {
		if got := ignored(rules, p); got != want {
			t.Errorf("ignored(%q) = %v, want %v", p, got, want)
		}
	}
}

// The context's hash follows names, modes and contents, never times, and
// not what .dockerignore leaves out.
func TestContextHash(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	df := []byte("FROM scratch\nCOPY . /\n")
	write("Dockerfile", string(df), 0o644)
	write("requirements.txt", "a\n", 0o644)
	write("scripts/run.sh", "#!/bin/sh\n", 0o755)
	write(".dockerignore", "*.log\n", 0o644)
	hash := func() string {
		t.Helper()
		bc, err := readContext(dir, "Dockerfile", df, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		_, sum, err := bc.tar()
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	h0 := hash()
	future := time.Now().Add(time.Hour)
	filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, future, future) })
	if h := hash(); h != h0 {
		t.Error("new times changed the hash")
	}
	write("debug.log", "noise", 0o644)
	if h := hash(); h != h0 {
		t.Error("an ignored file changed the hash")
	}
	write("requirements.txt", "b\n", 0o644)
	h1 := hash()
	if h1 == h0 {
		t.Error("a changed requirements file kept the hash")
	}
	write("scripts/run.sh", "#!/bin/sh\n", 0o644)
	if h := hash(); h == h1 {
		t.Error("a changed mode kept the hash")
	}
	if _, err := readContext(dir, "Dockerfile", df, 10); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), ".dockerignore") {
		t.Errorf("over the limit: %v", err)
	}
}

func TestStepOf(t *testing.T) {
	for l, want := range map[string]int{
		"Step 3/7 : RUN exit 3": 3,  // Docker
		"STEP 12/14: COPY . /":  12, // Podman
		" ---> Running in abc":  0,
		"step 1/2: x":           0,
	} {
		if got := stepOf(l); got != want {
			t.Errorf("stepOf(%q) = %d, want %d", l, got, want)
		}
	}
}

func TestWithoutRegistry(t *testing.T) {
	for in, want := range map[string]string{
		"fluffy-skill/a:1":           "fluffy-skill/a:1",
		"docker.io/fluffy-skill/a:1": "fluffy-skill/a:1", // Podman
		"localhost/fluffy-skill/a:1": "fluffy-skill/a:1",
		"host:5000/fluffy-skill/a:1": "fluffy-skill/a:1",
	} {
		if got := withoutRegistry(in); got != want {
			t.Errorf("withoutRegistry(%q) = %q", in, got)
		}
	}
}
