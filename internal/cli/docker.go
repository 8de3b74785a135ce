package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
)

func newSandboxGCCmd(a *App) *cobra.Command {
	var all, dryRun bool
	var runtime string
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove sandbox containers left behind by a fluffy that is gone",
		Long: `Remove the containers fluffy labelled (dev.fluffy.managed=1) whose owning
fluffy process no longer runs, with their anonymous volumes and the
workspace overlays mounted for them. Every fluffy using a container runtime
does this when it starts; run it by hand after a crash. --all removes
every fluffy container, even those of running sessions.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := a.Config()
			if err != nil {
				return err
			}
			if runtime == "" {
				runtime = l.Config.Sandbox.Runtime
			}
			if runtime == "native" || runtime == "auto" {
				runtime = "docker"
			}
			removed, err := a.Core.SandboxGC(cmd.Context(), a.user(), runtime, all, dryRun)
			if ee := (*sandboxrun.EngineError)(nil); errors.As(err, &ee) {
				return &ExitError{Code: ExitSandboxSetup, Msg: "sandbox gc: " + ee.Error()}
			}
			verb := "removed"
			if dryRun {
				verb = "would remove"
			}
			for _, o := range removed {
				fmt.Fprintf(a.Stdout, "%s %.12s session=%s template=%s owner=%s\n", verb, o.ID, o.Session, o.Template, o.Owner)
			}
			if len(removed) == 0 {
				fmt.Fprintln(a.Stdout, "no orphaned sandbox containers")
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "remove every fluffy container, not only orphans")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be removed")
	cmd.Flags().StringVar(&runtime, "runtime", "", "docker or podman (default from sandbox.runtime, else docker)")
	return cmd
}

func newImageCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build the container images sandboxes run in",
	}
	var tag, runtime string
	var minimal bool
	build := &cobra.Command{
		Use:   "build base [--minimal] | build DIR --tag TAG",
		Short: "Build the base image, or a skill image from DIR/Dockerfile",
		Long: `'fluffy image build base' builds fluffy-base:latest locally, without a
registry: Debian's Essential packages with python3, pytest, git and the CA
certificates, from this machine's apt sources by mmdebstrap, imported into
the engine; its default user is not root. 'fluffy image build base
--minimal' builds the busybox one instead (busybox-static and its applets
FROM scratch). 'fluffy image build DIR --tag TAG' builds DIR's Dockerfile.
Each skips the build when an image with the same tag was built from the
same content (label dev.fluffy.content: a hash of the recipe, or of the
Dockerfile and every file of the context). See docs/containers.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runtime == "" {
				runtime = "docker"
				if l, err := a.Config(); err == nil && l.Config.Sandbox.Runtime == "podman" {
					runtime = "podman"
				}
			}
			b := sandboxrun.ImageBuild{Tag: tag, Minimal: minimal}
			if args[0] != "base" {
				if tag == "" {
					return fmt.Errorf("%w: --tag is required for a directory", errUsage)
				}
				if minimal {
					return fmt.Errorf("%w: --minimal is for the base image only", errUsage)
				}
				b.Dir = args[0]
				if !filepath.IsAbs(b.Dir) {
					b.Dir = filepath.Join(a.Cwd, b.Dir)
				}
			}
			res, err := a.Core.BuildImage(cmd.Context(), a.user(), runtime, b)
			if ee := (*sandboxrun.EngineError)(nil); errors.As(err, &ee) {
				return &ExitError{Code: ExitSandboxSetup, Msg: "image build: " + ee.Error()}
			}
			if err != nil {
				return err
			}
			state := "built"
			if res.Cached {
				state = "up to date"
			}
			fmt.Fprintf(a.Stdout, "%s %s (content %.16s)\n", res.Tag, state, res.Content)
			a.Logger().Debug("image build", slog.String("tag", res.Tag), slog.Bool("cached", res.Cached))
			return nil
		},
	}
	build.Flags().StringVar(&tag, "tag", "", "image tag (default fluffy-base:latest for base)")
	build.Flags().StringVar(&runtime, "runtime", "", "docker or podman (default from sandbox.runtime, else docker)")
	build.Flags().BoolVar(&minimal, "minimal", false, "build the busybox base image (FROM scratch, no Python or git)")
	cmd.AddCommand(build)
	return cmd
}
