package changeset

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/aymanbagabas/go-udiff"
)

// maxDiffBytes caps the size of a file that is diffed line by line;
// larger files are summarised like binary ones.
const maxDiffBytes = 8 << 20

// Diff renders the changes at or below paths (all when none) as a unified
// diff in git's extended format: mode changes, new and deleted files,
// symlinks as their target text, binary files summarised, files marked as
// holding a secret's value (MarkSecrets) named without their content.
func (cs *ChangeSet) Diff(ctx context.Context, paths ...string) (string, error) {
	changes, err := cs.Changes(ctx, paths...)
	if err != nil {
		return "", err
	}
	// A file marked as holding a secret's value is named, its content
	// never shown.
	secrets, err := cs.secretPaths()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, c := range changes {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if err := cs.writeDiff(&b, c, secrets); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

func gitMode(k Kind, m fs.FileMode) string {
	switch k {
	case KindSymlink:
		return "120000"
	case KindDir:
		return fmt.Sprintf("04%04o", unixPerm(m))
	}
	return fmt.Sprintf("10%04o", unixPerm(m))
}

// quote renders a path as git does: quoted when it holds unusual bytes.
func quote(prefix, p string) string {
	s := prefix + p
	for _, r := range s {
		// Control characters (C0, DEL, C1) and format characters (bidi
		// overrides, zero-width) never reach a terminal raw.
		if !unicode.IsPrint(r) || r == '"' || r == '\\' || r == utf8.RuneError {
			return strconv.Quote(s)
		}
	}
	return s
}

func (cs *ChangeSet) writeDiff(b *strings.Builder, c Change, secrets map[string]bool) error {
	if c.Kind == KindDir {
		if c.Op == Modified {
			fmt.Fprintf(b, "diff --git %s %s\nold mode %s\nnew mode %s\n", quote("a/", c.Path), quote("b/", c.Path), gitMode(KindDir, c.OldMode), gitMode(KindDir, c.NewMode))
		}
		return nil
	}
	if c.Kind == KindOther {
		fmt.Fprintf(b, "diff --git %s %s\nunsupported entry (device, fifo or socket) in the change set\n", quote("a/", c.Path), quote("b/", c.Path))
		return nil
	}
	a, bb := quote("a/", c.Path), quote("b/", c.Path)
	fmt.Fprintf(b, "diff --git %s %s\n", a, bb)
	if c.Op != Deleted && secrets[c.Path] {
		fmt.Fprintf(b, "%s holds the value of a secret a command was given: content not shown (docs/secrets.md)\n", bb)
		return nil
	}
	var old, new string
	var oldBin, newBin bool
	var err error
	switch c.Op {
	case Added:
		fmt.Fprintf(b, "new file mode %s\n", gitMode(c.Kind, c.NewMode))
		if new, newBin, err = cs.sideText(cs.upper, c.Path, c.Kind, c.NewTarget); err != nil {
			return err
		}
		a = "/dev/null"
	case Deleted:
		fmt.Fprintf(b, "deleted file mode %s\n", gitMode(c.Kind, c.OldMode))
		if old, oldBin, err = cs.sideText(cs.workspace, c.Path, c.Kind, c.OldTarget); err != nil {
			return err
		}
		bb = "/dev/null"
	case Modified:
		if c.OldMode != c.NewMode && c.Kind == KindFile {
			fmt.Fprintf(b, "old mode %s\nnew mode %s\n", gitMode(c.Kind, c.OldMode), gitMode(c.Kind, c.NewMode))
		}
		if !c.Content {
			return nil
		}
		if old, oldBin, err = cs.sideText(cs.workspace, c.Path, c.Kind, c.OldTarget); err != nil {
			return err
		}
		if new, newBin, err = cs.sideText(cs.upper, c.Path, c.Kind, c.NewTarget); err != nil {
			return err
		}
	}
	if oldBin || newBin {
		if c.OldSize > maxDiffBytes || c.NewSize > maxDiffBytes {
			fmt.Fprintf(b, "Large files %s and %s differ (over %d MiB: not diffed)\n", a, bb, maxDiffBytes>>20)
			return nil
		}
		fmt.Fprintf(b, "Binary files %s and %s differ\n", a, bb)
		return nil
	}
	if old == new {
		return nil
	}
	u, err := udiff.ToUnified(a, bb, old, udiff.Lines(old, new), 3)
	if err != nil {
		return fmt.Errorf("changeset: diff %s: %w", c.Path, err)
	}
	b.WriteString(u)
	return nil
}

// sideText returns one side of a diff: a file's text, or a symlink's target
// (without a final newline, as git shows it), and whether it is binary.
func (cs *ChangeSet) sideText(root, rel string, k Kind, target string) (string, bool, error) {
	if k == KindSymlink {
		return target, false, nil
	}
	f, err := openFile(root, rel)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxDiffBytes+1))
	if err != nil {
		return "", false, err
	}
	if len(data) > maxDiffBytes || isBinary(data) {
		return "", true, nil
	}
	return string(data), false, nil
}

// isBinary applies git's heuristic: a NUL byte in the first 8000 bytes.
func isBinary(b []byte) bool {
	if len(b) > 8000 {
		b = b[:8000]
	}
	return bytes.IndexByte(b, 0) >= 0
}
