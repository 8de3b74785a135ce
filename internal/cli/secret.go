package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/secret"
	"github.com/fluffy-agent/fluffy/internal/skill"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

func newSecretCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "List, test and set the secrets fluffy hands to declared uses (docs/secrets.md)",
	}
	cmd.AddCommand(newSecretLsCmd(a), newSecretTestCmd(a), newSecretSetCmd(a))
	return cmd
}

// terminalPrompt asks on the controlling terminal without echo; without
// one it is userenv.ErrNoPassword.
func terminalPrompt(ctx context.Context, what string) ([]byte, error) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, userenv.ErrNoPassword)
	}
	defer tty.Close()
	return readHidden(tty, tty, what)
}

// readHidden prints the prompt and reads one line from f with echo off.
func readHidden(f *os.File, out io.Writer, what string) ([]byte, error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, userenv.ErrNoPassword)
	}
	quiet := *old
	quiet.Lflag &^= unix.ECHO
	quiet.Lflag |= unix.ICANON
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &quiet); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer func() {
		_ = unix.IoctlSetTermios(fd, unix.TCSETS, old)
		fmt.Fprintln(out)
	}()
	fmt.Fprintf(out, "%s: ", what)
	return readLine(f)
}

// readLine reads up to a newline into a buffer of its own (bounded), so
// the caller can zero the result.
func readLine(r io.Reader) ([]byte, error) {
	buf := make([]byte, secret.MaxFileSecret)
	n := 0
	one := make([]byte, 1)
	for n < len(buf) {
		m, err := r.Read(one)
		if m == 1 {
			if one[0] == '\n' {
				break
			}
			buf[n] = one[0]
			n++
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			clear(buf)
			return nil, err
		}
	}
	v := slices.Clone(buf[:n])
	clear(buf)
	if len(v) > 0 && v[len(v)-1] == '\r' {
		v = v[:len(v)-1]
	}
	return v, nil
}

func newSecretLsCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the backends, the secrets and who uses them (never a value)",
		Long: `ls lists each configured backend with its state (unlocked, locked,
unreachable, as this process sees it), then every secret a declared use
(secrets.uses), a channel (serve.webhooks) or a skill's manifest names, with
what uses it, and the age store's entries. It never prints a value; listing the
age store asks for its passphrase when it has no identity file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := a.Config()
			if err != nil {
				return err
			}
			bs, err := a.user().SecretBackends(terminalPrompt)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "BACKEND\tSTATE\tDETAIL")
			var names []string
			for n := range bs {
				names = append(names, n)
			}
			slices.Sort(names)
			for _, n := range names {
				st, detail := secret.Unlocked, ""
				if s, ok := bs[n].(secret.Stater); ok {
					st, detail = s.State(cmd.Context())
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", n, st, termsafe.String(detail))
			}
			fmt.Fprintln(tw)
			users := map[string][]string{}
			uses, useErr := a.user().SecretUses()
			for _, u := range uses {
				users[u.Ref.String()] = append(users[u.Ref.String()], describeUse(u))
			}
			for _, h := range l.Config.Serve.Webhooks {
				if r, err := secret.ParseRef(h.Secret); err == nil {
					users[r.String()] = append(users[r.String()], "serve.webhooks "+h.Name)
				}
			}
			// What each skill's manifest asks for (an installed skill
			// gets it only once granted: fluffy skill show says).
			for _, sk := range skill.Discover(a.skillRoots()).Skills {
				for _, c := range sk.Manifest.Credentials {
					if r, err := secret.ParseRef(c.Ref); err == nil {
						users[r.String()] = append(users[r.String()], fmt.Sprintf("skill %s (%s %s)", sk.Name, c.As, c.Name))
					}
				}
			}
			if ag, ok := bs["age"].(*secret.Age); ok {
				if entries, err := ag.Names(cmd.Context()); err == nil {
					for _, e := range entries {
						r := secret.Ref{Backend: "age", Path: e}.String()
						if users[r] == nil {
							users[r] = nil
						}
					}
				} else if !errors.Is(err, userenv.ErrNoPassword) {
					fmt.Fprintf(a.Stderr, "fluffy: the age store's entries are not listed: %v\n", err)
				}
			}
			fmt.Fprintln(tw, "SECRET\tUSED BY")
			var refs []string
			for r := range users {
				refs = append(refs, r)
			}
			slices.Sort(refs)
			for _, r := range refs {
				by := strings.Join(users[r], "; ")
				if by == "" {
					by = "(no declared use)"
				}
				fmt.Fprintf(tw, "%s\t%s\n", termsafe.String(r), termsafe.String(by))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			return useErr
		},
	}
}

// describeUse says how a declared use hands its secret out.
func describeUse(u secret.Use) string {
	var b strings.Builder
	switch u.As {
	case secret.AsEnv:
		fmt.Fprintf(&b, "env %s", u.Name)
	case secret.AsFile:
		fmt.Fprintf(&b, "file %s", u.Name)
	case secret.AsStdin:
		b.WriteString("stdin")
	case secret.AsProxy:
		fmt.Fprintf(&b, "proxy %s for %s", u.Name, strings.Join(u.Bind, ","))
	}
	fmt.Fprintf(&b, " to %s", strings.Join(u.Commands, ","))
	if len(u.Templates) > 0 {
		fmt.Fprintf(&b, " in %s", strings.Join(u.Templates, ","))
	}
	return b.String()
}

func newSecretTestCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "test REF",
		Short: "Say whether a reference resolves (its fingerprint, never its value)",
		Long: `test resolves REF (secret://BACKEND/PATH, env:VAR or file:PATH) through its
backend, prints its keyed fingerprint (the one the audit log records for its
uses) and forgets the value. It asks for a passphrase or master password on
the terminal when the backend needs one and no password file is configured.
It exits 1 when the reference does not resolve.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := secret.ParseRef(args[0])
			if err != nil {
				return fmt.Errorf("%w: %w", errUsage, err)
			}
			b, err := a.user().SecretBroker(terminalPrompt)
			if err != nil {
				return err
			}
			defer b.Close(context.WithoutCancel(cmd.Context()))
			fp, err := b.Test(cmd.Context(), ref)
			if err != nil {
				return &ExitError{Code: ExitFailure, Msg: termsafe.String(err.Error())}
			}
			fmt.Fprintf(a.Stdout, "%s resolves (%s)\n", ref, fp)
			return nil
		},
	}
}

func newSecretSetCmd(a *App) *cobra.Command {
	var del bool
	cmd := &cobra.Command{
		Use:   "set NAME",
		Short: "Store a value in the age store as secret://age/NAME",
		Long: `set asks for the value on the terminal (without echo), or reads it from
standard input when that is not a terminal (one line; a trailing newline is
not part of it), and stores it in the age store under NAME, re-encrypting the
store to its identity or passphrase. --delete removes the entry.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bs, err := a.user().SecretBackends(terminalPrompt)
			if err != nil {
				return err
			}
			ag, ok := bs["age"].(*secret.Age)
			if !ok {
				return fmt.Errorf("%w: no age store configured", errUsage)
			}
			defer func() { _ = ag.Lock(context.WithoutCancel(cmd.Context())) }()
			if del {
				if err := ag.Set(cmd.Context(), args[0], nil); err != nil {
					return err
				}
				fmt.Fprintf(a.Stdout, "removed secret://age/%s\n", args[0])
				return nil
			}
			var v []byte
			if f, ok := a.Stdin.(*os.File); ok && isTerminal(f) {
				v, err = readHidden(f, a.Stderr, "value of "+args[0])
			} else {
				v, err = readLine(bufio.NewReader(a.Stdin))
			}
			if err != nil {
				return err
			}
			defer clear(v)
			if len(v) == 0 {
				return fmt.Errorf("%w: an empty value (use --delete to remove an entry)", errUsage)
			}
			if err := ag.Set(cmd.Context(), args[0], v); err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "stored secret://age/%s\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&del, "delete", false, "remove the entry")
	return cmd
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
