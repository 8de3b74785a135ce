package sandbox

import (
	"context"

	"github.com/fluffy-agent/fluffy/internal/changeset"
)

// ChangeKind says what happened to a path.
type ChangeKind string

// Change kinds.
const (
	Added    ChangeKind = "added"
	Modified ChangeKind = "modified"
	Deleted  ChangeKind = "deleted"
)

// Change is one path a sandbox changed, relative to the workspace.
type Change struct {
	Path string     `json:"path"`
	Kind ChangeKind `json:"kind"`
	// Type is "file", "dir", "symlink" or "other".
	Type string `json:"type"`
}

// ReadChanges lists what the overlay upper directory upper changes over the
// workspace lower, sorted by path. It is internal/changeset's reading of
// the upper directory (whiteouts, opaque directories, no symlink ever
// followed), kept in this shape for the backends' tests; new code should
// use changeset.OpenUpper and Changes directly.
func ReadChanges(lower, upper string) ([]Change, error) {
	cs, err := changeset.OpenUpper(upper, lower)
	if err != nil {
		return nil, err
	}
	ch, err := cs.Changes(context.Background())
	if err != nil {
		return nil, err
	}
	out := make([]Change, 0, len(ch))
	for _, c := range ch {
		out = append(out, Change{Path: c.Path, Kind: ChangeKind(c.Op), Type: c.Kind.String()})
	}
	return out, nil
}
