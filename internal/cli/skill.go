package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/skill"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// newSkillCmd is "fluffy skill" and its subcommands; more (install,
// build) attach to it through extra.
func newSkillCmd(a *App, extra ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "skill",
		Short: "List, show, scaffold, run, test and remove skills",
		Long: `A skill is a folder with SKILL.md (name, description, instructions) and an
optional skill.yaml manifest (credentials, network, classification, sandbox,
image, entrypoints). fluffy finds skills in the assistant workspace's
skills/, in ~/.config/fluffy/skills/ and in the repository's .fluffy/skills/
(a project skill can only tighten). Sessions list them in the system prompt;
the agent loads one with skill.load and runs its entrypoints with skill.run.
See docs/skills.md.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newSkillLsCmd(a), newSkillShowCmd(a), newSkillNewCmd(a), newSkillRunCmd(a), newSkillTestCmd(a), newSkillRmCmd(a))
	cmd.AddCommand(extra...)
	return cmd
}

// skillRoots are the folders this invocation's skills come from: the
// assistant workspace's (when the daemon side can say where it is), the
// person's beside the user configuration, the repository's of the
// working directory.
func (a *App) skillRoots() []skill.Root {
	var aws string
	if a.Core != nil {
		aws, _ = a.Core.AssistantWorkspace(a.user())
	}
	return skill.Roots(aws, filepath.Dir(a.user().UserSkillsDir()), repoRoot(a.Cwd))
}

// userSkillsDir is ~/.config/fluffy/skills, where the person's own
// skills and installed ones live.
func (a *App) userSkillsDir() string { return a.user().UserSkillsDir() }

type skillJSON struct {
	Name           string   `json:"name"`
	Description    string   `json:"description"`
	Scope          string   `json:"scope"`
	Dir            string   `json:"dir"`
	Network        []string `json:"network,omitempty"`
	Credentials    []string `json:"credentials,omitempty"`
	Classification []string `json:"classification,omitempty"`
	Entrypoints    []string `json:"entrypoints,omitempty"`
	Image          string   `json:"image,omitempty"`
}

func toSkillJSON(s skill.Skill) skillJSON {
	j := skillJSON{Name: s.Name, Description: s.Description, Scope: string(s.Scope), Dir: s.Dir,
		Network: s.Manifest.Network, Classification: s.Manifest.Classification, Image: s.Manifest.Image.Dockerfile}
	for _, c := range s.Manifest.Credentials {
		j.Credentials = append(j.Credentials, fmt.Sprintf("%s as %s %s", c.Ref, c.As, c.Name))
	}
	for _, e := range s.Manifest.Entrypoints {
		j.Entrypoints = append(j.Entrypoints, e.Name)
	}
	return j
}

func newSkillLsCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the skills in force here, and those left out with why",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			set := skill.Discover(a.skillRoots())
			if asJSON {
				out := struct {
					Skills   []skillJSON `json:"skills"`
					Problems []string    `json:"problems"`
				}{Skills: []skillJSON{}, Problems: []string{}}
				for _, s := range set.Skills {
					out.Skills = append(out.Skills, toSkillJSON(s))
				}
				for _, p := range set.Problems {
					out.Problems = append(out.Problems, p.String())
				}
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			if len(set.Skills) == 0 {
				fmt.Fprintln(a.Stdout, "no skills (create one: fluffy skill new NAME)")
			}
			for _, s := range set.Skills {
				fmt.Fprintf(a.Stdout, "%-20s %-9s %s\n", termsafe.Line(s.Name), s.Scope, termsafe.Line(skillLine(s.Description)))
			}
			printSkillProblems(a, set.Problems)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printSkillProblems(a *App, ps []skill.Problem) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintln(a.Stdout, "\nleft out or replaced:")
	for _, p := range ps {
		fmt.Fprintf(a.Stdout, "  %s\n", termsafe.Line(p.String()))
	}
}

func skillLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func newSkillShowCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a skill: where it is, what its manifest asks for, its instructions",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			set := skill.Discover(a.skillRoots())
			s, ok := set.Lookup(args[0])
			if !ok {
				var mine []skill.Problem
				for _, p := range set.Problems {
					if strings.Contains(p.File, string(filepath.Separator)+args[0]+string(filepath.Separator)) {
						mine = append(mine, p)
					}
				}
				printSkillProblems(a, mine)
				return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("no skill %q in force here (fluffy skill ls lists them)", args[0])}
			}
			if asJSON {
				out := struct {
					skillJSON
					Body string `json:"body"`
				}{toSkillJSON(s), s.Body}
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			j := toSkillJSON(s)
			w := a.Stdout
			fmt.Fprintf(w, "name:           %s\nscope:          %s\nfolder:         %s\ndescription:    %s\n", termsafe.Line(j.Name), j.Scope, termsafe.Line(j.Dir), termsafe.Line(skillLine(j.Description)))
			fmt.Fprintf(w, "network:        %s\n", orNone(j.Network))
			fmt.Fprintf(w, "credentials:    %s\n", orNone(j.Credentials))
			fmt.Fprintf(w, "classification: %s\n", orNone(j.Classification))
			image := "the default image"
			if j.Image != "" {
				image = j.Image + " (built with fluffy skill build " + j.Name + ")"
			}
			fmt.Fprintf(w, "image:          %s\n", termsafe.Line(image))
			for _, e := range s.Manifest.Entrypoints {
				fmt.Fprintf(w, "entrypoint:     %s: %s\n", termsafe.Line(e.Name), termsafe.Line(strings.Join(e.Command, " ")))
			}
			if s.Scope == skill.ScopeUser {
				a.showInstalled(s.Name)
			}
			fmt.Fprintf(w, "\n%s\n", termsafe.String(strings.TrimSpace(s.Body)))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return termsafe.Line(strings.Join(l, ", "))
}

func newSkillNewCmd(a *App) *cobra.Command {
	var project bool
	cmd := &cobra.Command{
		Use:   "new NAME",
		Short: "Create a working example skill to start from",
		Long: `new writes a skill named NAME into ~/.config/fluffy/skills/NAME (with
--project, into the repository's .fluffy/skills/NAME): SKILL.md, skill.yaml
with a "hello" entrypoint that reads its JSON arguments from stdin, and a
"test" entrypoint running tests/run.sh, which 'fluffy skill test NAME' runs.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			root := a.userSkillsDir()
			if project {
				root = filepath.Join(repoRoot(a.Cwd), ".fluffy", "skills")
			}
			dir, err := scaffoldSkill(root, name)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "created %s\ntry it: fluffy skill test %s\n", dir, name)
			return nil
		},
	}
	cmd.Flags().BoolVar(&project, "project", false, "create it in the repository's .fluffy/skills/")
	return cmd
}

