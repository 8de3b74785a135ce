package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// addSkillBuildCmd puts 'build' under root's 'skill' command, adding that
// command when no other has.
func addSkillBuildCmd(a *App, root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.Name() == "skill" {
			c.AddCommand(newSkillBuildCmd(a))
			return
		}
	}
	skill := &cobra.Command{Use: "skill", Short: "Skills: folders that teach the agent a capability"}
	skill.AddCommand(newSkillBuildCmd(a))
	root.AddCommand(skill)
}

func newSkillBuildCmd(a *App) *cobra.Command {
	var gc bool
	var runtime string
	cmd := &cobra.Command{
		Use:   "build [NAME...] [--gc]",
		Short: "Build the images of skills that have a Dockerfile",
		Long: `Build the image of each skill whose manifest names a Dockerfile (image:
dockerfile:), or of the skills named: locally, FROM fluffy's base image,
with no network, tagged fluffy-skill/NAME:KEY, where KEY is a hash of the
Dockerfile and the build context (.dockerignore honoured). An image whose
key is unchanged is not built again. --gc removes the images of skills
that are gone and those a changed skill superseded, never one a
container uses; alone it builds nothing. See docs/skills.md.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runtime == "" {
				runtime = "docker"
				if l, err := a.Config(); err == nil && l.Config.Sandbox.Runtime == "podman" {
					runtime = "podman"
				}
			}
			// The build's output is the skill's commands' (RUN): escaped,
			// as are the names and errors, which come from its files.
			rep, err := a.Core.BuildSkillImages(cmd.Context(), a.user(), sandboxrun.SkillBuild{Runtime: runtime, Names: args, GC: gc, Progress: termsafe.NewWriter(a.Stderr)})
			if ee := (*sandboxrun.EngineError)(nil); errors.As(err, &ee) {
				return &ExitError{Code: ExitSandboxSetup, Msg: "skill build: " + ee.Error()}
			}
			for _, im := range rep.Images {
				switch {
				case im.Err != nil:
					fmt.Fprintf(a.Stdout, "%s failed: %s\n", termsafe.Line(im.Skill), termsafe.Line(im.Err.Error()))
				case im.Base:
					fmt.Fprintf(a.Stdout, "%s %s (base image)\n", termsafe.Line(im.Skill), termsafe.Line(im.Ref))
				case im.Built:
					fmt.Fprintf(a.Stdout, "%s %s built\n", termsafe.Line(im.Skill), im.Ref)
				default:
					fmt.Fprintf(a.Stdout, "%s %s up to date\n", termsafe.Line(im.Skill), im.Ref)
				}
			}
			for _, r := range rep.Removed {
				verb := "removed"
				if r.InUse {
					verb = "kept (in use)"
				}
				fmt.Fprintf(a.Stdout, "%s %s %s (%s)\n", verb, termsafe.Line(r.Skill), termsafe.Line(r.Ref), r.Reason)
			}
			if len(rep.Images) == 0 && !gc && err == nil {
				fmt.Fprintln(a.Stdout, "no skill has a Dockerfile")
			}
			if err != nil && len(rep.Images) > 0 {
				return &ExitError{Code: ExitFailure, Msg: "skill build: a build failed"}
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&gc, "gc", false, "remove the images of skills that are gone and superseded ones")
	cmd.Flags().StringVar(&runtime, "runtime", "", "docker or podman (default from sandbox.runtime, else docker)")
	return cmd
}
