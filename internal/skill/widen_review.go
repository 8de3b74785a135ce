package skill

import (
	"errors"
	"path"
	"slices"
	"strings"
)

// FolderWidening is what changed files widen of one skill's folder.
type FolderWidening struct {
	// Dir is the folder, workspace-relative; Name its last element.
	Dir, Name string
	Changes   []Change
	// Invalid is set when the new manifest does not parse (discovery
	// would skip the skill): why.
	Invalid string
}

// ReviewWidening looks at changed (workspace-relative slash paths) for
// manifests of skills: for each folder holding a SKILL.md (before or
// after) whose skill.yaml or carapace.yaml changed, how the manifest in
// effect after widens the one before. before and after read a path on
// either side: contents, and whether it exists. A manifest that does not
// parse before counts as none (discovery skipped the skill); one that
// does not parse after is reported as Invalid. Folders that do not widen
// are left out.
func ReviewWidening(changed []string, before, after func(rel string) ([]byte, bool, error)) ([]FolderWidening, error) {
	var dirs []string
	for _, rel := range changed {
		if d := path.Dir(rel); IsManifestFile(path.Base(rel)) && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	slices.Sort(dirs)
	var out []FolderWidening
	for _, dir := range dirs {
		in := func(read func(string) ([]byte, bool, error)) func(string) ([]byte, bool, error) {
			return func(n string) ([]byte, bool, error) { return read(path.Join(dir, n)) }
		}
		_, had, err := before(path.Join(dir, "SKILL.md"))
		if err != nil {
			return nil, err
		}
		_, has, err := after(path.Join(dir, "SKILL.md"))
		if err != nil {
			return nil, err
		}
		if !had && !has {
			continue
		}
		fw := FolderWidening{Dir: dir, Name: path.Base(dir)}
		prev, err := EffectiveManifest(in(before))
		if err != nil && !errors.Is(err, ErrNotInstallable) {
			return nil, err
		}
		next, err := EffectiveManifest(in(after))
		switch {
		case err != nil && errors.Is(err, ErrNotInstallable):
			fw.Invalid = err.Error()
		case err != nil:
			return nil, err
		default:
			fw.Changes = Widening(prev, next)
		}
		if fw.Invalid != "" || len(fw.Changes) > 0 {
			out = append(out, fw)
		}
	}
	return out, nil
}

// ReviewText renders ReviewWidening's result for a person: a
// WideningSummary per folder ("" when nothing widens).
func ReviewText(ws []FolderWidening) string {
	var b strings.Builder
	for _, w := range ws {
		if w.Invalid != "" {
			b.WriteString("skill " + w.Name + ": the new manifest does not parse (the skill would be skipped): " + w.Invalid + "\n")
			continue
		}
		b.WriteString(WideningSummary(w.Name, w.Changes))
	}
	return b.String()
}
