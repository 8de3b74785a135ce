package sandboxrun

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandboxd"
	"github.com/fluffy-agent/fluffy/internal/units"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// result says what a run's result means to the user: the notes for
// stderr, the exit status and why. An invalid spec is the caller's
// mistake: an error wrapping userenv.ErrUsage.
func (x *run) result(ctx context.Context, res sandbox.Result, err error) (Outcome, error) {
	var o Outcome
	for _, w := range res.Warnings {
		if strings.HasPrefix(w, "DEGRADED") || !x.req.Quiet {
			o.Notes = append(o.Notes, "sandbox: "+w)
		}
	}
	if err != nil {
		if sig, ok := interruptedBy(ctx); ok && errors.Is(err, context.Canceled) {
			// Ctrl-C (or a kill) while the command ran: the sandbox is
			// gone with everything in it; exit as a shell would.
			o.Reason, o.Code = ReasonInterrupted, 128+int(sig)
			o.Msg = fmt.Sprintf("sandbox: interrupted by %s; the command and everything it started were killed", sandboxd.SignalName(sig))
			return o, nil
		}
		switch {
		case errors.Is(err, sandbox.ErrCommandNotFound):
			o.Reason, o.Code = ReasonNotFound, ExitNotFound
			o.Msg = "sandbox: " + strings.TrimPrefix(err.Error(), sandbox.ErrInvalidSpec.Error()+": ")
		case errors.Is(err, sandbox.ErrInvalidSpec):
			return o, fmt.Errorf("%w: %w", userenv.ErrUsage, err)
		default:
			o.Reason, o.Code, o.Msg = ReasonSetup, ExitSetup, "sandbox: "+err.Error()
		}
		return o, nil
	}
	x.notes(ctx, &o, res)
	spec := x.spec
	switch res.Killed {
	case sandbox.LimitTime:
		o.Reason, o.Code = ReasonTimeout, ExitTimeout
		o.Msg = fmt.Sprintf("sandbox: killed: the timeout (%s) elapsed; every process in the sandbox was killed", spec.Limits.Wall)
		return o, nil
	case sandbox.LimitMemory:
		o.Reason, o.Code, o.Msg = ReasonLimit, ExitLimit, x.memoryMsg(res)
		return o, nil
	case sandbox.LimitCPU, sandbox.LimitFileSize:
		o.Reason, o.Code = ReasonLimit, ExitLimit
		o.Msg = fmt.Sprintf("sandbox: killed: the %s limit was reached", res.Killed)
		return o, nil
	}
	if res.HitLimit(sandbox.LimitChangeSet) {
		csFullMsg := fmt.Sprintf("sandbox: the throw-away change set hit its size bound (%s, the memory limit): writes to the workspace beyond it failed with ENOSPC (no space left on device); pass --changeset DIR to write them to disk, or raise --memory", units.Size(spec.ChangeSetSize))
		if res.Signal == 0 && res.ExitCode == 0 {
			// Writes were lost and the command did not say so: the run
			// fails rather than look complete.
			o.Reason, o.Code, o.Msg = ReasonLimit, ExitLimit, csFullMsg
			return o, nil
		}
		o.Notes = append(o.Notes, csFullMsg)
	}
	if res.Signal != 0 {
		o.Reason, o.Code = ReasonSignal, 128+res.Signal
		o.Msg = fmt.Sprintf("sandbox: the command was killed by signal %d (%s)", res.Signal, syscall.Signal(res.Signal))
		return o, nil
	}
	o.Reason, o.Code = ReasonExit, res.ExitCode
	return o, nil
}

// notes adds what a finished run tells besides its status: the writes a
// throw-away change set discarded, the limits that refused something.
func (x *run) notes(ctx context.Context, o *Outcome, res sandbox.Result) {
	spec := x.spec
	switch {
	case x.tempCS != "" && spec.ChangeSetSize > 0:
		// Kept inside the sandbox: gone with it, counted there.
		if res.ChangeSetWritten {
			o.Notes = append(o.Notes, "sandbox: the changes to the workspace were discarded (the throw-away change set was in memory); pass --changeset DIR to keep them")
		}
	case x.tempCS != "":
		if ch, err := upperChanges(ctx, spec.Workspace, x.tempCS); err == nil && len(ch) > 0 {
			o.Notes = append(o.Notes, fmt.Sprintf("sandbox: %d change(s) to the workspace were discarded; pass --changeset DIR to keep them", len(ch)))
		}
	}
	if res.HitLimit(sandbox.LimitPids) && !x.req.Quiet {
		o.Notes = append(o.Notes, fmt.Sprintf("sandbox: the process limit (%d) refused at least one fork", spec.Limits.Pids))
	}
	if res.HitLimit(sandbox.LimitTmp) && !x.req.Quiet {
		o.Notes = append(o.Notes, fmt.Sprintf("sandbox: /tmp filled up (%s)", units.Size(spec.TmpSize)))
	}
}

// memoryMsg says the memory limit killed the command, and when what it
// wrote to an in-memory throw-away change set is a real part of the
// limit, how to keep that on disk.
func (x *run) memoryMsg(res sandbox.Result) string {
	spec := x.spec
	msg := fmt.Sprintf("sandbox: killed: the memory limit (%s) was reached", units.Size(spec.Limits.Memory))
	// The hint only when the workspace writes are a real part of the
	// limit: a plain memory hog should not be told about them.
	if x.tempInMemory && x.tempCS != "" && spec.ChangeSetSize > 0 && res.ChangeSetWritten {
		msg += "; what the command wrote to the workspace counts against it (the throw-away change set is in memory): pass --changeset DIR to write it to disk"
	} else if x.tempInMemory && x.tempCS != "" {
		if n := TreeBytes(x.tempCS); n >= spec.Limits.Memory/10 {
			msg += fmt.Sprintf("; the %s the command wrote to the workspace count against it (the throw-away change set is in memory, in %s): pass --changeset DIR to write them to disk", units.Size(n).Approx(), memScratch)
		}
	}
	return msg
}

// interruptedBy returns the signal that cancelled ctx: one this process
// caught (*Interrupted) or one a client of the sandbox server forwarded.
func interruptedBy(ctx context.Context) (syscall.Signal, bool) {
	cause := context.Cause(ctx)
	var in *Interrupted
	if errors.As(cause, &in) {
		return in.Signal, true
	}
	var fwd *sandboxd.SignalError
	if errors.As(cause, &fwd) {
		return fwd.Signal, true
	}
	return 0, false
}

// TreeBytes is the space the regular files under dir take (allocated
// blocks: a sparse file's holes take none; symlinks not followed; what
// cannot be read counts nothing).
func TreeBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512
				}
			}
		}
		return nil
	})
	return n
}

// upperChanges lists what an overlay upper directory changes over the
// workspace (internal/changeset reads it: whiteouts, opaque directories,
// no symlink followed).
func upperChanges(ctx context.Context, workspace, upper string) ([]changeset.Change, error) {
	cs, err := changeset.OpenUpper(upper, workspace)
	if err != nil {
		return nil, err
	}
	return cs.Changes(ctx)
}
