package changeset

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Layout of a change set directory created by Begin.
const (
	metaFile = "changeset.json"
	upperDir = "upper"
	workDir  = "work"
)

// ChangeSet is one session's pending writes over a workspace. The reading
// methods (Stat, Open, ReadFile, ReadDir, Changes, Diff) may run
// concurrently with each other; WriteFile, MkdirAll, Remove, Apply and
// Discard need exclusive use (the router runs writes in order).
type ChangeSet struct {
	workspace string // canonical absolute lower layer (the real tree)
	upper     string
	dir       string // change set directory, "" for a bare upper
	meta      *meta  // nil for a bare upper
	real      applyFS
	// own reports whether an absolute path is one of fluffy's own files
	// (Protect); nil protects nothing.
	own func(abs string) bool
}

// meta is what changeset.json holds.
type meta struct {
	Version   int                  `json:"version"`
	Workspace string               `json:"workspace"`
	Created   time.Time            `json:"created"`
	Base      map[string]baseEntry `json:"base"`
}

// baseEntry is one workspace entry as it was when the change set began.
type baseEntry struct {
	Kind   Kind   `json:"kind"`
	Perm   uint32 `json:"perm"`
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"` // files
	Target string `json:"target,omitempty"` // symlinks
	Ino    uint64 `json:"ino,omitempty"`
	Mtime  int64  `json:"mtime,omitempty"`
	Ctime  int64  `json:"ctime,omitempty"`
}

// Begin creates a change set in dir (which must not exist or be empty)
// over workspace, recording the base: every workspace entry's kind, mode,
// stat fingerprint and SHA-256, against which Apply detects conflicts.
// A sandbox mounts overlay with lowerdir=workspace, upperdir=UpperDir(),
// workdir=WorkDir().
func Begin(ctx context.Context, workspace, dir string) (*ChangeSet, error) {
	ws, err := canonicalDir(workspace)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("changeset: create %s: %w", dir, err)
	}
	cdir, err := canonicalDir(dir)
	if err != nil {
		return nil, err
	}
	if within(cdir, ws) || within(ws, cdir) {
		return nil, fmt.Errorf("changeset: %s and the workspace %s overlap: keep change sets outside the workspace (overlayfs refuses overlapping layers)", dir, ws)
	}
	if names, _ := os.ReadDir(dir); len(names) > 0 {
		return nil, fmt.Errorf("changeset: %s is not empty", dir)
	}
	for _, d := range []string{upperDir, workDir} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("changeset: %w", err)
		}
	}
	base, err := snapshot(ctx, ws)
	if err != nil {
		return nil, err
	}
	// overlayfs shows the upper root's mode as the merged root's.
	if err := os.Chmod(filepath.Join(dir, upperDir), fs.FileMode(base["."].Perm&0o777)); err != nil {
		return nil, fmt.Errorf("changeset: %w", err)
	}
	m := &meta{Version: 1, Workspace: ws, Created: time.Now().UTC(), Base: base}
	cs := &ChangeSet{workspace: ws, upper: filepath.Join(dir, upperDir), dir: dir, meta: m, real: osFS{root: ws}}
	if err := cs.saveMeta(); err != nil {
		return nil, err
	}
	return cs, nil
}

// Open opens a change set created by Begin. When workspace is not empty it
// must name the same directory as the recorded one. An apply that a crash
// interrupted is finished (when all its renames were done) or rolled back
// first, from the journal it left.
func Open(dir, workspace string) (*ChangeSet, error) {
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return nil, fmt.Errorf("changeset: %s is not a change set (use OpenUpper for a bare upper directory): %w", dir, err)
	}
	m := &meta{}
	if err := json.Unmarshal(b, m); err != nil || m.Version != 1 || m.Workspace == "" {
		return nil, fmt.Errorf("changeset: %s: malformed %s", dir, metaFile)
	}
	if workspace != "" {
		ws, err := canonicalDir(workspace)
		if err != nil {
			return nil, err
		}
		if ws != m.Workspace {
			return nil, fmt.Errorf("changeset: %s belongs to workspace %s, not %s", dir, m.Workspace, ws)
		}
	}
	if _, err := canonicalDir(m.Workspace); err != nil {
		return nil, err
	}
	cs := &ChangeSet{workspace: m.Workspace, upper: filepath.Join(dir, upperDir), dir: dir, meta: m, real: osFS{root: m.Workspace}}
	if err := cs.recoverJournal(); err != nil {
		return nil, err
	}
	return cs, nil
}

