package skilltool_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/skill"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tool/skilltool"
)

func writeFile(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// fixture is a user skill "shop" with a host, a credential and a
// classification, and a project skill "docker-only" with a Dockerfile.
func fixture(t *testing.T) (*tool.Registry, skilltool.Options) {
	cfg, repo := t.TempDir(), t.TempDir()
	shop := filepath.Join(cfg, "skills", "shop")
	writeFile(t, filepath.Join(shop, "SKILL.md"), "---\nname: shop\ndescription: Buys things.\n---\nUse buy to buy.\n", 0o644)
	writeFile(t, filepath.Join(shop, "buy.sh"), "#!/bin/sh\ncat\n", 0o755)
	writeFile(t, filepath.Join(shop, "skill.yaml"), `network: ["127.0.0.1:8080"]
credentials:
  - {ref: "env:SHOP_TOKEN", as: env, name: SHOP_TOKEN}
classification: [spends-money]
sandbox: {timeout: 20s, memory: 64MiB}
entrypoints:
  - name: buy
    description: buy one item
    command: [./buy.sh, --now]
    args: {type: object, properties: {item: {type: string}}, required: [item], additionalProperties: false}
`, 0o644)
	img := filepath.Join(repo, ".fluffy", "skills", "docker-only")
	writeFile(t, filepath.Join(img, "SKILL.md"), "---\nname: docker-only\ndescription: Needs its image.\n---\n", 0o644)
	writeFile(t, filepath.Join(img, "Dockerfile"), "FROM scratch\n", 0o644)
	writeFile(t, filepath.Join(img, "skill.yaml"), "image: {dockerfile: Dockerfile}\nentrypoints:\n  - {name: go, command: [/bin/true]}\n", 0o644)
	roots := skill.Roots("", cfg, repo)
	shared := filepath.Join(t.TempDir(), "shared")
	o := skilltool.Options{
		Skills:    func() skill.Set { return skill.Discover(roots) },
		Workspace: repo,
		Shared:    func() (string, error) { return shared, os.MkdirAll(shared, 0o700) },
	}
	reg := tool.NewRegistry()
	if err := skilltool.Register(reg, o); err != nil {
		t.Fatal(err)
	}
	return reg, o
}

func decode(t *testing.T, reg *tool.Registry, name, args string) (*tool.Tool, tool.Args, *operation.Operation, error) {
	t.Helper()
	tl, err := reg.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	a, err := tl.Decode([]byte(args))
	if err != nil {
		t.Fatalf("decode %s: %v", args, err)
	}
	res, err := tool.NewResolver(tool.ResolverOptions{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	op, err := tl.Normalize(context.Background(), res, a, operation.Session{ID: "s1"})
	return tl, a, op, err
}

func TestLoad(t *testing.T) {
	reg, _ := fixture(t)
	tl, a, op, err := decode(t, reg, skilltool.LoadName, `{"name":"shop"}`)
	if err != nil || tl.Execution().Class != tool.FastPath || op.Action != operation.Read {
		t.Fatalf("normalize: %v %+v", err, op)
	}
	res, err := tl.Run(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Output)
	for _, want := range []string{"Use buy to buy.", "- buy: buy one item", `"required":["item"]`, "127.0.0.1:8080", "spends-money"} {
		if !strings.Contains(out, want) {
			t.Errorf("skill.load output lacks %q:\n%s", want, out)
		}
	}
	if _, _, _, err := decode(t, reg, skilltool.LoadName, `{"name":"nope"}`); !errors.Is(err, skilltool.ErrUnknownSkill) {
		t.Fatalf("unknown skill: %v", err)
	}
}

// A run is confined to what the manifest states: the skill's folder and
// the workspace read-only, the shared folder writable, its host and its
// credential only; the classification is a tag of the operation.
func TestRunCommand(t *testing.T) {
	reg, o := fixture(t)
	tl, a, op, err := decode(t, reg, skilltool.RunName, `{"name":"shop","entrypoint":"buy","args":{"item":"tea"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(op.Tags, "spends-money") || !slices.Contains(op.Tags, "skill") || !slices.Contains(op.Tags, tool.TagNet) || !slices.Contains(op.Tags, tool.TagUntrustedOutput) || !slices.Equal(op.Argv, []string{"shop", "buy"}) {
		t.Fatalf("operation: tags %v argv %v", op.Tags, op.Argv)
	}
	cmd, err := tl.Command(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cmd.Argv, []string{"/skills/shop/buy.sh", "--now"}) || cmd.Dir != "/skills/shop" || cmd.Timeout.Seconds() != 20 {
		t.Fatalf("command: %+v", cmd)
	}
	c := cmd.Confine
	if c == nil || string(c.Stdin) != `{"item":"tea"}` || !slices.Equal(c.Hosts, []string{"127.0.0.1:8080"}) || c.Memory != 64<<20 {
		t.Fatalf("confinement: %+v", c)
	}
	if len(c.Credentials) != 1 || c.Credentials[0].Name != "SHOP_TOKEN" {
		t.Fatalf("credentials: %+v", c.Credentials)
	}
	s, _ := o.Skills().Lookup("shop")
	if !slices.Contains(c.Mounts, sandbox.Mount{Source: s.Dir, Target: "/skills/shop"}) || !c.Workspace {
		t.Errorf("mounts %+v lack the skill's folder (read-only), or no workspace (%v)", c.Mounts, c.Workspace)
	}
	writable := slices.DeleteFunc(slices.Clone(c.Mounts), func(m sandbox.Mount) bool { return !m.Writable })
	if len(writable) != 1 || writable[0].Target != "/tmp/shared" {
		t.Fatalf("writable mounts: %+v", writable)
	}
}

// A run proposes lasting writes in the shared folder's pending/: the
// confinement names it (the router takes its files once the run ends),
// the run finds it in SKILL_PENDING, and it is emptied before the run,
// so a file an earlier run left behind is never proposed as this one's.
func TestRunPending(t *testing.T) {
	reg, o := fixture(t)
	shared, err := o.Shared()
	if err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(shared, "pending", "notes", "old.md")
	writeFile(t, stale, "left behind\n", 0o644)
	if err := os.Symlink("/etc", filepath.Join(shared, "pending", "etc")); err != nil {
		t.Fatal(err)
	}
	tl, a, _, err := decode(t, reg, skilltool.RunName, `{"name":"shop","entrypoint":"buy","args":{"item":"tea"}}`)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := tl.Command(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(shared, "pending"); cmd.Confine.Pending != want {
		t.Fatalf("pending %q, want %q", cmd.Confine.Pending, want)
	}
	if !slices.Contains(cmd.Env, "SKILL_PENDING=/tmp/shared/pending") {
		t.Fatalf("env %v", cmd.Env)
	}
	ents, err := os.ReadDir(cmd.Confine.Pending)
	if err != nil || len(ents) != 0 {
		t.Fatalf("pending/ before the run: %v, %v; want it empty", ents, err)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatalf("emptying pending/ followed its link: %v", err)
	}
}

func TestRunRefusals(t *testing.T) {
	reg, _ := fixture(t)
	for _, tc := range []struct{ args, want string }{
		{`{"name":"shop","entrypoint":"sell"}`, `no entrypoint "sell" (it has buy)`},
		{`{"name":"shop","entrypoint":"buy"}`, "arguments of"},
		{`{"name":"shop","entrypoint":"buy","args":{"item":"tea","card":"x"}}`, "arguments of"},
		{`{"name":"ghost","entrypoint":"buy"}`, "no such skill"},
	} {
		if _, _, _, err := decode(t, reg, skilltool.RunName, tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.args, err, tc.want)
		}
	}
	// A skill with a Dockerfile needs its image (the builder's seam).
	tl, a, _, err := decode(t, reg, skilltool.RunName, `{"name":"docker-only","entrypoint":"go"}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tl.Command(t.Context(), a); !errors.Is(err, skilltool.ErrNeedsImage) || !strings.Contains(err.Error(), "fluffy skill build docker-only") {
		t.Fatalf("err = %v", err)
	}
}

// What runs is what the gates decided on: a manifest edited between the
// decision and the run refuses the run.
func TestRunRefusesAChangedSkill(t *testing.T) {
	reg, o := fixture(t)
	tl, a, _, err := decode(t, reg, skilltool.RunName, `{"name":"shop","entrypoint":"buy","args":{"item":"tea"}}`)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := o.Skills().Lookup("shop")
	m := filepath.Join(s.Dir, "skill.yaml")
	b, err := os.ReadFile(m)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, m, strings.Replace(string(b), `network: ["127.0.0.1:8080"]`, `network: ["127.0.0.1:8080", evil.example]`, 1), 0o644)
	if _, err := tl.Command(t.Context(), a); !errors.Is(err, skilltool.ErrChanged) {
		t.Fatalf("err = %v", err)
	}
}

// Granted narrows what a run gets (an installed skill granted nothing
// has no network and no credential); Runtime refuses a skill that wants
// another runtime.
func TestGrantedAndRuntime(t *testing.T) {
	reg := tool.NewRegistry()
	_, o := fixture(t)
	o.Granted = func(s skill.Skill) (skill.Manifest, error) {
		m := s.Manifest
		m.Network, m.Credentials = nil, nil
		return m, nil
	}
	runtime := "native"
	o.Runtime = func() string { return runtime }
	if err := skilltool.Register(reg, o); err != nil {
		t.Fatal(err)
	}
	tl, a, op, err := decode(t, reg, skilltool.RunName, `{"name":"shop","entrypoint":"buy","args":{"item":"tea"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(op.Tags, tool.TagNet) || slices.Contains(op.Tags, tool.TagSecrets) || slices.Contains(op.Tags, tool.TagUntrustedOutput) {
		t.Fatalf("tags %v", op.Tags)
	}
	cmd, err := tl.Command(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmd.Confine.Hosts) != 0 || len(cmd.Confine.Credentials) != 0 {
		t.Fatalf("ungranted: %+v", cmd.Confine)
	}
	s, _ := o.Skills().Lookup("shop")
	writeFile(t, filepath.Join(s.Dir, "skill.yaml"), "sandbox: {runtime: docker}\nentrypoints:\n  - {name: buy, command: [./buy.sh]}\n", 0o644)
	tl, a, _, err = decode(t, reg, skilltool.RunName, `{"name":"shop","entrypoint":"buy"}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tl.Command(t.Context(), a); err == nil || !strings.Contains(err.Error(), "runs in the docker runtime") {
		t.Fatalf("err = %v", err)
	}
	runtime = "podman"
	if _, err := tl.Command(t.Context(), a); err != nil {
		t.Fatalf("podman: %v", err)
	}
	// A skill with a Dockerfile is held to the runtime its image runs
	// on: in a native session, the container engine.
	runtime = "native"
	o.ImageRuntime = func() string { return "docker" }
	o.Image = func(context.Context, skill.Skill) (string, error) { return "fluffy-skill/shop:0123456789ab", nil }
	reg = tool.NewRegistry()
	if err := skilltool.Register(reg, o); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(s.Dir, "Dockerfile"), "FROM fluffy-base\n", 0o644)
	for want, ok := range map[string]bool{"docker": true, "native": false} {
		writeFile(t, filepath.Join(s.Dir, "skill.yaml"), "sandbox: {runtime: "+want+"}\nimage: {dockerfile: Dockerfile}\nentrypoints:\n  - {name: buy, command: [./buy.sh]}\n", 0o644)
		tl, a, _, err = decode(t, reg, skilltool.RunName, `{"name":"shop","entrypoint":"buy"}`)
		if err != nil {
			t.Fatal(err)
		}
		_, err := tl.Command(t.Context(), a)
		if ok && err != nil || !ok && (err == nil || !strings.Contains(err.Error(), "in this native session its image runs on docker")) {
			t.Fatalf("a skill with a Dockerfile for %s in a native session: %v", want, err)
		}
	}
}

// A skill with a Dockerfile runs in the image the Image hook returns,
// asked at each run (so a changed Dockerfile is built before the run that
// follows it); a skill without one runs in the runtime's own image.
func TestRunInItsImage(t *testing.T) {
	reg := tool.NewRegistry()
	_, o := fixture(t)
	var asked []string
	o.Image = func(_ context.Context, s skill.Skill) (string, error) {
		asked = append(asked, s.Name)
		return "fluffy-skill/" + s.Name + ":0123456789ab", nil
	}
	if err := skilltool.Register(reg, o); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		tl, a, op, err := decode(t, reg, skilltool.RunName, `{"name":"docker-only","entrypoint":"go"}`)
		if err != nil {
			t.Fatal(err)
		}
		// Declared to the router, which runs it on the container
		// engine in a native session.
		if !slices.Contains(op.Tags, tool.TagImage) {
			t.Fatalf("tags %v: want %s", op.Tags, tool.TagImage)
		}
		cmd, err := tl.Command(t.Context(), a)
		if err != nil {
			t.Fatal(err)
		}
		if cmd.Confine.Image != "fluffy-skill/docker-only:0123456789ab" {
			t.Fatalf("image %q", cmd.Confine.Image)
		}
	}
	if !slices.Equal(asked, []string{"docker-only", "docker-only"}) {
		t.Fatalf("asked %v", asked)
	}
	tl, a, op, err := decode(t, reg, skilltool.RunName, `{"name":"shop","entrypoint":"buy","args":{"item":"tea"}}`)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := tl.Command(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Confine.Image != "" || len(asked) != 2 || slices.Contains(op.Tags, tool.TagImage) {
		t.Fatalf("a skill without a Dockerfile: image %q, asked %v, tags %v", cmd.Confine.Image, asked, op.Tags)
	}
	// A build that fails refuses the run.
	o.Image = func(context.Context, skill.Skill) (string, error) { return "", errors.New("step 3 failed") }
	reg = tool.NewRegistry()
	if err := skilltool.Register(reg, o); err != nil {
		t.Fatal(err)
	}
	tl, a, _, err = decode(t, reg, skilltool.RunName, `{"name":"docker-only","entrypoint":"go"}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tl.Command(t.Context(), a); !errors.Is(err, skilltool.ErrNeedsImage) || !strings.Contains(err.Error(), "step 3 failed") {
		t.Fatalf("err = %v", err)
	}
}
