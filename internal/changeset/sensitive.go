package changeset

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
)

// ErrSensitive is returned (as a *SensitiveError) when an apply would
// write, without the user naming them, files that make programs run or
// change fluffy's rules once they are in the real tree.
var ErrSensitive = errors.New("changeset: the change set writes files that make programs run outside the sandbox")

// ErrOwnFile is returned (as an *OwnFileError) when an apply would write
// one of fluffy's own files: its data directory, keys, configuration,
// policy or binaries. Apply never writes them, named or not.
var ErrOwnFile = errors.New("changeset: the change set writes fluffy's own files")

// SensitiveError lists the changes Apply refused to write because they
// were not named one by one. Nothing was applied.
type SensitiveError struct {
	Paths []string
	// Reasons holds, for each path, why it was refused.
	Reasons []string
}

func (e *SensitiveError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v; nothing was applied:", ErrSensitive)
	for i, p := range e.Paths {
		fmt.Fprintf(&b, "\n  %s", quote("", p))
		if i < len(e.Reasons) && e.Reasons[i] != "" {
			fmt.Fprintf(&b, ": %s", e.Reasons[i])
		}
	}
	b.WriteString("\nreview them (their diff), then apply each by naming it, or discard them")
	return b.String()
}

func (e *SensitiveError) Unwrap() error { return ErrSensitive }

// OwnFileError lists the changes to fluffy's own files. Nothing was
// applied.
type OwnFileError struct {
	Paths []string
}

func (e *OwnFileError) Error() string {
	q := make([]string, len(e.Paths))
	for i, p := range e.Paths {
		q[i] = quote("", p)
	}
	return fmt.Sprintf("%v: %s; nothing was applied. fluffy's data directory, keys, configuration, policy and binaries are never written by an apply, named or not: discard these paths ('fluffy changeset discard PATH'), and if you want the change, copy the file from the change set's upper directory by hand",
		ErrOwnFile, strings.Join(q, ", "))
}

func (e *OwnFileError) Unwrap() error { return ErrOwnFile }

// Git finds a repository's configuration (which names programs it runs:
// core.fsmonitor, core.pager, core.hooksPath, filters, aliases...) and its
// hooks in more ways than ".git/config": a ".git" file ("gitdir: X"), a
// "commondir" file in the git directory, a bare repository (a directory
// with HEAD, objects and refs) found while walking up, linked worktrees,
// submodules. The classification below follows those discovery rules.
//
// gitData are the entries of a git directory that only hold data git reads
// as data: objects, refs and their logs, the index, the head files, the
// commit message. A change to them cannot make git run a program, so a
// commit made in the sandbox applies like any other file. Everything else
// in a git directory (config, config.worktree, hooks, info — attributes
// and sparse-checkout —, modules and worktrees — nested git directories —,
// commondir, gitdir, objects/info — alternates, which make git read
// another repository's objects —, the rebase and sequencer state — whose
// todo lists hold "exec" lines —, and any name git may add later) is
// sensitive: an allow list fails closed.
var gitData = map[string]bool{
	"objects":        true, // except objects/info, below
	"refs":           true,
	"logs":           true,
	"index":          true,
	"head":           true,
	"orig_head":      true,
	"fetch_head":     true,
	"commit_editmsg": true,
	"packed-refs":    true,
	"description":    true,
}

// foldName is the form names are compared in: lower case, trailing dots
// and spaces removed. A workspace on a case-insensitive file system (a
// casefold ext4 directory, vfat, a mounted share) lets ".GIT/Config" or
// "Head" be what git opens; folding only ever adds refusals.
func foldName(s string) string {
	if t := strings.TrimRight(s, ". "); t != "" {
		s = t
	}
	return strings.ToLower(s)
}

// gitDataPath reports whether rest (a path relative to a git directory,
// not ".") is data only.
func gitDataPath(rest string) bool {
	first, tail, _ := strings.Cut(rest, "/")
	first = foldName(first)
	if !gitData[first] {
		return false
	}
	sub, _, _ := strings.Cut(tail, "/")
	return first != "objects" || foldName(sub) != "info"
}

// gitMarkers are file names that make the directory holding them a git
// directory or point git at another one: HEAD (with objects and refs, a
// bare repository git discovers), commondir (the main repository of a
// linked worktree: its config and hooks are read from there), gitdir (a
// worktree's back pointer), config.worktree (per-worktree config).
var gitMarkers = map[string]bool{"head": true, "commondir": true, "gitdir": true, "config.worktree": true}

