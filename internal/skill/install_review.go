package skill

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/aymanbagabas/go-udiff"
)

// Review is what a person sees before an installed skill is re-pinned:
// how its folder differs from the pinned copy, how its manifest widens,
// and what the scanner flags in it now.
type Review struct {
	Name string `json:"name"`
	// Pinned is the pin; Current the digest of the folder as reviewed,
	// which the re-pin must match.
	Pinned  string `json:"pinned"`
	Current string `json:"current"`
	// Changed are the paths added, removed or modified.
	Changed []string `json:"changed"`
	// Diff is a unified diff of the text files (binary files are named).
	Diff     string    `json:"diff"`
	Widening []Change  `json:"widening,omitempty"`
	Findings []Finding `json:"findings,omitempty"`
}

// Review compares name's folder with its pinned copy.
func (i *Installed) Review(name string) (Review, error) {
	r, err := i.Record(name)
	if err != nil {
		return Review{}, err
	}
	dir, pinnedDir := i.Dir(name), i.pinnedPath(name)
	cur, err := listTree(dir)
	if err != nil {
		return Review{}, fmt.Errorf("skill %s: %w", name, err)
	}
	pinned, err := listTree(pinnedDir)
	if err != nil {
		return Review{}, fmt.Errorf("skill %s: the pinned copy: %w", name, err)
	}
	rv := Review{Name: name, Pinned: r.Digest, Current: digestOf(cur), Changed: changedPaths(pinned, cur)}
	var d strings.Builder
	for _, p := range rv.Changed {
		d.WriteString(fileDiff(pinnedDir, dir, p))
	}
	rv.Diff = d.String()
	prev, err := readManifest(pinnedDir)
	if err != nil {
		return Review{}, err
	}
	next, err := readManifest(dir)
	if err != nil {
		return Review{}, err
	}
	rv.Widening = Widening(prev, next)
	if rv.Findings, err = Scan(os.DirFS(dir)); err != nil {
		return Review{}, err
	}
	return rv, nil
}

// fileDiff is one path's unified diff between the trees a and b.
func fileDiff(a, b, rel string) string {
	read := func(root string) ([]byte, bool) {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		return data, err == nil
	}
	old, inA := read(a)
	cur, inB := read(b)
	if !isText(old) || !isText(cur) {
		return fmt.Sprintf("Binary files a/%s and b/%s differ\n", rel, rel)
	}
	from, to := "a/"+rel, "b/"+rel
	if !inA {
		from = "/dev/null"
	}
	if !inB {
		to = "/dev/null"
	}
	if bytes.Equal(old, cur) {
		// A mode change, or a directory added or removed.
		return fmt.Sprintf("--- %s\n+++ %s\n(mode or directory changed)\n", from, to)
	}
	return udiff.Unified(from, to, string(old), string(cur))
}

// Repin pins name's folder as it is now, after the person reviewed it:
// reviewed is the Review's Current digest, and the folder must still
// match it (else ErrChangedSinceReview). Findings refuse the re-pin
// unless insist. The grant is kept; runs get only the part the new
// manifest still asks for, and what it newly asks needs a new grant.
func (i *Installed) Repin(ctx context.Context, name, reviewed string, insist bool) (Record, error) {
	l, err := i.lock(ctx)
	if err != nil {
		return Record{}, err
	}
	defer l.Release()
	r, err := i.Record(name)
	if err != nil {
		return r, err
	}
	dir := i.Dir(name)
	es, err := listTree(dir)
	if err != nil {
		return r, fmt.Errorf("skill %s: %w", name, err)
	}
	if got := digestOf(es); got != reviewed {
		return r, fmt.Errorf("%w: reviewed %s, the folder is now %s", ErrChangedSinceReview, reviewed, got)
	}
	if _, err := readManifest(dir); err != nil {
		return r, err
	}
	findings, err := Scan(os.DirFS(dir))
	if err != nil {
		return r, err
	}
	if len(findings) > 0 && !insist {
		return r, &FindingsError{Findings: findings}
	}
	if err := i.snapshot(name, dir); err != nil {
		return r, err
	}
	if err := readOnly(dir); err != nil {
		return r, err
	}
	r.Digest, r.Pinned, r.Insisted = reviewed, i.now().UTC(), findings
	// The signature was over the old digest.
	r.Signer = ""
	return r, i.writeRecord(r)
}
