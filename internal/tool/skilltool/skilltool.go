// Package skilltool owns the skill tools a session gets: skill.load, a
// read-only fast-path tool that returns a skill's instructions and its
// entrypoints with their argument schemas, and skill.run, a sandbox tool
// that runs one entrypoint confined to what the skill's manifest states
// (tool.Confinement): its folder at /skills/<name> read-only, the
// workspace read-only, /tmp/shared read-write for the session (its
// pending/ folder the writes it proposes into the change set), /memory
// read-only when the assistant has memory, the manifest's hosts as its
// only network and its credentials as its only secrets. Its classification
// hints become tags of the call's operation, so policy rules can match
// them. A skill with a Dockerfile runs in its own image (Options.Image),
// its operation tagged tool.TagImage so that a native session's router
// runs it on the container engine.
// docs/skills.md is the reference.
package skilltool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/skill"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// The tools' names.
const (
	LoadName = "skill.load"
	RunName  = "skill.run"
)

// Where a run finds things.
const (
	// SkillsMount is the folder under which a run finds its skill, at
	// SkillsMount/<name>.
	SkillsMount = "/skills"
	// SharedMount is the session's read-write folder shared by its runs.
	SharedMount = "/tmp/shared"
	// MemoryMount is the assistant's memory, read-only.
	MemoryMount = "/memory"
	// PendingDir is the folder under SharedMount where a run proposes
	// lasting writes: each regular file becomes an fs.write of the
	// workspace file at its path relative to it, once the run ends
	// (tool.Confinement.Pending).
	PendingDir = "pending"
)

// TagSkill is on every skill.run operation besides its classification.
const TagSkill = "skill"

// maxArgs bounds a run's arguments (its stdin).
const maxArgs = 64 << 10

// Options configure the skill tools. Skills is required.
type Options struct {
	// Skills returns the skills in force for the session, read at each
	// call (an edit applied since counts, an invalid skill is absent).
	Skills func() skill.Set
	// Workspace is the session's workspace: a run sees it at its own
	// path, read-only ("" none).
	Workspace string
	// Shared returns the session's folder mounted read-write at
	// /tmp/shared, creating it; nil or "" leaves it out.
	Shared func() (string, error)
	// Memory is the assistant's memory folder, mounted read-only at
	// /memory when it is set.
	Memory string
	// Image, when set, returns the container image a skill whose
	// manifest names a Dockerfile runs in, building it when its inputs
	// changed since the last build (the image builder's seam); nil
	// refuses such a skill, naming the command that builds its image.
	Image func(ctx context.Context, s skill.Skill) (string, error)
	// Granted, when set, is the manifest a skill's runs may use: the
	// person's grants narrow an installed skill's network and
	// credentials (a skill granted nothing gets none). Nil: the manifest
	// as it stands.
	Granted func(s skill.Skill) (skill.Manifest, error)
	// Runtime, when set, names the session's sandbox runtime ("native",
	// "docker", "podman"): a skill whose manifest names another is
	// refused.
	Runtime func() string
	// ImageRuntime, when set, names the runtime a skill with a
	// Dockerfile runs on when it is not the session's ("docker" in a
	// native session; "" the session's): such a skill's manifest is held
	// to that one.
	ImageRuntime func() string
}

// ErrUnknownSkill is the refusal of a name no skill in force has.
var ErrUnknownSkill = errors.New("no such skill")

// ErrNeedsImage is the refusal of a skill whose image is not built.
var ErrNeedsImage = errors.New("the skill's image is not built")

// LoadIn is skill.load's input.
type LoadIn struct {
	Name string `json:"name" jsonschema:"the skill's name, as the system prompt lists it"`
}

// RunIn is skill.run's input.
type RunIn struct {
	Name       string         `json:"name" jsonschema:"the skill's name"`
	Entrypoint string         `json:"entrypoint" jsonschema:"the entrypoint to run, as skill.load lists them"`
	Args       map[string]any `json:"args,omitempty" jsonschema:"the entrypoint's arguments, a JSON object matching its schema (given to the script on stdin)"`

	// decided is what the gates decided on (the skill's folder and
	// manifest, as facts): Command refuses a skill changed since.
	decided string
}

// ErrChanged is the refusal of a run whose skill changed between the
// gates' decision and the run.
var ErrChanged = errors.New("the skill changed since the call was decided")

