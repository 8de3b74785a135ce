package changeset

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// ErrEscape: a symlink in the change set points outside the workspace.
var ErrEscape = errors.New("changeset: symlink points outside the workspace")

// Conflict is one path whose real entry changed since the change set
// began.
type Conflict struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
	// BaseSHA256 and RealSHA256 identify the file contents when both are
	// regular files.
	BaseSHA256 string `json:"base_sha256,omitempty"`
	RealSHA256 string `json:"real_sha256,omitempty"`
}

// ConflictError is returned by Apply, before anything is written, when
// some destinations changed since the change set began. Its message shows
// each conflict's three versions (Explain).
type ConflictError struct {
	Conflicts []Conflict
	// Versions holds each conflict's Explain text, in order.
	Versions []string
}

func (e *ConflictError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "changeset: %d path(s) changed in the workspace since the change set began; nothing was applied:", len(e.Conflicts))
	for _, c := range e.Conflicts {
		fmt.Fprintf(&b, "\n  %s: %s", c.Path, c.Reason)
	}
	for _, v := range e.Versions {
		b.WriteString("\n")
		b.WriteString(strings.TrimSuffix(v, "\n"))
	}
	return b.String()
}

// ApplyError is returned when a step of Apply failed after the conflict
// check; every earlier step has been rolled back unless Rollback is set.
type ApplyError struct {
	Path     string
	Err      error
	Rollback error // non-nil when restoring the tree failed too
}

func (e *ApplyError) Error() string {
	if e.Rollback != nil {
		return fmt.Sprintf("changeset: apply %s: %v; ROLLBACK FAILED, the tree may be partly changed: %v", e.Path, e.Err, e.Rollback)
	}
	return fmt.Sprintf("changeset: apply %s: %v (rolled back, the tree is unchanged)", e.Path, e.Err)
}

func (e *ApplyError) Unwrap() error { return e.Err }

// Apply writes the changes at or below paths (all when none) to the real
// tree, all or nothing, and returns what it applied. A new file's missing
// parent directories are applied with it. Sensitive changes (git control
// files in every form git discovers them, .fluffy/, setuid, setgid or
// sticky bits, modes that let other users write; see Sensitive and
// judge.reason) are applied only when named exactly; otherwise Apply
// returns a *SensitiveError and writes nothing. fluffy's own files
// (Protect) are never applied: *OwnFileError. Apply must not run while a
// sandbox has this change set mounted: overlayfs forbids changing the
// lower layer under a mount.
func (cs *ChangeSet) Apply(ctx context.Context, paths ...string) ([]Change, error) {
	if cs.meta == nil {
		return nil, fmt.Errorf("%w: %s is a bare upper directory; create change sets with Begin so Apply can detect conflicts", ErrNoBase, cs.upper)
	}
	s, err := selection(paths)
	if err != nil {
		return nil, err
	}
	unlock, err := cs.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	all, err := cs.Changes(ctx)
	if err != nil {
		return nil, err
	}
	plan := planFor(all, s)
	if err := cs.validate(plan); err != nil {
		return nil, err
	}
	if own := cs.ownFiles(plan); len(own) > 0 {
		return nil, &OwnFileError{Paths: own}
	}
	if names, reasons := cs.newJudge(all).sensitiveUnnamed(plan, s); len(names) > 0 {
		return nil, &SensitiveError{Paths: names, Reasons: reasons}
	}
	if conflicts := cs.conflicts(plan); len(conflicts) > 0 {
		ce := &ConflictError{Conflicts: conflicts}
		for _, c := range conflicts {
			ce.Versions = append(ce.Versions, cs.Explain(c))
		}
		return nil, ce
	}
	j := newJournal(plan)
	if err := cs.execute(ctx, j); err != nil {
		return nil, err
	}
	return plan, cs.finish(j)
}

// planFor selects the changes under s plus the ancestors they need: new
// directories, and non-directories those replace.
func planFor(all []Change, s sel) []Change {
	if len(s) == 0 {
		return all
	}
	need := map[string]bool{}
	for _, c := range all {
		if s.has(c.Path) {
			for p := path.Dir(c.Path); p != "."; p = path.Dir(p) {
				need[p] = true
			}
		}
	}
	var out []Change
	for _, c := range all {
		ancestor := need[c.Path] && ((c.Op == Added && c.Kind == KindDir) || (c.Op == Deleted && c.Kind != KindDir))
		if s.has(c.Path) || ancestor {
			out = append(out, c)
		}
	}
	return out
}

func (cs *ChangeSet) validate(plan []Change) error {
	for _, c := range plan {
		if c.Kind == KindOther && c.Op != Deleted {
			return fmt.Errorf("%w: %s is a device, fifo or socket", ErrUnsupported, c.Path)
		}
		if c.Op != Deleted && c.NewMode&(fs.ModeSetuid|fs.ModeSetgid) != 0 && c.Kind != KindDir {
			return fmt.Errorf("%w: %s is setuid or setgid (mode %s); clear the bit in the change set to apply it", ErrUnsupported, c.Path, c.NewMode)
		}
		if c.Kind == KindSymlink && c.Op != Deleted && !targetInside(c.Path, c.NewTarget) {
			return fmt.Errorf("%w: %s -> %s", ErrEscape, c.Path, c.NewTarget)
		}
	}
	return nil
}

