package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/skill"
	"github.com/fluffy-agent/fluffy/internal/tui"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// addSkillInstallCmds adds install, grant, pin, verify and digest under
// the skill command, creating it when no other file has.
func addSkillInstallCmds(a *App, root *cobra.Command) {
	var parent *cobra.Command
	for _, c := range root.Commands() {
		if c.Name() == "skill" {
			parent = c
		}
	}
	if parent == nil {
		parent = &cobra.Command{Use: "skill", Short: "Install, grant, pin and verify skills"}
		root.AddCommand(parent)
	}
	parent.AddCommand(newSkillInstallCmd(a), newSkillGrantCmd(a), newSkillPinCmd(a), newSkillVerifyCmd(a), newSkillDigestCmd(a))
}

// skillExit maps the installer's errors to exit statuses: what the person
// must decide (findings, a signature, a changed folder) is a failure with
// the reason; a folder that is no skill is a usage error.
func skillExit(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, skill.ErrNotInstallable), errors.Is(err, skill.ErrNotInstalled), errors.Is(err, skill.ErrUnsupportedFile):
		return fmt.Errorf("%w: %s", errUsage, termsafe.String(err.Error()))
	}
	return &ExitError{Code: ExitFailure, Msg: termsafe.String(err.Error())}
}

func newSkillInstallCmd(a *App) *cobra.Command {
	var insist, asJSON bool
	cmd := &cobra.Command{
		Use:   "install PATH|GIT-URL [--insist]",
		Short: "Install a skill from a folder or a git repository, pinned by its digest, with nothing granted",
		Long: `Copy (or clone) a skill into ~/.config/fluffy/skills/<name>/ and pin it by a
digest of its files. Symlinks and special files are refused. The scanner flags
what supply-chain attacks on skill registries used (encoded shell pipes,
fetch-and-run prerequisites, password-protected archives, binaries, hidden
executables); a flagged skill is refused unless --insist. A signature
(skill.sig) is verified against ~/.config/fluffy/allowed_signers. The skill
starts with no network and no credentials: 'fluffy skill grant NAME' shows what
its manifest asks and records what you grant.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := a.user().InstalledSkills()
			if err != nil {
				return err
			}
			src := args[0]
			if !skill.IsGitURL(src) {
				src = a.abs(src)
			}
			r, findings, err := in.Install(cmd.Context(), src, skill.InstallOptions{Insist: insist})
			if err != nil {
				var fe *skill.FindingsError
				if errors.As(err, &fe) {
					return &ExitError{Code: ExitFailure, Msg: termsafe.String(err.Error()) + "\nnothing was installed; read the files named, and install with --insist only if you trust them"}
				}
				return skillExit(err)
			}
			t := audit.SkillTrust{Action: "install", Name: r.Name, Digest: r.Digest, Source: r.Source, Commit: r.Commit, Signer: r.Signer}
			for _, f := range findings {
				t.Findings = append(t.Findings, f.String())
			}
			if err := a.recordSkillTrust(cmd.Context(), t); err != nil {
				return err
			}
			if asJSON {
				return writeSkillJSON(a.Stdout, r)
			}
			for _, f := range findings {
				fmt.Fprintln(a.Stderr, "insisted past: "+termsafe.Line(f.String()))
			}
			fmt.Fprintf(a.Stdout, "installed %s in %s\npinned %s\n", r.Name, termsafe.Line(in.Dir(r.Name)), r.Digest)
			if r.Signer != "" {
				fmt.Fprintf(a.Stdout, "signed by %s\n", termsafe.Line(r.Signer))
			}
			fmt.Fprintf(a.Stdout, "granted nothing: 'fluffy skill grant %s' shows what it asks\n", r.Name)
			return nil
		},
	}
	cmd.Flags().BoolVar(&insist, "insist", false, "install even though the scanner flags it or its signature does not verify")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the record as JSON")
	return cmd
}

// recordSkillTrust writes a skill.trust entry, durable before it
// returns. The decision has been carried out by then; a log that cannot
// record it makes the command fail, saying so.
func (a *App) recordSkillTrust(ctx context.Context, t audit.SkillTrust) error {
	al := a.user().SharedAudit(time.Minute)
	defer al.Close()
	_, err := al.Append(ctx, audit.Entry{Kind: audit.KindSkillTrust, Actor: audit.ActorUser, Payload: t})
	if err == nil {
		err = al.Flush(ctx)
	}
	if err != nil {
		return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("%s of skill %s done, but the audit log could not record it: %v", t.Action, t.Name, err)}
	}
	return nil
}

func writeSkillJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(termsafe.NewJSONWriter(w))
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newSkillGrantCmd(a *App) *cobra.Command {
	var yes, revoke bool
	cmd := &cobra.Command{
		Use:   "grant NAME [--yes | --revoke]",
		Short: "Show what an installed skill's manifest asks (hosts, credentials) and grant it",
		Long: `An installed skill's runs get no network and no credentials until you grant
what its manifest asks. This shows the hosts and credentials it asks for, under
its pin, and records the grant. A later re-pin keeps the grant, but what the
new manifest adds needs a new grant. --revoke takes everything back.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := a.user().InstalledSkills()
			if err != nil {
				return err
			}
			name := args[0]
			if revoke {
				r, err := in.SetGrant(cmd.Context(), name, nil)
				if err != nil {
					return skillExit(err)
				}
				if err := a.recordSkillTrust(cmd.Context(), audit.SkillTrust{Action: "revoke", Name: name, Digest: r.Digest}); err != nil {
					return err
				}
				fmt.Fprintf(a.Stdout, "revoked: %s gets no network and no credentials\n", name)
				return nil
			}
			m, digest, err := in.Asks(name)
			if err != nil {
				return skillExit(err)
			}
			if len(m.Network) == 0 && len(m.Credentials) == 0 {
				fmt.Fprintf(a.Stdout, "%s asks for no network and no credentials: nothing to grant\n", name)
				return nil
			}
			fmt.Fprintf(a.Stdout, "%s (pinned %s) asks for:\n", name, digest)
			for _, h := range m.Network {
				fmt.Fprintf(a.Stdout, "  network     %s\n", termsafe.Line(h))
			}
			for _, c := range m.Credentials {
				fmt.Fprintf(a.Stdout, "  credential  %s\n", termsafe.Line(skillCredentialLine(c)))
			}
			if len(m.Classification) > 0 {
				fmt.Fprintf(a.Stdout, "  it says it: %s\n", termsafe.Line(strings.Join(m.Classification, ", ")))
			}
			if ok, err := confirmUnless(a, yes, "grant all of it?"); err != nil {
				return err
			} else if !ok {
				return &ExitError{Code: ExitFailure, Msg: "nothing granted"}
			}
			if _, err := in.SetGrant(cmd.Context(), name, &skill.Grant{Network: m.Network, Credentials: m.Credentials, Digest: digest}); err != nil {
				return skillExit(err)
			}
			t := audit.SkillTrust{Action: "grant", Name: name, Digest: digest, Network: m.Network}
			for _, c := range m.Credentials {
				t.Credentials = append(t.Credentials, c.Ref)
			}
			if err := a.recordSkillTrust(cmd.Context(), t); err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "granted %s %d host(s) and %d credential(s)\n", name, len(m.Network), len(m.Credentials))
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "grant without asking")
	cmd.Flags().BoolVar(&revoke, "revoke", false, "take back everything granted")
	return cmd
}

