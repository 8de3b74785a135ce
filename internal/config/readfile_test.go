package config

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A project's configuration file that is a FIFO (a hostile repository),
// a socket or a directory is refused at once with what it is; before, a
// FIFO made every fluffy command in that directory wait for ever. A
// symlink to a regular file is still read.
func TestLoadSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock.yaml")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	big := write(t, dir, "big.yaml", "# "+strings.Repeat("x", maxFileSize)+"\n")
	real := write(t, dir, "real.yaml", "sandbox:\n  pids: 7\n")
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{fifo, "it is a FIFO (named pipe), not a regular file; fluffy reads only regular files"},
		{sock, "it is a socket, not a regular file"},
		{dir, "it is a directory, not a regular file"},
		{big, "larger than 1048576 bytes"},
		{link, ""},
	} {
		_, err := Load(Options{Env: mapEnv(map[string]string{"HOME": dir}), ProjectFile: c.path})
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.path, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s: err = %v, want it to name the file and say %q", c.path, err, c.want)
		}
		if err := ValidateFile(c.path, LayerProject, mapEnv(map[string]string{"HOME": dir})); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ValidateFile(%s) = %v, want %q", c.path, err, c.want)
		}
	}
}