// Sensitive reports whether a change-set path (clean, relative), judged by
// its name alone, is one whose arrival in the real tree can make programs
// run or change fluffy's rules without any sandbox:
//   - ".fluffy" and everything below it (the project's policy and
//     configuration);
//   - ".git" itself at any depth (as a file it is a "gitdir:" pointer that
//     makes another directory the repository; removing or replacing it
//     changes which repository governs the tree) and everything in it
//     except git's data (gitData);
//   - ".gitmodules" (submodule URLs and paths git clones and checks out);
//   - ".gitconfig" (git's user configuration, when the workspace is a home
//     directory or a file a config includes);
//   - the git directory markers HEAD, commondir, gitdir, config.worktree
//     anywhere outside a ".git" directory: they turn a plain directory
//     into a repository git discovers (bare repositories are found by
//     default, safe.bareRepository=all).
//
// Apply also refuses, by looking at the tree, what a name alone cannot
// tell (judge.reason): config and hooks in a directory that is a git
// directory by its contents, directories a "gitdir:" or "commondir" in
// the change set points at, widened modes.
//
// ".gitattributes" is not sensitive: it only names filters and diff
// drivers, which run only when a configuration (itself sensitive) defines
// them.
func Sensitive(rel string) bool {
	return lexicalReason(rel) != ""
}

// lexicalReason is Sensitive with the reason.
func lexicalReason(rel string) string {
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		switch foldName(p) {
		case ".fluffy":
			return "fluffy's project policy and configuration"
		case ".git":
			rest := strings.Join(parts[i+1:], "/")
			if rest == "" {
				return "a .git entry decides which repository governs its directory (as a file, a gitdir: pointer)"
			}
			if !gitDataPath(rest) {
				return "git control file (config, hooks, info, modules, worktrees, commondir, alternates...): git reads it and runs what it names"
			}
			return ""
		}
	}
	switch base := foldName(parts[len(parts)-1]); {
	case base == ".gitmodules":
		return "submodule configuration: git clones and checks out what it names"
	case base == ".gitconfig":
		return "git configuration: git runs what it names"
	case gitMarkers[base]:
		return "makes its directory a git repository, or points git at one (" + base + ")"
	}
	return ""
}

// judge decides which changes of a plan need to be named: by their name
// (lexicalReason), by the git directories around them in the merged view
// and the real tree, and by their modes.
type judge struct {
	cs *ChangeSet
	// gitDirs caches whether a directory is a git directory by its
	// contents.
	gitDirs map[string]bool
	// pointed are the directories a changed "gitdir:" or "commondir" file
	// points at (workspace-relative).
	pointed map[string]bool
	// configs caches what each repository's real config points at
	// (configRefsAt), by working tree.
	configs map[string]gitConfigRefs
	// secrets are the paths marked as holding a secret's value
	// (MarkSecrets).
	secrets    map[string]bool
	secretsErr error
}

func (cs *ChangeSet) newJudge(all []Change) *judge {
	j := &judge{cs: cs, gitDirs: map[string]bool{}, pointed: map[string]bool{}, configs: map[string]gitConfigRefs{}}
	// Unreadable marks fail closed: every changed file is then treated
	// as marked.
	if j.secrets, j.secretsErr = cs.secretPaths(); j.secretsErr != nil {
		j.secrets = map[string]bool{}
	}
	for _, c := range all {
		if c.Op == Deleted {
			continue
		}
		base := foldName(path.Base(c.Path))
		if base != ".git" && base != "commondir" && base != "gitdir" {
			continue
		}
		var target string
		switch c.Kind {
		case KindSymlink:
			target = c.NewTarget
		case KindFile:
			b, err := cs.readHead(c.Path, 4096)
			if err != nil {
				continue
			}
			target = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "gitdir:"))
		default:
			continue
		}
		// A .git file's "gitdir:" is relative to its directory, a
		// commondir to the git directory holding it: both path.Dir.
		if t, ok := relTarget(path.Dir(c.Path), target, cs.workspace); ok {
			j.pointed[t] = true
		}
	}
	return j
}

// readHead reads up to n bytes of the merged file at rel.
func (cs *ChangeSet) readHead(rel string, n int64) ([]byte, error) {
	f, err := cs.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

// relTarget resolves a pointer's target (relative to dir, or absolute)
// to a workspace-relative path; ok is false when it lies outside.
func relTarget(dir, target, ws string) (string, bool) {
	if target == "" || strings.IndexByte(target, 0) >= 0 {
		return "", false
	}
	if strings.HasPrefix(target, "/") {
		r, err := filepath.Rel(ws, filepath.Clean(target))
		if err != nil {
			return "", false
		}
		target, dir = filepath.ToSlash(r), "."
	}
	p := path.Join(dir, target)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", false
	}
	return p, true
}

// isGitDir reports whether dir is, in the merged view or the real tree, a
// directory git treats as a repository: it holds HEAD or commondir, or
// objects and refs, or a changed pointer names it. A lookup that fails
// counts as yes (fail closed).
func (j *judge) isGitDir(dir string) bool {
	if v, ok := j.gitDirs[dir]; ok {
		return v
	}
	has := func(name string) bool {
		rel := path.Join(dir, name)
		// Below a symlink nothing of the change set lives (apply never
		// writes through one); any other failed lookup fails closed.
		m, err := j.cs.lookup(rel)
		if err != nil && !errors.Is(err, ErrSymlink) || m.kind != KindNone {
			return true
		}
		n, err := lstatNode(j.cs.workspace, rel, false)
		return err != nil || n.kind != KindNone
	}
	v := j.pointed[dir] || has("HEAD") || has("commondir") || has("objects") && has("refs")
	j.gitDirs[dir] = v
	return v
}

