package changeset

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// Op is what a change does to a path.
type Op string

// The ops.
const (
	Added    Op = "added"
	Modified Op = "modified"
	Deleted  Op = "deleted"
)

// Change is one difference between the merged view and the real tree. A
// path whose type changed (a file replaced by a directory) appears twice:
// deleted with its old kind, then added with its new one.
type Change struct {
	Path string `json:"path"`
	Op   Op     `json:"op"`
	// Kind is the entry's kind after the change, or before it for a
	// deletion.
	Kind      Kind        `json:"kind"`
	OldMode   fs.FileMode `json:"old_mode,omitempty"`
	NewMode   fs.FileMode `json:"new_mode,omitempty"`
	OldSize   int64       `json:"old_size,omitempty"`
	NewSize   int64       `json:"new_size,omitempty"`
	OldTarget string      `json:"old_target,omitempty"`
	NewTarget string      `json:"new_target,omitempty"`
	// Content is set for a modified file or symlink whose bytes (or
	// target) differ; a modification without it is a mode change only.
	Content bool `json:"content,omitempty"`
}

// Changes lists the differences between the merged view and the real
// tree, sorted by path (for one path, a deletion before an addition). With
// paths, only changes at or below those paths are listed.
func (cs *ChangeSet) Changes(ctx context.Context, paths ...string) ([]Change, error) {
	sel, err := selection(paths)
	if err != nil {
		return nil, err
	}
	root, err := cs.rootNode()
	if err != nil {
		return nil, err
	}
	low, err := lstatNode(cs.workspace, ".", false)
	if err != nil {
		return nil, err
	}
	d := &differ{cs: cs, ctx: ctx}
	if err := d.dir(".", root, low); err != nil {
		return nil, err
	}
	out := d.out[:0]
	for _, c := range d.out {
		if sel.has(c.Path) {
			out = append(out, c)
		}
	}
	sortChanges(out)
	return out, nil
}

func sortChanges(cs []Change) {
	rank := map[Op]int{Deleted: 0, Modified: 1, Added: 2}
	slices.SortStableFunc(cs, func(a, b Change) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return rank[a.Op] - rank[b.Op]
	})
}

// sel is a path selection: empty means everything.
type sel []string

func selection(paths []string) (sel, error) {
	var s sel
	for _, p := range paths {
		q, err := CheckPath(p)
		if err != nil {
			return nil, err
		}
		if q == "." {
			return nil, nil
		}
		s = append(s, q)
	}
	return s, nil
}

func (s sel) has(p string) bool {
	if len(s) == 0 {
		return true
	}
	for _, q := range s {
		if p == q || strings.HasPrefix(p, q+"/") {
			return true
		}
	}
	return false
}

type differ struct {
	cs     *ChangeSet
	ctx    context.Context
	out    []Change
	ba, bb []byte // comparison buffers, reused
}

func (d *differ) emit(c Change) { d.out = append(d.out, c) }

// node compares the merged entry m with the real entry l at rel.
func (d *differ) node(rel string, m mnode, l node) error {
	if err := d.ctx.Err(); err != nil {
		return err
	}
	switch {
	case m.kind == KindNone && l.kind == KindNone:
		return nil
	case m.kind == KindNone:
		return d.deleted(rel, l)
	case l.kind == KindNone:
		return d.added(rel, m)
	case m.kind != l.kind:
		if err := d.deleted(rel, l); err != nil {
			return err
		}
		return d.added(rel, m)
	case m.layer == LayerLower:
		return nil // untouched
	}
	switch m.kind {
	case KindFile:
		same, err := d.sameContent(rel)
		if err != nil {
			return err
		}
		if !same || m.perm != l.perm {
			d.emit(Change{Path: rel, Op: Modified, Kind: KindFile, OldMode: l.perm, NewMode: m.perm, OldSize: l.size, NewSize: m.size, Content: !same})
		}
	case KindSymlink:
		if m.target != l.target {
			d.emit(Change{Path: rel, Op: Modified, Kind: KindSymlink, OldTarget: l.target, NewTarget: m.target, OldMode: l.perm, NewMode: m.perm, Content: true})
		}
	case KindDir:
		if m.perm != l.perm {
			d.emit(Change{Path: rel, Op: Modified, Kind: KindDir, OldMode: l.perm, NewMode: m.perm})
		}
		return d.dir(rel, m, l)
	case KindOther:
		d.emit(Change{Path: rel, Op: Modified, Kind: KindOther, OldMode: l.perm, NewMode: m.perm})
	}
	return nil
}

// dir compares the children of a merged directory with those of the real
// one.
func (d *differ) dir(rel string, m mnode, l node) error {
	if !m.upperDir {
		return nil // the whole subtree comes from the real tree
	}
	kids, err := d.cs.children(rel, m)
	if err != nil {
		return err
	}
	var lows map[string]node
	if l.kind == KindDir {
		if lows, err = statDir(d.cs.workspace, rel, false); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for _, k := range kids {
		name := path.Base(k.rel)
		seen[name] = true
		if err := d.node(k.rel, k.m, lows[name]); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(lows))
	for n := range lows {
		if !seen[n] {
			names = append(names, n)
		}
	}
	sortStrings(names)
	for _, n := range names {
		if err := d.deleted(path.Join(rel, n), lows[n]); err != nil {
			return err
		}
	}
	return nil
}

func (d *differ) deleted(rel string, l node) error {
	d.emit(Change{Path: rel, Op: Deleted, Kind: l.kind, OldMode: l.perm, OldSize: l.size, OldTarget: l.target})
	if l.kind != KindDir {
		return nil
	}
	kids, err := statDir(d.cs.workspace, rel, false)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(kids))
	for n := range kids {
		names = append(names, n)
	}
	sortStrings(names)
	for _, n := range names {
		if err := d.deleted(path.Join(rel, n), kids[n]); err != nil {
			return err
		}
	}
	return nil
}

func (d *differ) added(rel string, m mnode) error {
	d.emit(Change{Path: rel, Op: Added, Kind: m.kind, NewMode: m.perm, NewSize: m.size, NewTarget: m.target})
	if m.kind != KindDir {
		return nil
	}
	kids, err := d.cs.children(rel, m)
	if err != nil {
		return err
	}
	for _, k := range kids {
		if err := d.added(k.rel, k.m); err != nil {
			return err
		}
	}
	return nil
}

// sameContent compares the upper file with the real one at rel.
func (d *differ) sameContent(rel string) (bool, error) {
	a, err := openFile(d.cs.upper, rel)
	if err != nil {
		return false, err
	}
	defer a.Close()
	b, err := openFile(d.cs.workspace, rel)
	if err != nil {
		return false, err
	}
	defer b.Close()
	if d.ba == nil {
		d.ba, d.bb = make([]byte, 16<<10), make([]byte, 16<<10)
	}
	return sameReaders(a, b, d.ba, d.bb)
}

// sameReaders compares two streams with two equal-sized buffers.
func sameReaders(a, b io.Reader, ba, bb []byte) (bool, error) {
	for {
		na, ea := io.ReadFull(a, ba)
		nb, eb := io.ReadFull(b, bb)
		if !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		aDone := ea == io.EOF || ea == io.ErrUnexpectedEOF
		bDone := eb == io.EOF || eb == io.ErrUnexpectedEOF
		if ea != nil && !aDone {
			return false, ea
		}
		if eb != nil && !bDone {
			return false, eb
		}
		if aDone || bDone {
			return aDone && bDone, nil
		}
	}
}