// targetInside reports whether a symlink at rel with target stays inside
// the workspace, judged lexically.
func targetInside(rel, target string) bool {
	if target == "" || strings.HasPrefix(target, "/") || strings.IndexByte(target, 0) >= 0 {
		return false
	}
	p := path.Join(path.Dir(rel), target)
	return p == "." || (p != ".." && !strings.HasPrefix(p, "../"))
}

func (cs *ChangeSet) conflicts(plan []Change) []Conflict {
	var out []Conflict
	replaced := map[string]bool{}
	for _, c := range plan {
		if c.Op == Deleted {
			replaced[c.Path] = true
		}
	}
	for _, c := range plan {
		switch {
		case c.Op == Added && replaced[c.Path]:
			// the deletion of the same path is checked
		case c.Op == Added:
			if _, ok := cs.meta.Base[c.Path]; ok {
				out = append(out, Conflict{Path: c.Path, Reason: "deleted in the workspace since the change set began"})
			} else {
				out = append(out, cs.check(c.Path, false)...)
			}
		default:
			out = append(out, cs.check(c.Path, c.Op == Deleted && c.Kind == KindDir)...)
		}
	}
	return out
}

// check compares the real entry at rel with the base, and with deep its
// whole subtree.
func (cs *ChangeSet) check(rel string, deep bool) []Conflict {
	b, ok := cs.meta.Base[rel]
	cur, err := cs.real.Lstat(rel)
	if err != nil {
		return []Conflict{{Path: rel, Reason: err.Error()}}
	}
	switch {
	case !ok && cur.kind == KindNone:
		return nil
	case !ok:
		return []Conflict{{Path: rel, Reason: "created in the workspace since the change set began"}}
	case cur.kind == KindNone:
		return []Conflict{{Path: rel, Reason: "deleted in the workspace since the change set began"}}
	case cur.kind != b.Kind:
		return []Conflict{{Path: rel, Reason: fmt.Sprintf("was a %s, now a %s", b.Kind, cur.kind)}}
	case unixPerm(cur.perm) != b.Perm && cur.kind != KindSymlink:
		return []Conflict{{Path: rel, Reason: fmt.Sprintf("mode changed from %04o to %04o", b.Perm, unixPerm(cur.perm))}}
	}
	switch cur.kind {
	case KindSymlink:
		if cur.target != b.Target {
			return []Conflict{{Path: rel, Reason: fmt.Sprintf("symlink now points to %q, was %q", cur.target, b.Target)}}
		}
	case KindFile:
		if cur.size == b.Size && cur.mtime == b.Mtime && cur.ctime == b.Ctime && cur.ino == b.Ino {
			return nil
		}
		h, err := cs.real.Hash(rel)
		if err != nil {
			return []Conflict{{Path: rel, Reason: err.Error()}}
		}
		if h != b.SHA256 {
			return []Conflict{{Path: rel, Reason: "content changed", BaseSHA256: b.SHA256, RealSHA256: h}}
		}
	case KindDir:
		if !deep {
			return nil
		}
		names, err := cs.real.Names(rel)
		if err != nil {
			return []Conflict{{Path: rel, Reason: err.Error()}}
		}
		var out []Conflict
		for _, n := range names {
			out = append(out, cs.check(path.Join(rel, n), true)...)
		}
		return out
	}
	return nil
}

func randomName(rel, kind string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	dir, base := splitRel(rel)
	if len(base) > 200 {
		base = base[:200]
	}
	return path.Join(dir, ".fluffy-"+kind+"-"+hex.EncodeToString(b[:])+"-"+base)
}

func coveredBy(p string, set map[string]bool) bool {
	for q := path.Dir(p); ; q = path.Dir(q) {
		if set[q] {
			return true
		}
		if q == "." {
			return false
		}
	}
}

// rebase records the applied paths' new state as the base.
func (cs *ChangeSet) rebase(plan []Change) error {
	buf := make([]byte, 64<<10)
	for _, c := range plan {
		if c.Op == Deleted {
			for k := range cs.meta.Base {
				if k == c.Path || strings.HasPrefix(k, c.Path+"/") {
					delete(cs.meta.Base, k)
				}
			}
		}
	}
	for _, c := range plan {
		if c.Op == Deleted {
			continue
		}
		n, err := lstatNode(cs.workspace, c.Path, false)
		if err != nil {
			return err
		}
		e, err := baseOf(cs.workspace, c.Path, n, buf)
		if err != nil {
			return err
		}
		cs.meta.Base[c.Path] = e
	}
	return cs.saveMeta()
}

// cleanupUpper removes applied entries from the upper layer where that
// leaves the merged view unchanged (not below an opaque directory).
func (cs *ChangeSet) cleanupUpper(plan []Change) error {
	up := osFS{root: cs.upper}
	for _, c := range plan {
		if c.Kind == KindDir && c.Op != Deleted {
			continue
		}
		opaque := false
		for p := path.Dir(c.Path); p != "."; p = path.Dir(p) {
			n, err := lstatNode(cs.upper, p, true)
			if err != nil {
				return err
			}
			if n.opaque || n.whiteout {
				opaque = true
				break
			}
		}
		if opaque {
			continue
		}
		n, err := lstatNode(cs.upper, c.Path, false)
		if err != nil {
			return err
		}
		if n.kind == KindFile || n.kind == KindSymlink || n.whiteout {
			if err := up.Remove(c.Path); err != nil {
				return err
			}
		}
	}
	return nil
}
