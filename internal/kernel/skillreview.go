package kernel

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/skill"
)

// SkillReview is what a change set's changes widen of the skills in its
// workspace (a manifest's hosts, credentials, entrypoints, sandbox,
// image; docs/skills.md), for the person reviewing it: a
// WideningSummary per skill, "" when nothing widens. Writes through the
// tools are flagged when they are asked (builtin.skill-widening); this
// also catches what a sandboxed command wrote. The workspace side is read
// through an os.Root, so a link cannot lead the review out of it.
func SkillReview(cs *changeset.ChangeSet, changes []changeset.Change) string {
	var changed []string
	for _, c := range changes {
		changed = append(changed, filepath.ToSlash(c.Path))
	}
	root, err := os.OpenRoot(cs.Workspace())
	if err != nil {
		return "could not check whether the changes widen a skill: " + err.Error() + "\n"
	}
	defer root.Close()
	read := func(f func(string) ([]byte, error)) func(string) ([]byte, bool, error) {
		return func(rel string) ([]byte, bool, error) {
			b, err := f(rel)
			if errors.Is(err, fs.ErrNotExist) {
				return nil, false, nil
			}
			return b, err == nil, err
		}
	}
	ws, err := skill.ReviewWidening(changed,
		read(func(rel string) ([]byte, error) { return root.ReadFile(filepath.FromSlash(rel)) }),
		read(cs.ReadFile))
	if err != nil {
		return "could not check whether the changes widen a skill: " + err.Error() + "\n"
	}
	return skill.ReviewText(ws)
}

// skillReview is SkillReview of session id's change set.
func (k *Kernel) skillReview(ctx context.Context, id string, changes []changeset.Change) string {
	info, err := k.Get(ctx, id)
	if err != nil {
		return "could not check whether the changes widen a skill: " + err.Error() + "\n"
	}
	cs, err := changeset.Open(info.ChangeSet, info.Workspace)
	if err != nil {
		return "could not check whether the changes widen a skill: " + err.Error() + "\n"
	}
	return SkillReview(cs, changes)
}
