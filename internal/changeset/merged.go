package changeset

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// Layer says which layer a merged entry comes from.
type Layer uint8

// The layers.
const (
	LayerNone Layer = iota
	LayerUpper
	LayerLower
)

func (l Layer) String() string {
	switch l {
	case LayerUpper:
		return "upper"
	case LayerLower:
		return "lower"
	}
	return "none"
}

// MarshalText renders the layer as its name.
func (l Layer) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// Entry is one entry of the merged view.
type Entry struct {
	Path   string      `json:"path"` // workspace-relative
	Kind   Kind        `json:"kind"`
	Mode   fs.FileMode `json:"mode"` // permission bits
	Size   int64       `json:"size"`
	Target string      `json:"target,omitempty"` // symlinks
	Layer  Layer       `json:"layer"`
}

// mnode is a merged entry with what is needed to descend into it.
type mnode struct {
	node
	layer Layer
	// upperDir: the upper layer holds a directory here.
	upperDir bool
	// lowerMerged: the lower layer's directory here is part of the view.
	lowerMerged bool
}

// root returns the merged workspace root.
func (cs *ChangeSet) rootNode() (mnode, error) {
	low, err := lstatNode(cs.workspace, ".", false)
	if err != nil {
		return mnode{}, err
	}
	up, err := lstatNode(cs.upper, ".", true)
	if err != nil {
		return mnode{}, err
	}
	m := mnode{node: low, layer: LayerLower, upperDir: true, lowerMerged: !up.opaque}
	m.perm = up.perm
	return m, nil
}

// child computes the merged entry name inside the merged directory parent
// (at parentRel).
func (cs *ChangeSet) child(parent mnode, rel string) (mnode, error) {
	var up, low node
	var err error
	if parent.upperDir {
		if up, err = lstatNode(cs.upper, rel, true); err != nil {
			return mnode{}, err
		}
		if up.whiteout {
			return mnode{}, nil
		}
	}
	if parent.lowerMerged {
		if low, err = lstatNode(cs.workspace, rel, false); err != nil {
			return mnode{}, err
		}
	}
	return combine(up, low), nil
}

// combine merges an entry's upper and lower nodes as overlayfs does; low
// must be KindNone when the parent hides the lower layer.
func combine(up, low node) mnode {
	switch {
	case up.whiteout:
		return mnode{}
	case up.kind != KindNone:
		m := mnode{node: up, layer: LayerUpper}
		if up.kind == KindDir {
			m.upperDir = true
			m.lowerMerged = !up.opaque && low.kind == KindDir
		}
		return m
	case low.kind != KindNone:
		return mnode{node: low, layer: LayerLower, lowerMerged: low.kind == KindDir}
	}
	return mnode{}
}

// statDir lstats every entry of the directory root/rel through one
// directory descriptor.
func statDir(root, rel string, wantXattr bool) (map[string]node, error) {
	dfd, err := openDir(root, rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	names, err := namesAt(dfd, root, rel)
	if err != nil {
		return nil, err
	}
	out := make(map[string]node, len(names))
	for _, n := range names {
		nd, err := lstatAt(dfd, n, root, path.Join(rel, n), wantXattr)
		if err != nil {
			return nil, err
		}
		out[n] = nd
	}
	return out, nil
}

// lookup resolves rel in the merged view without following symlinks. An
// absent entry is KindNone; crossing a symlink is ErrSymlink; crossing a
// non-directory is fs.ErrNotExist wrapped with ENOTDIR's meaning.
func (cs *ChangeSet) lookup(rel string) (mnode, error) {
	rel, err := CheckPath(rel)
	if err != nil {
		return mnode{}, err
	}
	cur, err := cs.rootNode()
	if err != nil || rel == "." {
		return cur, err
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		if cur.kind != KindDir {
			if cur.kind == KindSymlink {
				return mnode{}, fmt.Errorf("%w: %s", ErrSymlink, strings.Join(parts[:i], "/"))
			}
			return mnode{}, nil
		}
		if cur, err = cs.child(cur, p); err != nil {
			return mnode{}, err
		}
		if cur.kind == KindNone {
			return cur, nil
		}
	}
	return cur, nil
}

func (m mnode) entry(rel string) Entry {
	return Entry{Path: rel, Kind: m.kind, Mode: m.perm, Size: m.size, Target: m.target, Layer: m.layer}
}

// Stat returns the merged entry at rel, without following a final
// symlink. An absent entry is an error matching fs.ErrNotExist.
func (cs *ChangeSet) Stat(rel string) (Entry, error) {
	m, err := cs.lookup(rel)
	if err != nil {
		return Entry{}, err
	}
	if m.kind == KindNone {
		return Entry{}, &fs.PathError{Op: "stat", Path: rel, Err: fs.ErrNotExist}
	}
	return m.entry(rel), nil
}

// Open opens the merged file at rel for reading. Symlinks are not
// followed: opening one is ErrSymlink.
func (cs *ChangeSet) Open(rel string) (*os.File, error) {
	m, err := cs.lookup(rel)
	if err != nil {
		return nil, err
	}
	switch m.kind {
	case KindNone:
		return nil, &fs.PathError{Op: "open", Path: rel, Err: fs.ErrNotExist}
	case KindSymlink:
		return nil, fmt.Errorf("%w: %s", ErrSymlink, rel)
	case KindDir:
		return nil, &fs.PathError{Op: "open", Path: rel, Err: fmt.Errorf("is a directory")}
	}
	root := cs.workspace
	if m.layer == LayerUpper {
		root = cs.upper
	}
	return openFile(root, path.Clean(rel))
}

// ReadFile reads the merged file at rel.
func (cs *ChangeSet) ReadFile(rel string) ([]byte, error) {
	f, err := cs.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// ReadDir lists the merged directory at rel, sorted by name.
func (cs *ChangeSet) ReadDir(rel string) ([]Entry, error) {
	rel, err := CheckPath(rel)
	if err != nil {
		return nil, err
	}
	m, err := cs.lookup(rel)
	if err != nil {
		return nil, err
	}
	if m.kind != KindDir {
		return nil, &fs.PathError{Op: "readdir", Path: rel, Err: fs.ErrNotExist}
	}
	kids, err := cs.children(rel, m)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(kids))
	for _, k := range kids {
		out = append(out, k.m.entry(k.rel))
	}
	return out, nil
}

type kid struct {
	rel string
	m   mnode
}

// children lists the merged children of the merged directory m at rel.
func (cs *ChangeSet) children(rel string, m mnode) ([]kid, error) {
	var ups, lows map[string]node
	var err error
	if m.upperDir {
		if ups, err = statDir(cs.upper, rel, true); err != nil {
			return nil, err
		}
	}
	if m.lowerMerged {
		if lows, err = statDir(cs.workspace, rel, false); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(ups)+len(lows))
	for n := range ups {
		names = append(names, n)
	}
	for n := range lows {
		if _, ok := ups[n]; !ok {
			names = append(names, n)
		}
	}
	sortStrings(names)
	var out []kid
	for _, n := range names {
		if c := combine(ups[n], lows[n]); c.kind != KindNone {
			out = append(out, kid{path.Join(rel, n), c})
		}
	}
	return out, nil
}