func skillCredentialLine(c skill.Credential) string {
	s := c.Ref + " as " + c.As
	if c.Name != "" {
		s += " " + c.Name
	}
	if len(c.Bind) > 0 {
		s += " for " + strings.Join(c.Bind, ", ")
	}
	return s
}

func newSkillPinCmd(a *App) *cobra.Command {
	var yes, insist bool
	cmd := &cobra.Command{
		Use:   "pin NAME [--yes] [--insist]",
		Short: "Review how an installed skill's folder differs from its pin, and re-pin it",
		Long: `An installed skill changes only through a reviewed diff: edit its folder (its
files are read-only as installed; make them writable), then 'fluffy skill pin
NAME' shows the diff against the pinned copy, what the manifest widens, and
what the scanner flags, and re-pins what you reviewed. Until then the skill is
refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := a.user().InstalledSkills()
			if err != nil {
				return err
			}
			name := args[0]
			rv, err := in.Review(name)
			if err != nil {
				return skillExit(err)
			}
			if len(rv.Changed) == 0 {
				fmt.Fprintf(a.Stdout, "%s matches its pin %s: nothing to review\n", name, rv.Pinned)
				return nil
			}
			if s := skill.WideningSummary(name, rv.Widening); s != "" {
				fmt.Fprint(a.Stdout, termsafe.String(s))
			}
			for _, f := range rv.Findings {
				fmt.Fprintln(a.Stdout, "FLAGGED "+termsafe.Line(f.String()))
			}
			fmt.Fprint(a.Stdout, diffOut(a.Stdout, termsafe.String(rv.Diff)))
			if ok, err := confirmUnless(a, yes, fmt.Sprintf("pin %s as shown (%s)?", name, rv.Current)); err != nil {
				return err
			} else if !ok {
				return &ExitError{Code: ExitFailure, Msg: "not pinned: the skill is refused until it matches a pin"}
			}
			r, err := in.Repin(cmd.Context(), name, rv.Current, insist)
			if err != nil {
				return skillExit(err)
			}
			t := audit.SkillTrust{Action: "pin", Name: name, Digest: r.Digest, Previous: rv.Pinned, Changed: rv.Changed}
			for _, c := range rv.Widening {
				t.Widening = append(t.Widening, c.String())
			}
			for _, f := range r.Insisted {
				t.Findings = append(t.Findings, f.String())
			}
			if err := a.recordSkillTrust(cmd.Context(), t); err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "pinned %s %s\n", name, r.Digest)
			if len(rv.Widening) > 0 {
				fmt.Fprintf(a.Stdout, "what it newly asks is not granted: 'fluffy skill grant %s'\n", name)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "re-pin without asking (after reading the review)")
	cmd.Flags().BoolVar(&insist, "insist", false, "re-pin even though the scanner flags it")
	return cmd
}

// skillPinStatus is the line 'fluffy skill show' and 'verify' print about
// an installed skill's pin: "" for a skill that was not installed.
func skillPinStatus(in *skill.Installed, name string) string {
	r, err := in.Check(name)
	switch {
	case errors.Is(err, skill.ErrNotInstalled):
		return ""
	case err != nil:
		return "REFUSED: " + err.Error()
	}
	s := "pinned " + r.Digest + " (installed from " + r.Source + ")"
	if r.Signer != "" {
		s += ", signed by " + r.Signer
	}
	if r.Grant == nil {
		s += "; nothing granted"
	} else {
		s += fmt.Sprintf("; granted %d host(s), %d credential(s)", len(r.Grant.Network), len(r.Grant.Credentials))
	}
	return s
}

func newSkillVerifyCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "verify [NAME...]",
		Short: "Check installed skills against their pins (default: all)",
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := a.user().InstalledSkills()
			if err != nil {
				return err
			}
			names := args
			if len(names) == 0 {
				rs, err := in.Records()
				if err != nil {
					return err
				}
				for _, r := range rs {
					names = append(names, r.Name)
				}
			}
			bad := 0
			for _, n := range names {
				s := skillPinStatus(in, n)
				if s == "" {
					s = "not installed (no pin)"
					bad++
				} else if strings.HasPrefix(s, "REFUSED") {
					bad++
				}
				fmt.Fprintf(a.Stdout, "%s: %s\n", termsafe.Line(n), termsafe.Line(s))
			}
			if bad > 0 {
				return &ExitError{Code: ExitFailure}
			}
			return nil
		},
	}
}

func newSkillDigestCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "digest DIR",
		Short: "Print a skill folder's digest: what its pin is, and what a signature signs",
		Long: `Prints the digest a skill's folder is pinned by. An author signs it with
  fluffy skill digest DIR > digest
  ssh-keygen -Y sign -f KEY -n fluffy-skill digest
  mv digest.sig DIR/skill.sig`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := skill.Digest(a.abs(args[0]))
			if err != nil {
				return skillExit(err)
			}
			fmt.Fprintln(a.Stdout, d)
			return nil
		},
	}
}

// widening is a change set review's skill flag (kernel.SkillReview),
// bold where the terminal shows it, escaped.
func widening(caps tui.Caps, s string) string {
	if s == "" {
		return ""
	}
	return caps.Paint(tui.Bold, termsafe.String(s))
}
