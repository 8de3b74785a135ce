package skill

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseSkillMD(t *testing.T) {
	front, body, err := ParseSkillMD("SKILL.md", []byte("---\nname: pdf-tools\ndescription: Fill PDF forms.\nlicense: MIT\nmetadata:\n  author: x\nallowed-tools: Bash\n---\n# PDF tools\n\nUse it.\n"))
	if err != nil {
		t.Fatal(err)
	}
	if front.Name != "pdf-tools" || front.Description != "Fill PDF forms." {
		t.Fatalf("front = %+v", front)
	}
	// Keys of the format beyond name and description, and other tools'
	// keys, are kept and ignored.
	if front.Extra["license"] != "MIT" || front.Extra["allowed-tools"] != "Bash" {
		t.Fatalf("extra = %v", front.Extra)
	}
	if body != "# PDF tools\n\nUse it.\n" {
		t.Fatalf("body = %q", body)
	}
}

func TestParseSkillMDProblems(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"no front matter", "# hi\n", "SKILL.md:1: no front matter"},
		{"unclosed", "---\nname: a\n", "SKILL.md:1: the front matter is not closed"},
		{"no name", "---\ndescription: d\n---\n", "SKILL.md:1: name: is required"},
		{"bad name", "---\nname: Bad_Name\ndescription: d\n---\n", "SKILL.md:2: name: \"Bad_Name\""},
		{"double hyphen", "---\nname: a--b\ndescription: d\n---\n", "SKILL.md:2: name:"},
		{"no description", "---\nname: a\n---\n", "SKILL.md:1: description: is required"},
		{"twice", "---\nname: a\nname: b\ndescription: d\n---\n", "SKILL.md:3: name: given twice"},
		{"name not string", "---\nname: [a]\ndescription: d\n---\n", "SKILL.md:2: name: must be a string"},
		{"bad yaml", "---\nname: a\n description: : d\n---\n", "SKILL.md:"},
		{"list", "---\n- a\n---\n", "must be a mapping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseSkillMD("SKILL.md", []byte(tc.in))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestParseManifest(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "run.sh", "#!/bin/sh\n", 0o755)
	write(t, dir, "Dockerfile", "FROM x\n", 0o644)
	m, err := ParseManifest("skill.yaml", dir, []byte(`
credentials:
  - {ref: "env:API_TOKEN", as: env, name: API_TOKEN}
  - {ref: "secret://age/shop", as: proxy, name: SHOP, bind: [api.shop.example]}
network: [api.shop.example, "127.0.0.1:8080", "*.cdn.example"]
classification: [spends-money]
sandbox: {memory: 256MiB, timeout: 30s, pids: 64}
image: {dockerfile: Dockerfile}
entrypoints:
  - name: buy
    description: buy a thing
    command: [./run.sh, --buy]
    args:
      type: object
      properties:
        item: {type: string}
      required: [item]
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Credentials) != 2 || m.Network[1] != "127.0.0.1:8080" || m.Sandbox.Memory != 256<<20 || m.Entrypoints[0].Args["type"] != "object" {
		t.Fatalf("manifest = %+v", m)
	}
}

func TestParseManifestProblems(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "plain.sh", "#!/bin/sh\n", 0o644)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"unknown field", "network: [a.example]\nnetworks: [b]\n", "skill.yaml:2: networks: unknown field"},
		{"unknown nested", "sandbox:\n  memroy: 1\n", "skill.yaml:2: sandbox.memroy: unknown field"},
		{"unknown in list", "entrypoints:\n  - name: a\n    command: [x]\n    cmd: [y]\n", "skill.yaml:4: entrypoints[0].cmd: unknown field"},
		{"twice", "network: []\nnetwork: []\n", "skill.yaml:2: network: given twice"},
		{"wrong type", "network: 3\n", "skill.yaml:1:"},
		{"bad host", "network:\n  - ok.example\n  - https://x.example/\n", "skill.yaml:3: network[1]:"},
		{"bad port", "network: [\"a.example:99999\"]\n", "network[0]: \"a.example:99999\": the port"},
		{"upper case host", "network: [A.example]\n", "network[0]:"},
		{"stdin credential", "credentials:\n  - {ref: \"env:X\", as: stdin}\n", "skill.yaml:2: credentials[0].as: stdin carries"},
		{"bad ref", "credentials:\n  - {ref: \"nope\", as: env, name: X}\n", "credentials[0].ref:"},
		{"bad as", "credentials:\n  - {ref: \"env:X\", as: paper, name: X}\n", "as must be env, file"},
		{"bind outside network", "credentials:\n  - {ref: \"env:X\", as: proxy, name: X, bind: [a.example]}\n", "credentials[0].bind: \"a.example\" is not in network"},
		{"bind on env", "credentials:\n  - {ref: \"env:X\", as: env, name: X, bind: [a.example]}\nnetwork: [a.example]\n", "credentials[0].bind: lists the hosts"},
		{"bad class", "classification: [Spends Money]\n", "classification[0]:"},
		{"bad runtime", "sandbox: {runtime: vm}\n", "sandbox.runtime:"},
		{"negative", "sandbox: {pids: -1}\n", "sandbox: limits cannot be negative"},
		{"dockerfile outside", "image: {dockerfile: ../Dockerfile}\n", "image.dockerfile: \"../Dockerfile\" must be a path inside"},
		{"dockerfile missing", "image: {dockerfile: Dockerfile}\n", "image.dockerfile:"},
		{"no command", "entrypoints:\n  - name: a\n", "skill.yaml:2: entrypoints[0].command: is required"},
		{"bad entry name", "entrypoints:\n  - name: A\n    command: [x]\n", "entrypoints[0].name:"},
		{"entry twice", "entrypoints:\n  - {name: a, command: [x]}\n  - {name: a, command: [x]}\n", "skill.yaml:3: entrypoints[1].name: \"a\" is given twice"},
		{"script missing", "entrypoints:\n  - {name: a, command: [./nope.sh]}\n", "entrypoints[0].command: \"./nope.sh\""},
		{"script not executable", "entrypoints:\n  - {name: a, command: [./plain.sh]}\n", "is not executable"},
		{"script escapes", "entrypoints:\n  - {name: a, command: [../x.sh]}\n", "must be a path inside"},
		{"args not object", "entrypoints:\n  - {name: a, command: [x], args: {type: string}}\n", "entrypoints[0].args: the arguments are one JSON object"},
		{"args not schema", "entrypoints:\n  - {name: a, command: [x], args: {type: object, properties: 3}}\n", "entrypoints[0].args: not a JSON Schema"},
		{"not a mapping", "- a\n", "a manifest is a mapping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest("skill.yaml", dir, []byte(tc.in))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestLoadNeverHalfLoads(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "shop")
	write(t, dir, "SKILL.md", "---\nname: shop\ndescription: Buys things.\n---\nbody\n", 0o644)
	write(t, dir, "skill.yaml", "network: [shop.example]\nclassification: [spends-money]\nentrypoints:\n  - {name: buy, command: [./nope.sh]}\n", 0o644)
	s, err := Load(dir, ScopeUser)
	if !errors.Is(err, ErrInvalid) || s.Name != "" || s.Manifest.Network != nil {
		t.Fatalf("Load = %+v, %v", s, err)
	}
	// The folder's name is the skill's.
	other := filepath.Join(root, "other")
	write(t, other, "SKILL.md", "---\nname: shop\ndescription: d\n---\n", 0o644)
	if _, err := Load(other, ScopeUser); err == nil || !strings.Contains(err.Error(), "must be the folder's name") {
		t.Fatalf("err = %v", err)
	}
	// Both manifest names: one would be ignored.
	both := filepath.Join(root, "both")
	write(t, both, "SKILL.md", "---\nname: both\ndescription: d\n---\n", 0o644)
	write(t, both, "skill.yaml", "", 0o644)
	write(t, both, "carapace.yaml", "", 0o644)
	if _, err := Load(both, ScopeUser); err == nil || !strings.Contains(err.Error(), "keep one") {
		t.Fatalf("err = %v", err)
	}
	// carapace.yaml alone is read.
	if err := os.Remove(filepath.Join(both, "skill.yaml")); err != nil {
		t.Fatal(err)
	}
	write(t, both, "carapace.yaml", "network: [a.example]\n", 0o644)
	s, err = Load(both, ScopeUser)
	if err != nil || len(s.Manifest.Network) != 1 {
		t.Fatalf("Load = %+v, %v", s, err)
	}
}

func write(t *testing.T, dir, name, content string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func FuzzParseSkillMD(f *testing.F) {
	f.Add([]byte("---\nname: a\ndescription: d\n---\nbody"))
	f.Add([]byte("---\r\nname: a-b\r\ndescription: \"x\"\r\nextra: {a: [1]}\r\n---\r\n"))
	f.Add([]byte("\ufeff---\n---\n"))
	f.Add([]byte("---\nname: &a x\ndescription: *a\n---\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		front, body, err := ParseSkillMD("SKILL.md", data)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || len(pe.Problems) == 0 {
				t.Fatalf("error without problems: %v", err)
			}
			return
		}
		if !nameRE.MatchString(front.Name) || front.Description == "" {
			t.Fatalf("accepted %+v", front)
		}
		if len(body) > len(data) {
			t.Fatal("body longer than the file")
		}
	})
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte("network: [a.example]\nclassification: [x]\n"))
	f.Add([]byte("credentials:\n  - {ref: \"env:X\", as: proxy, name: X, bind: [a.example]}\nnetwork: [a.example]\n"))
	f.Add([]byte("entrypoints:\n  - {name: a, command: [/bin/true], args: {type: object}}\n"))
	f.Add([]byte("sandbox: {memory: 1GiB, timeout: 1m}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest("skill.yaml", "", data)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || len(pe.Problems) == 0 {
				t.Fatalf("error without problems: %v", err)
			}
			return
		}
		// What is accepted keeps the rules.
		for _, h := range m.Network {
			if CheckHost(h) != nil {
				t.Fatalf("accepted host %q", h)
			}
		}
		for _, c := range m.Credentials {
			if c.As == "stdin" {
				t.Fatal("accepted a stdin credential")
			}
		}
		for _, e := range m.Entrypoints {
			if len(e.Command) == 0 || !entryRE.MatchString(e.Name) {
				t.Fatalf("accepted entrypoint %+v", e)
			}
		}
	})
}

// A folder that is gone, or holds no SKILL.md, is no skill: the error
// wraps fs.ErrNotExist (what the collection of images goes by) besides
// ErrInvalid; a SKILL.md that does not parse does not.
func TestLoadNotExist(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{filepath.Join(dir, "gone"), dir} {
		if _, err := Load(d, ScopeUser); !errors.Is(err, os.ErrNotExist) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v", d, err)
		}
	}
	os.WriteFile(filepath.Join(dir, SkillFile), []byte("no front matter\n"), 0o644)
	if _, err := Load(dir, ScopeUser); errors.Is(err, os.ErrNotExist) || !errors.Is(err, ErrInvalid) {
		t.Errorf("a broken SKILL.md: err = %v", err)
	}
}
