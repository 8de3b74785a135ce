package builtin

import (
	"errors"
	"io/fs"
	"path"
	"strings"

	"github.com/aymanbagabas/go-udiff"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/skill"
)

// A write that changes a skill's manifest so that the skill may reach,
// hold or run more (skill.Widening) is tagged TagSkillWidens, which
// the built-in rule builtin.skill-widening holds for a person every time;
// the approval request shows what widens above the manifest's diff
// (docs/skills.md).

// TagSkillWidens marks a write that widens a skill's manifest; the
// policy's built-in rule builtin.skill-widening matches it.
const TagSkillWidens = policy.TagSkillWidens

// plannedWrites are a write tool's results before it runs: workspace
// path -> new contents, nil for a deletion. Writes that would fail are
// left out (Run reports them).
type plannedWrites map[string][]byte

func (b *builtins) plannedWrite(in *WriteIn) plannedWrites {
	rel, err := b.rel(in.Path)
	if err != nil || !touchesManifest(rel) {
		return nil
	}
	return plannedWrites{rel: []byte(in.Content)}
}

func (b *builtins) plannedEdit(in *EditIn) plannedWrites {
	out := plannedWrites{}
	if in.Diff == "" {
		rel, err := b.rel(in.Path)
		if err != nil || !touchesManifest(rel) {
			return nil
		}
		data, err := b.readAll("fs.edit", rel)
		if err != nil {
			return nil
		}
		s, err := replaceOnce(rel, string(data), in.Old, in.New)
		if err != nil {
			return nil
		}
		out[rel] = []byte(s)
		return out
	}
	fps, err := parsePatch(in.Diff, in.Path)
	if err != nil {
		return nil
	}
	for _, fp := range fps {
		rel, err := b.rel(fp.Path)
		if err != nil || !touchesManifest(rel) {
			continue
		}
		cur := ""
		if !fp.New {
			data, err := b.readAll("fs.edit", rel)
			if err != nil {
				continue
			}
			cur = string(data)
		}
		s, err := applyHunks(rel, cur, fp.Hunks)
		if err != nil {
			continue
		}
		if fp.Delete {
			out[rel] = nil
		} else {
			out[rel] = []byte(s)
		}
	}
	return out
}

func touchesManifest(rel string) bool { return skill.IsManifestFile(path.Base(rel)) }

// skillWidening is what the planned writes widen, one flag per skill
// folder with its manifest's diff, "" when nothing widens
// (skill.ReviewWidening says which folders count).
func (b *builtins) skillWidening(w plannedWrites) string {
	changed := make([]string, 0, len(w))
	for rel := range w {
		changed = append(changed, rel)
	}
	ws, err := skill.ReviewWidening(changed, b.readFn(nil), b.readFn(w))
	if err != nil {
		// Fail closed: what cannot be read cannot be shown not to widen.
		return "could not check whether this widens a skill: " + err.Error() + "\n"
	}
	var out strings.Builder
	for _, fw := range ws {
		out.WriteString(skill.ReviewText([]skill.FolderWidening{fw}))
		for _, n := range []string{"skill.yaml", "carapace.yaml"} {
			rel := path.Join(fw.Dir, n)
			if data, ok := w[rel]; ok {
				old, _, _ := b.readFn(nil)(rel)
				out.WriteString(udiff.Unified("a/"+rel, "b/"+rel, string(old), string(data)))
			}
		}
	}
	return out.String()
}

// readFn reads a workspace path from the change set's merged view, or
// from w where it plans a write.
func (b *builtins) readFn(w plannedWrites) func(string) ([]byte, bool, error) {
	return func(rel string) ([]byte, bool, error) {
		if data, ok := w[rel]; ok {
			return data, data != nil, nil
		}
		data, err := b.readAll("fs.read", rel)
		if err != nil {
			if _, serr := b.o.ChangeSet.Stat(rel); errors.Is(serr, fs.ErrNotExist) {
				return nil, false, nil
			}
			return nil, false, err
		}
		return data, true, nil
	}
}

// tagSkillWidening tags op when the planned writes widen a skill.
func (b *builtins) tagSkillWidening(w plannedWrites, op *operation.Operation) {
	if len(w) > 0 && b.skillWidening(w) != "" && !op.HasTag(TagSkillWidens) {
		op.Tags = append(op.Tags, TagSkillWidens)
	}
}
