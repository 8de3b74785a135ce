// Package cli owns fluffy's command-line interface: the cobra command tree,
// global flags, exit codes, and rendering for the terminal. Commands are thin:
// they parse flags, load configuration through App, call into the package
// that owns the work, and print.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// App carries what every command needs. Fields marked "required" must be
// set by the caller of NewRoot; the rest are filled in while running.
type App struct {
	Stdin  io.Reader // required
	Stdout io.Writer // required
	Stderr io.Writer // required
	// Environ is the process environment (os.Environ()); required.
	Environ []string
	// Cwd is the working directory; required.
	Cwd string
	// Self is the path of the fluffy binary, for re-executing itself
	// (sandbox init, doctor probes); required.
	Self string
	// Core is the daemon side (internal/wiring), set by the entry point;
	// commands that run sandboxes, the kernel or its sessions need it.
	Core Core
	// ExecObserver, when set, is told about every sandboxed execution
	// (the audit log's exec.start / exec.end); optional.
	ExecObserver sandbox.Observer
	// Host, when set, is the long-lived process (the sandbox server) this
	// command runs in: its sandbox runtime, which keeps sandboxes started
	// ahead, and its open audit logs are shared by the commands it runs.
	// Nil in a fluffy process of its own.
	Host *sandboxrun.Host

	// early, in the sandbox server, answers the caller with an exit
	// status before the command has finished its clean-up (replyEarly).
	early       func(code int)
	replied     bool
	repliedCode int
	// handOver: the caller's configuration turns the sandbox server off
	// (sandbox.server: off); the server tells the client to run the
	// command itself.
	handOver bool

	// Global flags.
	sets       []string
	home       string
	userConfig string
	logLevel   string
	debug      bool

	env *userenv.Env
}

// ExitError makes a command end with a specific exit status. Msg, when not
// empty, is printed to stderr.
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string {
	if e.Msg != "" {
		return e.Msg
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// Exit codes shared by all commands.
const (
	ExitOK      = 0
	ExitFailure = 1 // a command failed
	ExitUsage   = 2 // bad flags, arguments or configuration
)

// errUsage marks errors that are the caller's input, not a failure: wrap
// it (fmt.Errorf("%w: ...", errUsage)) to exit with ExitUsage.
var errUsage = userenv.ErrUsage

// user is this invocation's view of its user (configuration, data
// directory, policy...), built from the App's fields once the flags are
// parsed.
func (a *App) user() *userenv.Env {
	if a.env == nil {
		a.env = &userenv.Env{Environ: a.Environ, Cwd: a.Cwd, Self: a.Self, Stderr: a.Stderr,
			Home: a.home, UserConfig: a.userConfig, Sets: a.sets, LogLevel: a.logLevel, Debug: a.debug}
	}
	return a.env
}

// Getenv looks a variable up in the app's environment.
func (a *App) Getenv(key string) (string, bool) { return a.user().Getenv(key) }

// abs makes a path from the command line absolute against the app's
// working directory, which is not the process's in the sandbox server.
func (a *App) abs(p string) string { return a.user().Abs(p) }

// Config loads the effective configuration once. An error names the file,
// line and key; the command must stop.
func (a *App) Config() (*config.Loaded, error) { return a.user().Config() }

// DataDir returns the data directory, created with 0700 permissions.
func (a *App) DataDir() (datadir.Dir, error) { return a.user().DataDir() }

// Logger returns the logger for fluffy's own diagnostics (stderr).
func (a *App) Logger() *slog.Logger { return a.user().Logger() }

// NewRoot builds the command tree. Each subcommand lives in its own file
// and is added by addCommands (commands.go).
func NewRoot(a *App) *cobra.Command {
	root := &cobra.Command{
		Use:   "fluffy",
		Short: "A security-first runtime for AI agents",
		Long: `fluffy runs AI agents without handing them your machine.

Every action a model proposes passes a test-first state machine, a policy
engine and, when a rule says so, your approval; it runs in a sandbox and is
recorded in a tamper-evident audit log.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&a.home, "home", "", "data directory (default $FLUFFY_HOME or $XDG_DATA_HOME/fluffy)")
	pf.StringVar(&a.userConfig, "config", "", "user configuration file (default $XDG_CONFIG_HOME/fluffy/config.yaml)")
	pf.StringArrayVar(&a.sets, "set", nil, "set a configuration key for this run, as key=value (repeatable)")
	pf.StringVar(&a.logLevel, "log-level", "", "log level: debug, info, warn or error")
	pf.BoolVar(&a.debug, "debug", false, "log at debug level and show internal details of errors (error types, stack traces)")
	if a.Host != nil {
		// The sandbox server runs only 'sandbox run' (sandboxd.Forwardable):
		// it builds just that, per command.
		root.AddCommand(newSandboxCmd(a))
	} else {
		addCommands(a, root)
	}
	return root
}

// Main runs the CLI and returns the process exit status. Errors are
// printed as one message (what failed, why, what to do); internal
// details — the chain of error types, and the stack of a panic, which is
// a bug — only with --debug.
func Main(ctx context.Context, a *App, args []string) (code int) {
	defer a.recoverPanic(&code)
	root := NewRoot(a)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if a.replied {
		// The exit status went out early (replyEarly); nothing more
		// reaches the caller.
		return a.repliedCode
	}
	return a.exitStatus(err)
}

// replyEarly gives the caller the exit status of err now, when the
// command runs in the sandbox server (App.early), before the command's
// own clean-up ends; Main then returns that status and prints nothing
// more. Elsewhere it does nothing: Main reports err when the command
// returns it.
func (a *App) replyEarly(err error) {
	if a.early == nil || a.replied {
		return
	}
	a.repliedCode = a.exitStatus(err)
	a.replied = true
	a.early(a.repliedCode)
}

// exitStatus prints err (what failed, why, what to do) and returns the
// exit status it means.
func (a *App) exitStatus(err error) (code int) {
	if err == nil {
		return ExitOK
	}
	if a.debug {
		defer printErrorChain(a.Stderr, err)
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Msg != "" {
			fmt.Fprintln(a.Stderr, "fluffy:", termsafe.String(ee.Msg))
		}
		return ee.Code
	}
	msg := err.Error()
	code = ExitFailure
	if errors.Is(err, errUsage) {
		msg = strings.TrimPrefix(msg, errUsage.Error()+": ")
		code = ExitUsage
	} else if isCobraUsage(msg) {
		code = ExitUsage
	}
	// Errors quote names and text from outside (paths, the model's tool
	// names, a fault's message): escaped, they cannot act on the terminal.
	fmt.Fprintln(a.Stderr, "fluffy:", termsafe.String(msg))
	if code == ExitUsage && isCobraUsage(msg) {
		fmt.Fprintln(a.Stderr, "Run 'fluffy --help' for usage.")
	}
	return code
}

// isCobraUsage recognizes cobra's own argument and flag errors, which it
// does not type.
func isCobraUsage(msg string) bool {
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "flag needs an argument", "invalid argument", "accepts ", "requires at least", "requires at most", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// DefaultApp returns an App wired to the real process.
func DefaultApp() (*App, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("locate the fluffy binary: %w", err)
	}
	return &App{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Environ: os.Environ(), Cwd: cwd, Self: self}, nil
}