// OpenUpper opens a bare overlay upper directory over workspace, with no
// recorded base: reads, changes, diffs and discard work; Apply refuses
// with ErrNoBase.
func OpenUpper(upper, workspace string) (*ChangeSet, error) {
	ws, err := canonicalDir(workspace)
	if err != nil {
		return nil, err
	}
	up, err := canonicalDir(upper)
	if err != nil {
		return nil, err
	}
	return &ChangeSet{workspace: ws, upper: up, real: osFS{root: ws}}, nil
}

// Protect makes Apply refuse, with an *OwnFileError and whatever the
// selection, every change at a path for which own (given the absolute
// path in the real tree) reports true: fluffy's data directory, keys,
// configuration, policy and binaries. The caller passes the same
// predicate the policy's built-in protected-write rule uses, so what the
// agent may not write and what an apply may not land are one rule.
func (cs *ChangeSet) Protect(own func(abs string) bool) { cs.own = own }

// Workspace returns the canonical workspace root (the lower layer).
func (cs *ChangeSet) Workspace() string { return cs.workspace }

// UpperDir returns the overlay upper directory.
func (cs *ChangeSet) UpperDir() string { return cs.upper }

// WorkDir returns the overlay work directory ("" for a bare upper).
func (cs *ChangeSet) WorkDir() string {
	if cs.dir == "" {
		return ""
	}
	return filepath.Join(cs.dir, workDir)
}

// within reports whether p is root or below it.
func within(p, root string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

func canonicalDir(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("changeset: %w", err)
	}
	r, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("changeset: %w", err)
	}
	st, err := os.Stat(r)
	if err != nil {
		return "", fmt.Errorf("changeset: %w", err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("changeset: %s is not a directory", p)
	}
	return r, nil
}

func (cs *ChangeSet) saveMeta() error {
	b, err := json.Marshal(cs.meta)
	if err != nil {
		return fmt.Errorf("changeset: %w", err)
	}
	tmp := filepath.Join(cs.dir, metaFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("changeset: %w", err)
	}
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("changeset: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(cs.dir, metaFile)); err != nil {
		return fmt.Errorf("changeset: %w", err)
	}
	return nil
}

// snapshot walks the workspace without following symlinks and records
// every entry.
func snapshot(ctx context.Context, ws string) (map[string]baseEntry, error) {
	out := map[string]baseEntry{}
	buf := make([]byte, 64<<10)
	var walk func(rel string, n node) error
	walk = func(rel string, n node) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		e, err := baseOf(ws, rel, n, buf)
		if err != nil {
			return err
		}
		out[rel] = e
		if n.kind != KindDir {
			return nil
		}
		kids, err := statDir(ws, rel, false)
		if err != nil {
			return err
		}
		for name, k := range kids {
			if err := walk(path.Join(rel, name), k); err != nil {
				return err
			}
		}
		return nil
	}
	root, err := lstatNode(ws, ".", false)
	if err != nil {
		return nil, err
	}
	if err := walk(".", root); err != nil {
		return nil, fmt.Errorf("changeset: record base of %s: %w", ws, err)
	}
	return out, nil
}

func baseOf(root, rel string, n node, buf []byte) (baseEntry, error) {
	e := baseEntry{Kind: n.kind, Perm: unixPerm(n.perm), Size: n.size, Target: n.target, Ino: n.ino, Mtime: n.mtime, Ctime: n.ctime}
	if n.kind == KindFile {
		h, err := hashFile(root, rel, buf)
		if err != nil {
			return e, err
		}
		e.SHA256 = h
	}
	return e, nil
}

// hashFile returns the SHA-256 of a file; buf, when not nil, is the copy
// buffer.
func hashFile(root, rel string, buf []byte) (string, error) {
	f, err := openFile(root, rel)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if buf == nil {
		buf = make([]byte, 64<<10)
	}
	if _, err := io.CopyBuffer(h, struct{ io.Reader }{f}, buf); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func sortStrings(s []string) { slices.Sort(s) }
