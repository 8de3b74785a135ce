package changeset

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// secret is the content of a file outside both trees that symlinks in the
// fuzzed trees point at: no listing or diff may ever show it.
const secret = "SECRET-OUTSIDE-THE-CHANGE-SET"

var fuzzNames = []string{"a", "b", "a/x", "a/y", "c", "c/d", "c/d/e", "f"}

// buildTrees turns the fuzzer's bytes into a lower (workspace) and an
// upper (change set) tree, four bytes an entry: operation, tree, name,
// content. Entries whose parent is missing or clash are skipped.
func buildTrees(data []byte, lower, upper, outside string) {
	for i := 0; i+4 <= len(data) && i < 4*64; i += 4 {
		op, tree, name, c := data[i]%7, data[i+1]%2, fuzzNames[int(data[i+2])%len(fuzzNames)], data[i+3]
		root := lower
		if tree == 1 {
			root = upper
		}
		p := filepath.Join(root, name)
		switch op {
		case 0:
			// Never through what exists (a fifo would block the writer).
			if f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
				_, _ = f.Write(bytes.Repeat([]byte{'a' + c%3}, int(c%5)))
				f.Close()
			}
		case 1:
			_ = os.Mkdir(p, 0o755)
		case 2:
			_ = os.Symlink(filepath.Join(outside, "secret"), p)
		case 3:
			_ = os.Symlink(strings.Repeat("../", int(c%6))+"secret", p)
		case 4:
			_ = unix.Mkfifo(p, 0o644)
		case 5:
			// An overlay whiteout (needs CAP_MKNOD; skipped without).
			if tree == 1 {
				_ = unix.Mknod(p, unix.S_IFCHR, 0)
			}
		case 6:
			if tree == 1 {
				_ = unix.Lsetxattr(p, "user.overlay.opaque", []byte("y"), 0)
			}
		}
	}
}

// FuzzChangesUntrusted feeds Changes and Diff upper directories an
// untrusted process (a sandboxed command) could have written: symlinks
// out of the tree, fifos, whiteouts, opaque directories, type changes.
// Neither may fail on them, hang, follow a link, or report a path outside
// the trees. (The corpus came with this test from internal/sandbox, whose
// own reader of upper directories this package replaced.)
func FuzzChangesUntrusted(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 1, 0, 2})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 2, 1, 5, 1, 2, 0})
	f.Add([]byte{1, 0, 0, 0, 1, 1, 0, 0, 6, 1, 0, 0, 2, 1, 3, 0})
	f.Add([]byte{0, 0, 4, 3, 3, 1, 4, 5, 4, 1, 7, 0, 2, 1, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		lower, upper, outside := filepath.Join(base, "ws"), filepath.Join(base, "cs", "upper"), filepath.Join(base, "outside")
		for _, d := range []string{lower, upper, outside} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, d := range []string{outside, filepath.Join(base, "cs"), base} {
			if err := os.WriteFile(filepath.Join(d, "secret"), []byte(secret), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		buildTrees(data, lower, upper, outside)

		cs, err := OpenUpper(upper, lower)
		if err != nil {
			t.Fatal(err)
		}
		changes, err := cs.Changes(context.Background())
		if errors.Is(err, ErrUnsupported) {
			return // refused, not misread
		}
		if err != nil {
			t.Fatalf("Changes: %v", err)
		}
		if !slices.IsSortedFunc(changes, func(a, b Change) int { return strings.Compare(a.Path, b.Path) }) {
			t.Errorf("not sorted: %v", changes)
		}
		for _, c := range changes {
			if c.Path == "" || filepath.IsAbs(c.Path) || filepath.Clean(c.Path) != c.Path || c.Path == ".." || strings.HasPrefix(c.Path, "../") {
				t.Errorf("bad path %q", c.Path)
			}
			_, errL := os.Lstat(filepath.Join(lower, c.Path))
			_, errU := os.Lstat(filepath.Join(upper, c.Path))
			if errL != nil && errU != nil {
				t.Errorf("%s %s exists in neither tree", c.Op, c.Path)
			}
			switch c.Op {
			case Added, Modified, Deleted:
			default:
				t.Errorf("op %q", c.Op)
			}
		}
		d, err := cs.Diff(context.Background())
		if err != nil {
			t.Fatalf("Diff: %v", err)
		}
		if strings.Contains(d, secret) {
			t.Fatalf("the diff followed a symlink out of the trees:\n%s", d)
		}
	})
}