// facts is a skill's folder and manifest as one string, what a run's
// decision was made on.
func facts(s skill.Skill) string {
	b, err := json.Marshal(struct {
		Dir string
		M   skill.Manifest
	}{s.Dir, s.Manifest})
	if err != nil {
		return "unencodable: " + err.Error()
	}
	return string(b)
}

// Register adds skill.load and skill.run to reg.
func Register(reg *tool.Registry, o Options) error {
	if o.Skills == nil {
		return errors.New("skilltool: Skills is required")
	}
	load, err := loadTool(o)
	if err != nil {
		return err
	}
	run, err := runTool(o)
	if err != nil {
		return err
	}
	for _, t := range []*tool.Tool{load, run} {
		if err := reg.Register(t); err != nil {
			return err
		}
	}
	return nil
}

func (o Options) lookup(name string) (skill.Skill, error) {
	s, ok := o.Skills().Lookup(name)
	if !ok {
		return skill.Skill{}, fmt.Errorf("%w %q (the system prompt lists the skills in force)", ErrUnknownSkill, name)
	}
	if o.Granted != nil {
		m, err := o.Granted(s)
		if err != nil {
			return skill.Skill{}, fmt.Errorf("skill %q: %w", name, err)
		}
		s.Manifest = m
	}
	return s, nil
}

func loadTool(o Options) (*tool.Tool, error) {
	return tool.New(tool.Definition[LoadIn]{
		Name:        LoadName,
		Description: "Load a skill: its instructions (SKILL.md) and the entrypoints skill.run can run, with their argument schemas. Use it before running a skill.",
		Action:      operation.Read,
		Tags:        []string{tool.TagReads},
		Execution:   tool.Execution{Class: tool.FastPath},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *LoadIn, op *operation.Operation) error {
			s, err := o.lookup(in.Name)
			if err != nil {
				return &tool.NormalizeError{Rule: "skill", Instead: "load a skill the system prompt lists", Err: err}
			}
			// The skill by name (its folder may lie outside the
			// workspace, in the person's configuration).
			op.Argv = []string{s.Name}
			return nil
		},
		Run: func(_ context.Context, in *LoadIn) (tool.Result, error) {
			s, err := o.lookup(in.Name)
			if err != nil {
				return tool.Result{Output: []byte(err.Error()), IsError: true}, nil
			}
			return tool.Result{Output: []byte(Render(s))}, nil
		},
	})
}

// Render is what skill.load returns: the body, then the entrypoints.
func Render(s skill.Skill) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Skill %s (%s)\n\n%s\n", s.Name, s.Scope, strings.TrimSpace(s.Body))
	m := s.Manifest
	if len(m.Entrypoints) == 0 {
		b.WriteString("\nThis skill has no entrypoints: skill.run cannot run it; follow its instructions with your other tools.\n")
		return b.String()
	}
	b.WriteString("\n## Entrypoints (skill.run)\n\n")
	for _, e := range m.Entrypoints {
		fmt.Fprintf(&b, "- %s", e.Name)
		if e.Description != "" {
			fmt.Fprintf(&b, ": %s", e.Description)
		}
		b.WriteString("\n")
		if e.Args != nil {
			if j, err := json.Marshal(e.Args); err == nil {
				fmt.Fprintf(&b, "  args: %s\n", j)
			}
		} else {
			b.WriteString("  args: none\n")
		}
	}
	if len(m.Network) > 0 {
		fmt.Fprintf(&b, "\nIts runs may reach: %s (each host still decided by policy).\n", strings.Join(m.Network, ", "))
	}
	if len(m.Classification) > 0 {
		fmt.Fprintf(&b, "Classification: %s.\n", strings.Join(m.Classification, ", "))
	}
	return b.String()
}

// entrypoint finds name's entrypoint in s.
func entrypoint(s skill.Skill, name string) (skill.Entrypoint, error) {
	for _, e := range s.Manifest.Entrypoints {
		if e.Name == name {
			return e, nil
		}
	}
	var names []string
	for _, e := range s.Manifest.Entrypoints {
		names = append(names, e.Name)
	}
	if len(names) == 0 {
		return skill.Entrypoint{}, fmt.Errorf("skill %q has no entrypoints", s.Name)
	}
	return skill.Entrypoint{}, fmt.Errorf("skill %q has no entrypoint %q (it has %s)", s.Name, name, strings.Join(names, ", "))
}