// reason returns why the change c must be named to be applied, or "".
func (j *judge) reason(c Change) string {
	if c.Op != Deleted && c.Kind != KindDir && (j.secrets[c.Path] || j.secretsErr != nil) {
		return secretReason
	}
	if c.Op == Modified && !c.Content && c.Kind != KindSymlink {
		// A mode change alone: only a widening one inside a git
		// directory (another user could then replace its config or
		// hooks) or one that makes a control file executable matters.
		if !widens(c.OldMode, c.NewMode) {
			return ""
		}
		if j.underGit(c.Path) {
			return fmt.Sprintf("mode change %s -> %s widens access to a git directory or its contents", modeString(c.OldMode), modeString(c.NewMode))
		}
	}
	if c.Op != Deleted {
		if r := modeReason(c); r != "" {
			return r
		}
	}
	if c.Kind == KindDir && c.Op != Deleted {
		// A new directory is judged by what it holds; a directory's mode
		// change that passed the checks above is harmless.
		return ""
	}
	if r := lexicalReason(c.Path); r != "" {
		return r
	}
	if d := j.inGitDir(c.Path); d != "" {
		return "control file of " + quote("", d) + ", which git treats as a git directory (it holds HEAD, commondir, or objects and refs, or a changed gitdir:/commondir points at it): git reads it and runs what it names"
	}
	return j.configReason(c.Path)
}

// underGit reports whether rel is a .git entry, lies below one, or lies
// in (or is) a directory git treats as a git directory.
func (j *judge) underGit(rel string) bool {
	for _, p := range strings.Split(rel, "/") {
		if foldName(p) == ".git" {
			return true
		}
	}
	for d := rel; ; d = path.Dir(d) {
		if j.isGitDir(d) {
			return true
		}
		if d == "." {
			return false
		}
	}
}

// inGitDir returns the nearest ancestor of rel (the workspace root
// included) that is a git directory by its contents and of which rel is
// not data, or "".
func (j *judge) inGitDir(rel string) string {
	for d := path.Dir(rel); ; d = path.Dir(d) {
		if j.isGitDir(d) {
			rest := rel
			if d != "." {
				rest = strings.TrimPrefix(rel, d+"/")
			}
			if gitDataPath(rest) {
				return ""
			}
			return d
		}
		if d == "." {
			return ""
		}
	}
}

// widens reports whether newMode grants any permission oldMode did not,
// or adds a setuid, setgid or sticky bit.
func widens(oldMode, newMode fs.FileMode) bool {
	return unixPerm(newMode)&^unixPerm(oldMode) != 0
}

// modeReason refuses, unless named, a mode that lets other users change
// what runs: setuid, setgid or sticky anywhere, world-writable new
// entries, and a change that makes an entry group- or world-writable.
func modeReason(c Change) string {
	if c.Kind == KindSymlink {
		return ""
	}
	special := c.NewMode & (fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	switch {
	case special != 0 && (c.Op == Added || special&^c.OldMode != 0):
		return fmt.Sprintf("mode %s sets setuid, setgid or sticky", modeString(c.NewMode))
	case c.Op == Added && c.NewMode&0o002 != 0:
		return fmt.Sprintf("mode %s is writable by every user", modeString(c.NewMode))
	case c.Op == Modified && c.NewMode&^c.OldMode&0o022 != 0:
		return fmt.Sprintf("mode change %s -> %s lets other users write it", modeString(c.OldMode), modeString(c.NewMode))
	}
	return ""
}

// modeString renders permission and special bits as octal with a leading
// zero (0755, 04755, 01777).
func modeString(m fs.FileMode) string {
	if u := unixPerm(m); u > 0o777 {
		return fmt.Sprintf("%05o", u)
	}
	return fmt.Sprintf("%04o", unixPerm(m))
}

// ModeString renders a change's mode with its setuid, setgid and sticky
// bits, as octal (04755).
func ModeString(m fs.FileMode) string { return modeString(m) }

// sensitiveUnnamed returns the plan's sensitive paths that the selection
// does not name exactly (selected only through a directory, or by
// applying everything), with the reasons.
func (j *judge) sensitiveUnnamed(plan []Change, s sel) ([]string, []string) {
	var paths, reasons []string
	for _, c := range plan {
		r := j.reason(c)
		if r == "" {
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
			paths = append(paths, c.Path)
			reasons = append(reasons, r)
		}
	}
	return paths, reasons
}

// ownFiles returns the plan's paths that are fluffy's own files.
func (cs *ChangeSet) ownFiles(plan []Change) []string {
	if cs.own == nil {
		return nil
	}
	var out []string
	for _, c := range plan {
		if cs.own(filepath.Join(cs.workspace, filepath.FromSlash(c.Path))) {
			out = append(out, c.Path)
		}
	}
	return out
}