// scaffoldSkill writes the example skill name under root and checks it
// loads.
func scaffoldSkill(root, name string) (string, error) {
	if _, _, err := skill.ParseSkillMD("SKILL.md", []byte("---\nname: "+name+"\ndescription: x\n---\n")); err != nil {
		return "", &ExitError{Code: ExitUsage, Msg: fmt.Sprintf("%q is not a skill name: lower-case letters, digits and single hyphens", name)}
	}
	dir := filepath.Join(root, name)
	if _, err := os.Lstat(dir); err == nil {
		return "", &ExitError{Code: ExitFailure, Msg: dir + " exists"}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	files := []struct {
		name, content string
		mode          os.FileMode
	}{
		{skill.SkillFile, fmt.Sprintf(`---
name: %s
description: Says hello to someone. Replace this line with what the skill does and when to use it.
---
# %s

Run the hello entrypoint with {"who": "NAME"}; it answers with a greeting.
Its files are at /skills/%s inside the run, read-only.
`, name, name, name), 0o644},
		{skill.ManifestFile, `# The security facts of the skill (docs/skills.md). Nothing stated: no
# credentials, no network.
# credentials:
#   - {ref: "secret://age/NAME", as: env, name: API_TOKEN}
# network: [api.example.com]
# classification: [sends-messages]
sandbox: {timeout: 30s}
entrypoints:
  - name: hello
    description: greet someone
    command: [./hello.sh]
    args:
      type: object
      properties: {who: {type: string}}
      required: [who]
  - name: test
    description: the skill's own tests
    command: [./tests/run.sh]
`, 0o644},
		{"hello.sh", `#!/bin/sh
# The arguments arrive as one JSON object on stdin.
who=$(sed -n 's/.*"who" *: *"\([^"]*\)".*/\1/p')
echo "hello, ${who:-nobody}"
`, 0o755},
		{"tests/run.sh", `#!/bin/sh
# The skill's tests: run by 'fluffy skill test', in the skill's sandbox.
set -e
out=$(echo '{"who":"test"}' | "$SKILL_DIR/hello.sh")
[ "$out" = "hello, test" ] || { echo "FAIL: hello.sh said: $out"; exit 1; }
echo "ok"
`, 0o755},
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte(f.content), f.mode); err != nil {
			return "", err
		}
	}
	if _, err := skill.Load(dir, skill.ScopeUser); err != nil {
		return "", fmt.Errorf("the new skill does not load: %w", err)
	}
	return dir, nil
}

func newSkillRunCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "run NAME ENTRYPOINT [ARGS-JSON]",
		Short: "Run a skill's entrypoint through the same gates as the agent's call",
		Long: `run makes the call the agent would make, skill.run NAME ENTRYPOINT with
the arguments given as a JSON object, in a session of its own: the state
gate, the policy, an approval when the policy asks for one, the skill's
sandbox, the audit log. The session's model is a one-call script, so its
record names the call as the agent's would.`,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw := "{}"
			if len(args) == 3 {
				raw = args[2]
			}
			return a.runSkill(cmd.Context(), args[0], args[1], raw)
		},
	}
}

func newSkillTestCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "test NAME",
		Short: "Run a skill's own tests (its entrypoint named test) in its sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, ok := skill.Discover(a.skillRoots()).Lookup(args[0])
			if !ok {
				return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("no skill %q in force here (fluffy skill ls lists them)", args[0])}
			}
			has := false
			for _, e := range s.Manifest.Entrypoints {
				has = has || e.Name == "test"
			}
			if !has {
				return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("skill %q has no entrypoint named test: its tests are what that entrypoint runs (fluffy skill new scaffolds one running tests/run.sh)", s.Name)}
			}
			return a.runSkill(cmd.Context(), s.Name, "test", "{}")
		},
	}
}

// runSkill runs skill.run in a session whose model is a one-call replay
// script, so the call takes every gate the agent's would.
func (a *App) runSkill(ctx context.Context, name, entry, rawArgs string) error {
	var args map[string]any
	if err := json.Unmarshal([]byte(rawArgs), &args); err != nil {
		return &ExitError{Code: ExitUsage, Msg: fmt.Sprintf("the arguments are one JSON object: %v", err)}
	}
	call, err := json.Marshal(map[string]any{"turn": map[string]any{
		"text":       fmt.Sprintf("Running skill %s, entrypoint %s.", name, entry),
		"tool_calls": []any{map[string]any{"id": "run", "name": "skill.run", "args": map[string]any{"name": name, "entrypoint": entry, "args": args}}},
	}})
	if err != nil {
		return err
	}
	script := string(call) + "\n" + `{"expect": {"id": "run", "is_error": false}}` + "\n" +
		`{"turn": {"text": "The entrypoint ran."}}` + "\n" + `{"end": {}}` + "\n"
	f, err := os.CreateTemp(a.user().TempDir(), "fluffy-skill-run-*.jsonl")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(script); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return a.runTask(ctx, fmt.Sprintf("skill run %s %s", name, entry), taskFlags{noApply: true, model: "replay/" + f.Name()})
}

func newSkillRmCmd(a *App) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a skill of yours (~/.config/fluffy/skills/NAME), after asking",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			dir := filepath.Join(a.userSkillsDir(), name)
			s, err := skill.Load(dir, skill.ScopeUser)
			if err != nil {
				if _, serr := os.Lstat(dir); serr != nil {
					return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("no skill %q in %s (rm removes only your own skills)", name, a.userSkillsDir())}
				}
				// An invalid skill can be removed too: the folder is
				// the person's.
				s = skill.Skill{Name: name, Dir: dir}
			}
			if !yes {
				ok, err := confirm(a, fmt.Sprintf("remove skill %s (%s)?", name, s.Dir))
				if err != nil {
					return err
				}
				if !ok {
					return &ExitError{Code: ExitFailure, Msg: "not removed"}
				}
			}
			if err := os.RemoveAll(s.Dir); err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "removed %s\n", s.Dir)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask")
	return cmd
}

// showInstalled says, for a skill installed from elsewhere, whether its
// files still match their pin and what its runs get of what it asks
// (docs/skills.md).
func (a *App) showInstalled(name string) {
	inst, err := a.user().InstalledSkills()
	if err != nil {
		return
	}
	if _, err := inst.Record(name); err != nil {
		return
	}
	hosts, creds, err := inst.Granted(name)
	w := a.Stdout
	if err != nil {
		fmt.Fprintf(w, "installed:      refused, its runs are left out: %s\n", termsafe.Line(err.Error()))
		return
	}
	var cs []string
	for _, c := range creds {
		cs = append(cs, c.Ref+" as "+c.As+" "+c.Name)
	}
	fmt.Fprintf(w, "installed:      runs get network %s; credentials %s (fluffy skill grant %s)\n", orNone(hosts), orNone(cs), termsafe.Line(name))
}
