package changeset

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aymanbagabas/go-udiff"

	"github.com/fluffy-agent/fluffy/internal/lockfile"
)

// Base copies. The base records hashes, not contents; so that a conflict
// can show the three versions of a file (as it was when the change set
// began, as the change set has it, as it is now), the change set keeps a
// copy of each base file it changes, content-addressed under base/ in the
// change set directory. A copy is taken from the real file only while its
// SHA-256 is still the recorded one: at the kernel's first write of the
// file (WriteFile, Remove), and for the files a sandbox changed when
// KeepBases runs (the kernel calls it after each run; fluffy changeset
// before each command).

const (
	baseCopies = "base"
	lockFile   = "lock"
)

// ErrLocked: another process is applying or discarding this change set.
var ErrLocked = errors.New("changeset: another fluffy process is applying or discarding this change set")

// keepBase keeps a copy of rel's base content when the real file is still
// the base. Best effort: a failure means the three versions cannot be
// shown later, nothing worse.
func (cs *ChangeSet) keepBase(rel string) bool {
	if cs.meta == nil {
		return false
	}
	b, ok := cs.meta.Base[rel]
	if !ok || b.Kind != KindFile || b.SHA256 == "" || b.Size > maxDiffBytes {
		return false
	}
	dst := filepath.Join(cs.dir, baseCopies, b.SHA256)
	if _, err := os.Lstat(dst); err == nil {
		return true
	}
	f, err := openFile(cs.workspace, rel)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := os.MkdirAll(filepath.Join(cs.dir, baseCopies), 0o700); err != nil {
		return false
	}
	tmp, err := os.CreateTemp(filepath.Join(cs.dir, baseCopies), ".tmp-")
	if err != nil {
		return false
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	_, cerr := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(f, maxDiffBytes+1))
	if err := errors.Join(cerr, tmp.Close()); err != nil || hex.EncodeToString(h.Sum(nil)) != b.SHA256 {
		return false
	}
	return os.Rename(tmp.Name(), dst) == nil
}

