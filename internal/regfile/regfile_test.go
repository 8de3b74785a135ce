package regfile

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestSpecialFiles: nothing but a regular file is read, and the open never
// waits: a FIFO without a writer would block a plain open for ever (the
// test would hang, not fail).
func TestSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reg := filepath.Join(dir, "reg")
	if err := os.WriteFile(reg, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("fifo", filepath.Join(dir, "link-to-fifo")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("reg", filepath.Join(dir, "link-to-reg")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()

	for _, tc := range []struct {
		name, kind string // kind "" = readable
	}{
		{"fifo", "FIFO (named pipe)"},
		{"sock", "socket"},
		{"link-to-fifo", "FIFO (named pipe)"},
		{"reg", ""},
		{"link-to-reg", ""},
		{"sub", "directory"},
	} {
		for _, via := range []string{"path", "root"} {
			var data []byte
			var err error
			if via == "path" {
				data, err = ReadFile(filepath.Join(dir, tc.name), 1<<10)
			} else {
				data, err = ReadFileIn(root, tc.name, 1<<10)
			}
			if tc.kind == "" {
				if err != nil || string(data) != "hello" {
					t.Errorf("%s via %s: %q, %v; want hello", tc.name, via, data, err)
				}
				continue
			}
			var nr *NotRegularError
			if !errors.As(err, &nr) || !errors.Is(err, ErrNotRegular) || nr.Kind != tc.kind {
				t.Errorf("%s via %s: %v; want a NotRegularError of kind %q", tc.name, via, err, tc.kind)
				continue
			}
			if !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), tc.kind) {
				t.Errorf("%s via %s: %q does not name the path and its kind", tc.name, via, err)
			}
		}
	}
	// /dev/zero never ends: refused, not read up to the limit.
	if _, err := ReadFile("/dev/zero", 1<<10); !errors.Is(err, ErrNotRegular) {
		t.Errorf("/dev/zero: %v; want ErrNotRegular", err)
	}
	if _, err := Open(filepath.Join(dir, "link-to-reg"), true); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("noFollow through a symlink: %v; want ELOOP", err)
	}
}

func TestReadLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(p, 5); err != nil || string(b) != "12345" {
		t.Errorf("at the limit: %q, %v", b, err)
	}
	if _, err := ReadFile(p, 4); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "larger than 4 bytes") {
		t.Errorf("past the limit: %v; want ErrTooLarge naming the limit", err)
	}
}