// checkArgs validates args against e's schema and returns them as the
// run's stdin.
func checkArgs(e skill.Entrypoint, args map[string]any) ([]byte, error) {
	if args == nil {
		args = map[string]any{}
	}
	if e.Args == nil {
		if len(args) > 0 {
			return nil, fmt.Errorf("entrypoint %q takes no arguments", e.Name)
		}
	} else {
		s, err := skill.ArgsSchema(e.Args)
		if err != nil {
			return nil, err
		}
		rs, err := s.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: false})
		if err != nil {
			return nil, err
		}
		if err := rs.Validate(args); err != nil {
			return nil, fmt.Errorf("arguments of %q: %w", e.Name, err)
		}
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	if len(b) > maxArgs {
		return nil, fmt.Errorf("arguments over %d bytes", maxArgs)
	}
	return b, nil
}

// Argv is e's command as the run executes it: a path inside the
// skill's folder becomes its mounted path under /skills/<name>.
func Argv(s skill.Skill, e skill.Entrypoint) []string {
	argv := slices.Clone(e.Command)
	if p := argv[0]; !path.IsAbs(p) && strings.Contains(p, "/") {
		argv[0] = path.Join(SkillsMount, s.Name, path.Clean(p))
	}
	return argv
}

func runTool(o Options) (*tool.Tool, error) {
	return tool.New(tool.Definition[RunIn]{
		Name: RunName,
		Description: "Run an entrypoint of a skill in its sandbox: the skill's folder read-only, the workspace read-only, /tmp/shared writable for this session " +
			"(a file under /tmp/shared/pending/PATH becomes a proposed write of the workspace file PATH once the run ends, each decided like fs.write; the result says what became of each), " +
			"only the network hosts and credentials its manifest declares. Arguments go to the script as JSON on stdin. Load the skill first with skill.load.",
		Action:    operation.Exec,
		Tags:      []string{tool.TagExec, TagSkill},
		Execution: tool.Execution{Class: tool.Sandbox, Template: skill.DefaultTemplate},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *RunIn, op *operation.Operation) error {
			s, err := o.lookup(in.Name)
			if err != nil {
				return &tool.NormalizeError{Rule: "skill", Instead: "run a skill the system prompt lists", Err: err}
			}
			e, err := entrypoint(s, in.Entrypoint)
			if err == nil {
				_, err = checkArgs(e, in.Args)
			}
			if err != nil {
				return &tool.NormalizeError{Rule: "skill", Instead: "call skill.load " + s.Name + " and use an entrypoint and arguments it lists", Err: err}
			}
			// Policy sees the skill and entrypoint as the command, its
			// hints as tags, and what it may reach and hold as tags too:
			// each host and secret is still decided when the run uses it.
			in.decided = facts(s)
			op.Argv = []string{s.Name, e.Name}
			op.Tags = append(op.Tags, s.Manifest.Classification...)
			if len(s.Manifest.Network) > 0 {
				// What a host answered is data no principal wrote: the
				// run's result taints the session (docs/provenance.md).
				op.Tags = append(op.Tags, tool.TagNet, tool.TagUntrustedOutput)
			}
			if len(s.Manifest.Credentials) > 0 {
				op.Tags = append(op.Tags, tool.TagSecrets)
			}
			if s.Manifest.Image.Dockerfile != "" {
				// It runs in its own image: in a native session, on
				// the container engine (router.Options.ImageRuntime).
				op.Tags = append(op.Tags, tool.TagImage)
			}
			return nil
		},
		Preview: func(_ context.Context, in *RunIn) string {
			s, err := o.lookup(in.Name)
			if err != nil {
				return ""
			}
			return preview(s, in)
		},
		Command: func(ctx context.Context, in *RunIn) (tool.Command, error) {
			return o.command(ctx, in)
		},
	})
}

// preview is what a person asked to approve a run sees.
func preview(s skill.Skill, in *RunIn) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run skill %s (%s, %s) entrypoint %s", s.Name, s.Scope, s.Dir, in.Entrypoint)
	if len(in.Args) > 0 {
		if j, err := json.Marshal(in.Args); err == nil {
			fmt.Fprintf(&b, " with %s", j)
		}
	}
	m := s.Manifest
	if len(m.Classification) > 0 {
		fmt.Fprintf(&b, "\nclassification: %s", strings.Join(m.Classification, ", "))
	}
	if len(m.Network) > 0 {
		fmt.Fprintf(&b, "\nnetwork: %s", strings.Join(m.Network, ", "))
	}
	for _, c := range m.Credentials {
		fmt.Fprintf(&b, "\ncredential: %s as %s %s", c.Ref, c.As, c.Name)
	}
	return b.String()
}

