package cli

import (
	"io/fs"
	"testing"
	"unicode"

	"github.com/fluffy-agent/fluffy/internal/changeset"
)

// The listing shows full modes (setuid, setgid, sticky included, which
// apply sets) and never prints a name's or target's control or format
// characters raw.
func TestChangeLine(t *testing.T) {
	for _, c := range []struct {
		ch   changeset.Change
		want string
	}{
		{changeset.Change{Path: "shared", Op: changeset.Modified, Kind: changeset.KindDir, OldMode: 0o755, NewMode: 0o755 | fs.ModeSetgid}, `M dir     shared (mode 0755 -> 02755)`},
		{changeset.Change{Path: ".git", Op: changeset.Modified, Kind: changeset.KindDir, OldMode: 0o755, NewMode: 0o777}, `M dir     .git (mode 0755 -> 0777)`},
		{changeset.Change{Path: "tmp", Op: changeset.Added, Kind: changeset.KindDir, NewMode: 0o777 | fs.ModeSticky}, `A dir     tmp (mode 01777)`},
		{changeset.Change{Path: "su", Op: changeset.Added, Kind: changeset.KindFile, NewMode: 0o755 | fs.ModeSetuid}, `A file    su (mode 04755)`},
		{changeset.Change{Path: "plain.go", Op: changeset.Added, Kind: changeset.KindFile, NewMode: 0o644}, `A file    plain.go`},
		{changeset.Change{Path: "\x1b[2J\x1b]0;x\x07evil", Op: changeset.Added, Kind: changeset.KindFile, NewMode: 0o644}, `A file    \x1b[2J\x1b]0;x\aevil`},
		{changeset.Change{Path: "a\u202eexe.txt", Op: changeset.Added, Kind: changeset.KindFile, NewMode: 0o644}, `A file    a\u202eexe.txt`},
		{changeset.Change{Path: "l", Op: changeset.Added, Kind: changeset.KindSymlink, NewTarget: "x\x9by"}, `A symlink l -> x\x9by`},
	} {
		got := changeLine(c.ch)
		if got != c.want {
			t.Errorf("changeLine(%q) = %q, want %q", c.ch.Path, got, c.want)
		}
		for _, r := range got {
			if !unicode.IsPrint(r) {
				t.Errorf("changeLine(%q) prints %U raw", c.ch.Path, r)
			}
		}
	}
}
