package changeset

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// ErrSensitive is returned (as a *SensitiveError) when an apply would
// write, without the user naming them, files that make programs run or
// change fluffy's rules once they are in the real tree.
var ErrSensitive = errors.New("changeset: the change set writes files that make programs run outside the sandbox")

// SensitiveError lists the changes Apply refused to write because they
// were not named one by one. Nothing was applied.
type SensitiveError struct {
	Paths []string
}

func (e *SensitiveError) Error() string {
	return fmt.Sprintf("%v: %s; nothing was applied. Review them (their diff), then apply each by naming it, or discard them",
		ErrSensitive, strings.Join(e.Paths, ", "))
}

func (e *SensitiveError) Unwrap() error { return ErrSensitive }

// Sensitive reports whether a change-set path (clean, relative) is one
// whose arrival in the real tree runs programs or changes the rules
// without any sandbox: git's control files — hooks, config (fsmonitor,
// filters, aliases, hooksPath), info/ and submodule config, in the
// workspace's repository or a nested one — and fluffy's project
// directory. Anything in the sandbox, a test included, can write them
// into the change set, so apply never carries them along with the rest:
// the user names each one.
func Sensitive(rel string) bool {
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		switch p {
		case ".fluffy":
			return true
		case ".git":
			rest := parts[i+1:]
			if len(rest) == 0 {
				// The directory itself: a change of its kind or mode.
				return false
			}
			switch rest[0] {
			case "config", "hooks", "info", "modules":
				return true
			}
			return false
		}
	}
	return false
}

// sensitiveUnnamed returns the plan's sensitive paths that the selection
// does not name exactly (selected only through a directory, or by
// applying everything). Directories are judged by what they hold.
func sensitiveUnnamed(plan []Change, s sel) []string {
	var out []string
	for _, c := range plan {
		if c.Kind == KindDir && c.Op != Deleted {
			continue
		}
		if !Sensitive(path.Clean(c.Path)) {
			continue
		}
		named := false
		for _, q := range s {
			if q == c.Path {
				named = true
				break
			}
		}
		if !named {
			out = append(out, c.Path)
		}
	}
	return out
}
