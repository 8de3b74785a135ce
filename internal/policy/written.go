package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// MaxAgentWritten bounds the list AgentWritten returns. Beyond it the
// list is the workspace root alone: every file counts as written (the
// safe side).
const MaxAgentWritten = 4096

// errEnough stops the walk at MaxAgentWritten.
var errEnough = errors.New("enough")

// AgentWritten lists the files of a change set — its overlay upper
// directory — as canonical paths in workspace: what the agent wrote in the
// session, for Operation.AgentWritten. Deleted files (whiteouts) and
// directories are not listed. A missing upper directory is an empty change
// set. ws must be canonical.
func AgentWritten(upper, ws string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == upper && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if d.IsDir() || d.Type()&fs.ModeCharDevice != 0 { // a whiteout marks a deletion
			return nil
		}
		rel, err := filepath.Rel(upper, p)
		if err != nil {
			return err
		}
		if len(out) == MaxAgentWritten {
			return errEnough
		}
		out = append(out, filepath.Join(ws, rel))
		return nil
	})
	if errors.Is(err, errEnough) {
		return []string{ws}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("policy: listing the change set: %w", err)
	}
	return out, nil
}
