package kernel

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/operation"
)

// Reviewer asks a person about a plan of steps and returns once each is
// decided (*approval.Broker implements it); an error means nobody could
// be asked, and nothing is merged.
type Reviewer interface {
	Ask(ctx context.Context, session, summary string, steps []approval.Step) (approval.Request, error)
}

// MergeTool is the tool name of the operation a merge review asks about:
// the policy decides it as any operation (default.subagent-merge asks a
// person), and the request goes to the parent's person (Notify).
const MergeTool = "sessions.merge"

// Merge is what became of a sub-agent's changes when its run ended.
type Merge struct {
	Paths []string `json:"paths"`
	// Merged: a person approved, and the changes are now in the parent's
	// change set (gone from the child's). Otherwise Reason says why not;
	// they stay in the child's change set, discarded when it closes.
	Merged  bool   `json:"merged"`
	Request string `json:"request,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// offerMerge asks the person to review child's changes and, approved,
// merges them into its parent's change set: each changed file as the
// child has it replaces the parent's version, each deletion deletes. A
// symlink or special file is never merged (the whole merge is refused).
// nil: nothing to merge.
func (k *Kernel) offerMerge(ctx context.Context, child Info) (*Merge, error) {
	if k.o.Reviewer == nil || child.Parent == "" {
		return nil, nil
	}
	ccs, err := changeset.Open(child.ChangeSet, child.Workspace)
	if err != nil {
		return nil, fmt.Errorf("kernel: open sub-agent %s's change set: %w", child.ID, err)
	}
	changes, err := ccs.Changes(ctx)
	if err != nil || len(changes) == 0 {
		return nil, err
	}
	m := &Merge{}
	for _, c := range changes {
		m.Paths = append(m.Paths, c.Path)
	}
	for _, c := range changes {
		if c.Op != changeset.Deleted && c.Kind != changeset.KindFile && c.Kind != changeset.KindDir {
			m.Reason = fmt.Sprintf("%s is a %s: only files and directories are merged", c.Path, c.Kind)
			return m, k.auditMerge(ctx, child, m)
		}
	}
	parent, err := k.Get(ctx, child.Parent)
	if err != nil {
		return nil, err
	}
	if parent.Status == StatusClosed {
		m.Reason = "the parent session is closed"
		return m, k.auditMerge(ctx, child, m)
	}
	diff, err := ccs.Diff(ctx)
	if err != nil {
		return nil, err
	}
	op := operation.Operation{Tool: MergeTool, Action: operation.Write,
		Session: operation.Session{ID: child.ID, Workspace: child.Workspace, Untrusted: child.Untrusted != "", UntrustedSource: child.Untrusted}}
	for _, p := range m.Paths {
		op.Paths = append(op.Paths, operation.Path{Abs: filepath.Join(child.Workspace, p), Raw: p, InWorkspace: true})
	}
	step := approval.Step{Op: op, Note: fmt.Sprintf("merge sub-agent %s's changes (%d path(s)) into session %s's change set", child.ID, len(m.Paths), parent.ID),
		Preview: diff}
	req, err := k.o.Reviewer.Ask(ctx, child.ID, "sub-agent "+child.ID+" finished: merge its changes into its parent's change set?", []approval.Step{step})
	if err != nil {
		m.Reason = "nobody could be asked: " + err.Error()
		return m, k.auditMerge(ctx, child, m)
	}
	m.Request = req.ID
	for _, it := range req.Items {
		if it.Decision.Verdict != approval.Approved {
			m.Reason = "not approved: " + strings.TrimSpace(string(it.Decision.Verdict)+" "+it.Decision.Reason)
			return m, k.auditMerge(ctx, child, m)
		}
	}
	pcs, err := changeset.Open(parent.ChangeSet, parent.Workspace)
	if err != nil {
		return nil, fmt.Errorf("kernel: open session %s's change set: %w", parent.ID, err)
	}
	if err := copyChanges(ctx, ccs, pcs, changes); err != nil {
		m.Reason = "the merge failed part way: " + err.Error()
		return m, k.auditMerge(ctx, child, m)
	}
	if err := ccs.Discard(ctx, m.Paths...); err != nil {
		k.log.WarnContext(ctx, "a merged sub-agent's changes stay in its change set", "session", child.ID, "err", err)
	}
	m.Merged = true
	return m, k.auditMerge(ctx, child, m)
}

// copyChanges writes changes of from into to.
func copyChanges(ctx context.Context, from, to *changeset.ChangeSet, changes []changeset.Change) error {
	for _, c := range changes {
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		switch {
		case c.Op == changeset.Deleted:
			err = to.Remove(c.Path, c.Kind == changeset.KindDir)
		case c.Kind == changeset.KindDir:
			err = to.MkdirAll(c.Path)
		default:
			var data []byte
			if data, err = from.ReadFile(c.Path); err == nil {
				err = to.WriteFile(c.Path, data, c.NewMode.Perm())
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", c.Path, err)
		}
	}
	return nil
}

func (k *Kernel) auditMerge(ctx context.Context, child Info, m *Merge) error {
	if _, err := k.o.Audit.Append(ctx, audit.Entry{Session: child.Parent, Kind: audit.KindChangesetMerge, Actor: "kernel",
		Payload: audit.ChangesetMerge{Child: child.ID, Paths: m.Paths, Merged: m.Merged, Request: m.Request, Reason: m.Reason}}); err != nil {
		return fmt.Errorf("kernel: audit changeset.merge: %w", err)
	}
	return nil
}
