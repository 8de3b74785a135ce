package changeset

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// secretsFile, in the change set's directory, lists the paths the kernel
// found a secret value in (docs/secrets.md): their content is not shown
// in a diff, and they are applied only when named.
const secretsFile = "secrets.json"

// MarkSecrets records that the files at rels (workspace-relative) hold a
// value of a secret a command was given. A bare upper has nowhere to
// record it: ErrNoBase.
func (cs *ChangeSet) MarkSecrets(rels []string) error {
	if cs.dir == "" {
		return fmt.Errorf("%w: cannot mark secrets in a bare upper directory", ErrNoBase)
	}
	have, err := cs.secretPaths()
	if err != nil {
		return err
	}
	n := len(have)
	for _, r := range rels {
		have[filepath.ToSlash(filepath.Clean(r))] = true
	}
	if len(have) == n {
		return nil
	}
	list := make([]string, 0, len(have))
	for p := range have {
		list = append(list, p)
	}
	slices.Sort(list)
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	tmp := filepath.Join(cs.dir, secretsFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("changeset: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(cs.dir, secretsFile)); err != nil {
		return fmt.Errorf("changeset: %w", err)
	}
	return nil
}

// secretPaths reads the marked paths; none when nothing was marked.
func (cs *ChangeSet) secretPaths() (map[string]bool, error) {
	out := map[string]bool{}
	if cs.dir == "" {
		return out, nil
	}
	b, err := os.ReadFile(filepath.Join(cs.dir, secretsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("changeset: %w", err)
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("changeset: %s: %w", secretsFile, err)
	}
	for _, p := range list {
		out[p] = true
	}
	return out, nil
}

// secretReason is why a marked path is applied only by name.
const secretReason = "holds the value of a secret a command was given (docs/secrets.md): its content is not shown; apply it only if you mean it to reach the working tree"