// KeepBases keeps base copies of every modified or deleted file that has
// none yet and whose real file is still the base; it returns how many
// such files have one now.
func (cs *ChangeSet) KeepBases(ctx context.Context) (int, error) {
	if cs.meta == nil {
		return 0, nil
	}
	ch, err := cs.Changes(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range ch {
		if c.Kind == KindFile && c.Op != Added && cs.keepBase(c.Path) {
			n++
		}
	}
	return n, nil
}

// BaseContent returns rel's content when the change set began, if a copy
// was kept.
func (cs *ChangeSet) BaseContent(rel string) ([]byte, bool) {
	if cs.meta == nil {
		return nil, false
	}
	b, ok := cs.meta.Base[rel]
	if !ok || b.Kind != KindFile {
		return nil, false
	}
	data, err := os.ReadFile(filepath.Join(cs.dir, baseCopies, b.SHA256))
	if err != nil {
		return nil, false
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != b.SHA256 {
		return nil, false
	}
	return data, true
}

// lock takes the change set's exclusive lock, waiting up to two seconds;
// the returned func releases it. Bare uppers are not locked.
func (cs *ChangeSet) lock(ctx context.Context) (func(), error) {
	if cs.dir == "" {
		return func() {}, nil
	}
	l, err := lockfile.Acquire(ctx, filepath.Join(cs.dir, lockFile), lockfile.Options{Wait: 2 * time.Second})
	switch {
	case errors.Is(err, lockfile.ErrBusy):
		return nil, ErrLocked
	case err != nil:
		return nil, fmt.Errorf("changeset: lock: %w", err)
	}
	return func() { l.Release() }, nil
}

// Versions are the three versions of a conflicting file. Base is nil when
// no copy was kept (it began before the change set touched the file, and
// the real file changed since); Changed is nil when the change set deletes
// the file; Current is nil when it was deleted in the workspace.
type Versions struct {
	Path                   string
	Base, Changed, Current []byte
	BaseKept               bool
	BaseSHA256, CurrentSHA string
}

// Versions returns the three versions of rel, for a conflict.
func (cs *ChangeSet) Versions(rel string) (Versions, error) {
	rel, err := CheckPath(rel)
	if err != nil {
		return Versions{}, err
	}
	v := Versions{Path: rel}
	if cs.meta != nil {
		v.BaseSHA256 = cs.meta.Base[rel].SHA256
	}
	v.Base, v.BaseKept = cs.BaseContent(rel)
	if e, err := cs.Stat(rel); err == nil && e.Kind == KindFile {
		if v.Changed, err = cs.ReadFile(rel); err != nil {
			return v, err
		}
	}
	if n, err := lstatNode(cs.workspace, rel, false); err == nil && n.kind == KindFile {
		f, err := openFile(cs.workspace, rel)
		if err != nil {
			return v, err
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, maxDiffBytes+1))
		if err != nil {
			return v, err
		}
		v.Current = data
		sum := sha256.Sum256(data)
		v.CurrentSHA = hex.EncodeToString(sum[:])
	}
	return v, nil
}

// Explain renders a conflict for a person: the reason, then the three
// versions as two diffs from the base — what changed in the workspace
// since the change set began, and what the change set does — or, when no
// base copy was kept, the change set against the current file.
func (cs *ChangeSet) Explain(c Conflict) string {
	var b strings.Builder
	fmt.Fprintf(&b, "conflict: %s: %s\n", c.Path, c.Reason)
	v, err := cs.Versions(c.Path)
	if err != nil {
		fmt.Fprintf(&b, "  (cannot read its versions: %v)\n", err)
		return b.String()
	}
	short := func(h string) string {
		if len(h) > 12 {
			return h[:12]
		}
		if h == "" {
			return "-"
		}
		return h
	}
	side := func(data []byte) string {
		switch {
		case data == nil:
			return "(no file)"
		case isBinary(data) || len(data) > maxDiffBytes:
			return fmt.Sprintf("(binary or large, %d bytes)", len(data))
		}
		return fmt.Sprintf("(%d bytes)", len(data))
	}
	kept := "content kept"
	if !v.BaseKept {
		kept = "content not kept: the file changed before the change set copied it"
	}
	fmt.Fprintf(&b, "  base        sha256 %s %s, %s\n", short(v.BaseSHA256), side(v.Base), kept)
	fmt.Fprintf(&b, "  change set  %s\n", side(v.Changed))
	fmt.Fprintf(&b, "  current     sha256 %s %s\n", short(v.CurrentSHA), side(v.Current))
	show := func(title, fromName, toName string, from, to []byte) {
		if isBinary(from) || isBinary(to) || len(from) > maxDiffBytes || len(to) > maxDiffBytes {
			fmt.Fprintf(&b, "%s: binary or large, not shown\n", title)
			return
		}
		u, err := udiff.ToUnified(fromName, toName, string(from), udiff.Lines(string(from), string(to)), 3)
		if err != nil || u == "" {
			fmt.Fprintf(&b, "%s: no difference\n", title)
			return
		}
		fmt.Fprintf(&b, "%s:\n%s", title, u)
	}
	if v.BaseKept {
		show("what changed in the workspace since the change set began (base → current)", "base/"+c.Path, "current/"+c.Path, v.Base, v.Current)
		show("what the change set does (base → change set)", "base/"+c.Path, "changeset/"+c.Path, v.Base, v.Changed)
	} else {
		show("the change set against the current file (current → change set)", "current/"+c.Path, "changeset/"+c.Path, v.Current, v.Changed)
	}
	return b.String()
}

// IsBinary reports whether the merged view's file at rel is binary (a NUL
// in its first 8000 bytes, as git decides).
func (cs *ChangeSet) IsBinary(rel string) (bool, error) {
	f, err := cs.Open(rel)
	if err != nil {
		return false, err
	}
	defer f.Close()
	buf := make([]byte, 8000)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return false, err
	}
	return isBinary(buf[:n]), nil
}