// command builds the run's confined command. The skill is looked up
// again: what runs is what is on disk now, checked whole.
func (o Options) command(ctx context.Context, in *RunIn) (tool.Command, error) {
	s, err := o.lookup(in.Name)
	if err != nil {
		return tool.Command{}, err
	}
	if in.decided != facts(s) {
		return tool.Command{}, fmt.Errorf("%w: call it again", ErrChanged)
	}
	e, err := entrypoint(s, in.Entrypoint)
	if err != nil {
		return tool.Command{}, err
	}
	stdin, err := checkArgs(e, in.Args)
	if err != nil {
		return tool.Command{}, err
	}
	m := s.Manifest
	if want := m.Sandbox.Runtime; want != "" && o.Runtime != nil {
		have, what := o.Runtime(), "this session's sandboxes are"
		if o.ImageRuntime != nil && m.Image.Dockerfile != "" {
			if img := o.ImageRuntime(); img != "" && img != have {
				have, what = img, "in this "+have+" session its image runs on"
			}
		}
		if have != want && (want != "docker" || have != "podman") {
			return tool.Command{}, fmt.Errorf("skill %q runs in the %s runtime; %s %s (sandbox.runtime)", s.Name, want, what, have)
		}
	}
	var image string
	if m.Image.Dockerfile != "" {
		if o.Image == nil {
			return tool.Command{}, fmt.Errorf("%w: skill %q runs in the image built from its %s ('fluffy skill build %s'), which this session cannot give a run", ErrNeedsImage, s.Name, m.Image.Dockerfile, s.Name)
		}
		ref, err := o.Image(ctx, s)
		if err != nil {
			return tool.Command{}, fmt.Errorf("%w: %w", ErrNeedsImage, err)
		}
		image = ref
	}
	home := path.Join(SkillsMount, s.Name)
	c := &tool.Confinement{
		Image:  image,
		Mounts: []sandbox.Mount{{Source: s.Dir, Target: home}},
		Hosts:  slices.Clone(m.Network),
		Stdin:  stdin,
		Memory: int64(m.Sandbox.Memory),
		Pids:   m.Sandbox.PIDs,
	}
	// The workspace as the session sees it, read-only: writes meant to
	// last are proposed under /tmp/shared/pending/ and each goes
	// through the gates as an fs.write once the run ends.
	c.Workspace = o.Workspace != ""
	if o.Memory != "" {
		c.Mounts = append(c.Mounts, sandbox.Mount{Source: o.Memory, Target: MemoryMount})
	}
	if o.Shared != nil {
		dir, err := o.Shared()
		if err != nil {
			return tool.Command{}, fmt.Errorf("the session's shared folder: %w", err)
		}
		if dir != "" {
			c.Mounts = append(c.Mounts, sandbox.Mount{Source: dir, Target: SharedMount, Writable: true})
			// Emptied first: what is there when the run ends is what
			// this run proposes (a kernel that stopped mid-run may
			// have left an earlier run's files).
			c.Pending = filepath.Join(dir, PendingDir)
			if err := os.RemoveAll(c.Pending); err != nil {
				return tool.Command{}, fmt.Errorf("the session's pending folder: %w", err)
			}
			if err := os.Mkdir(c.Pending, 0o700); err != nil {
				return tool.Command{}, fmt.Errorf("the session's pending folder: %w", err)
			}
		}
	}
	for _, cr := range m.Credentials {
		c.Credentials = append(c.Credentials, tool.Credential{Ref: cr.Ref, As: cr.As, Name: cr.Name, Bind: slices.Clone(cr.Bind)})
	}
	env := []string{"SKILL_NAME=" + s.Name, "SKILL_DIR=" + home, "SKILL_SHARED=" + SharedMount}
	if c.Pending != "" {
		env = append(env, "SKILL_PENDING="+path.Join(SharedMount, PendingDir))
	}
	if o.Workspace != "" {
		env = append(env, "SKILL_WORKSPACE="+o.Workspace)
	}
	return tool.Command{Argv: Argv(s, e), Dir: home, Env: env, Timeout: m.Sandbox.Timeout.Std(), Confine: c}, nil
}
