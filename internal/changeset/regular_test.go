package changeset_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/changeset"
)

// A FIFO (with a writer holding it open, so a non-blocking open alone
// would not do) or a socket, in the workspace or in the upper layer, is
// never opened for reading: Open and ReadFile refuse it at once with
// ErrNotRegular naming what it is, and listing the changes or the diff
// does not wait on it either.
func TestOpenRefusesSpecialFiles(t *testing.T) {
	for _, kind := range []string{"fifo", "socket"} {
		for _, layer := range []string{"lower", "upper"} {
			t.Run(kind+"/"+layer, func(t *testing.T) {
				ws := t.TempDir()
				if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("a\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				cs, err := changeset.Begin(t.Context(), ws, filepath.Join(t.TempDir(), "cs"))
				if err != nil {
					t.Fatal(err)
				}
				dir := ws
				if layer == "upper" {
					dir = cs.UpperDir()
				}
				p := filepath.Join(dir, "special")
				switch kind {
				case "fifo":
					if err := syscall.Mkfifo(p, 0o644); err != nil {
						t.Fatal(err)
					}
					w, err := os.OpenFile(p, os.O_RDWR, 0)
					if err != nil {
						t.Fatal(err)
					}
					defer w.Close()
				case "socket":
					l, err := net.Listen("unix", p)
					if err != nil {
						t.Fatal(err)
					}
					defer l.Close()
				}
				want := map[string]string{"fifo": "special is a FIFO (named pipe), not a regular file", "socket": "special is a socket, not a regular file"}[kind]
				if f, err := cs.Open("special"); !errors.Is(err, changeset.ErrNotRegular) || !strings.Contains(err.Error(), want) {
					if f != nil {
						f.Close()
					}
					t.Errorf("Open = %v, want ErrNotRegular saying %q", err, want)
				}
				if _, err := cs.ReadFile("special"); !errors.Is(err, changeset.ErrNotRegular) {
					t.Errorf("ReadFile = %v, want ErrNotRegular", err)
				}
				if b, err := cs.ReadFile("a.txt"); err != nil || string(b) != "a\n" {
					t.Errorf("ReadFile(a.txt) = %q, %v", b, err)
				}
				if _, err := cs.Changes(t.Context()); err != nil {
					t.Errorf("Changes = %v", err)
				}
				if _, err := cs.Diff(t.Context()); err != nil {
					t.Errorf("Diff = %v", err)
				}
			})
		}
	}
}
