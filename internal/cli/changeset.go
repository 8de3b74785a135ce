package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/lockfile"
	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers"
	"github.com/fluffy-agent/fluffy/internal/store"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// Session change sets from the command line: fluffy changeset ls|diff|
// apply|discard [--session ID] [FILES...]. The running kernel does the
// work when there is one (so it can refuse while the session runs);
// otherwise the command works directly on the data directory, holding the
// change set's lock while it applies or discards.

// sessionChanges runs a changeset.* method for the session (or the
// workspace's latest).
func (a *App) sessionChanges(ctx context.Context, method string, p kernel.ChangesParams) (kernel.ChangesResult, error) {
	var res kernel.ChangesResult
	c, err := a.dialRunning(ctx)
	if err != nil {
		return res, err
	}
	if c == nil {
		// No kernel: hold the lock commands take to start one, so none
		// starts (and runs this session) while we work; one may have
		// started just before.
		unlock, err := a.holdKernelStart(ctx)
		if err != nil {
			return res, err
		}
		defer unlock()
		if c, err = a.dialRunning(ctx); err != nil {
			return res, err
		}
	}
	if c != nil {
		defer c.Close()
		err := c.Call(ctx, method, p, &res)
		return res, sessionErr(err)
	}
	d, err := a.DataDir()
	if err != nil {
		return res, err
	}
	if !fileExists(d.Path(datadir.StateDB)) {
		return res, &ExitError{Code: ExitFailure, Msg: "no session has run yet (no fluffy.db in " + d.Root + ")"}
	}
	db, err := store.OpenMain(ctx, d.Root)
	if err != nil {
		return res, fmt.Errorf("open fluffy.db: %w", err)
	}
	defer db.Close()
	al := a.user().SharedAudit(time.Minute)
	defer al.Close()
	// No kernel runs: a sandbox of another process (fluffy sandbox run)
	// may still have the change set mounted, which its lock says.
	sc := kernel.SessionChanges{DB: db, Audit: al, OwnFiles: a.user().KernelOwnFiles, Hold: lockUpper}
	switch method {
	case kernel.MethodChangesList:
		res, err = sc.List(ctx, p)
	case kernel.MethodChangesDiff:
		res, err = sc.Diff(ctx, p)
	case kernel.MethodChangesApply:
		res, err = sc.Apply(ctx, p)
	case kernel.MethodChangesDiscard:
		res, err = sc.Discard(ctx, p)
	default:
		return res, fmt.Errorf("unknown method %s", method)
	}
	return res, sessionErr(err)
}

// holdKernelStart takes the lock fluffy commands take before they start a
// kernel (beside its socket; see internal/bootstrap), waiting up to 5s.
func (a *App) holdKernelStart(ctx context.Context) (func(), error) {
	sock, err := a.kernelSocket()
	if err != nil {
		return nil, err
	}
	path := sock + ".lock"
	if err := ipc.EnsureDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	l, err := lockfile.Acquire(ctx, path, lockfile.Options{Wait: 5 * time.Second})
	switch {
	case errors.Is(err, lockfile.ErrBusy):
		return nil, &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("another fluffy command is starting the kernel (%s is locked); run the command again", path)}
	case err != nil:
		return nil, err
	}
	return func() { l.Release() }, nil
}

// sessionErr makes the errors a person can fix exit 1 with the message
// alone; invalid paths are usage errors.
func sessionErr(err error) error {
	var ie *ipc.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, changeset.ErrBadPath):
		return fmt.Errorf("%w: %w", errUsage, err)
	case errors.Is(err, kernel.ErrNotFound), errors.Is(err, kernel.ErrBusy), errors.Is(err, kernel.ErrClosed), errors.Is(err, changeset.ErrLocked):
		return &ExitError{Code: ExitFailure, Msg: err.Error()}
	case errors.Is(err, kernel.ErrInvalidPath):
		return fmt.Errorf("%w: %s", errUsage, ie.Message)
	case errors.As(err, &ie):
		return &ExitError{Code: ExitFailure, Msg: ie.Message}
	}
	return err
}

// runSessionChanges is the session mode of the changeset subcommands.
func (a *App) runSessionChanges(ctx context.Context, verb string, f *changesFlags, paths []string, asJSON bool) error {
	p := kernel.ChangesParams{Session: f.session, Paths: paths}
	if p.Session == "" {
		ws := a.Cwd
		if f.workspace != "" {
			ws = f.workspace
			if !filepath.IsAbs(ws) {
				ws = filepath.Join(a.Cwd, ws)
			}
		}
		p.Workspace = repoRoot(ws)
	}
	method := map[string]string{"ls": kernel.MethodChangesList, "diff": kernel.MethodChangesDiff, "apply": kernel.MethodChangesApply, "discard": kernel.MethodChangesDiscard}[verb]
	res, err := a.sessionChanges(ctx, method, p)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(termsafe.NewJSONWriter(a.Stdout))
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
		if len(res.Conflicts) > 0 {
			return &ExitError{Code: ExitFailure}
		}
		return nil
	}
	s := res.Session
	fmt.Fprintf(a.Stderr, "session %s · %s · %s\n", s.ID, s.Status, termsafe.Line(s.Workspace))
	switch verb {
	case "ls":
		for _, c := range res.Changes {
			fmt.Fprintln(a.Stdout, changeLine(c))
		}
	case "diff":
		fmt.Fprint(a.Stdout, termsafe.String(res.Widening))
		fmt.Fprint(a.Stdout, diffOut(a.Stdout, res.Diff))
	case "apply":
		if len(res.Conflicts) > 0 {
			for _, c := range res.Conflicts {
				fmt.Fprintln(a.Stderr, termsafe.String(c.Explain))
			}
			var names []string
			for _, c := range res.Conflicts {
				names = append(names, quotePath(c.Path))
			}
			return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("nothing was applied: %d path(s) changed in the workspace since the change set began (%s).\n"+
				"Apply the other paths by naming them (fluffy changeset apply --session %s PATH...), or discard the conflicting ones (fluffy changeset discard --session %s %s)",
				len(res.Conflicts), strings.Join(names, ", "), s.ID, s.ID, strings.Join(names, " "))}
		}
		for _, c := range res.Changes {
			fmt.Fprintln(a.Stdout, changeLine(c))
		}
		fmt.Fprintf(a.Stdout, "applied %d change(s) to %s\n", len(res.Changes), termsafe.Line(s.Workspace))
	case "discard":
		for _, c := range res.Changes {
			fmt.Fprintln(a.Stdout, changeLine(c))
		}
		fmt.Fprintf(a.Stdout, "discarded %d change(s)\n", len(res.Changes))
	}
	return nil
}

// lockUpper takes the lock beside a change set's upper directory that
// every process takes before it mounts or writes it (internal/sandbox/uppers):
// a process that holds it is an *uppers.BusyError naming it.
func lockUpper(_ context.Context, upper string) (func(), error) {
	l, err := uppers.Lock(upper)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}
