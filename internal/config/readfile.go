package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// maxFileSize bounds a configuration file.
const maxFileSize = 1 << 20

// readFile reads a configuration file, which must be a regular file of at
// most maxFileSize bytes. A project's file comes with the repository, so
// it may be a FIFO (opening one to read waits for a writer for ever, and
// fluffy would hang in that directory) or a device: the open does not
// wait (O_NONBLOCK) and fstat on the opened descriptor judges the type.
// Symbolic links are followed: dotfiles managers link configuration files.
func readFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ENXIO) {
		// A socket (or a device without its driver) cannot be opened:
		// say what it is.
		if fi, serr := os.Stat(path); serr == nil && !fi.Mode().IsRegular() {
			return nil, notRegular(fi.Mode())
		}
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(fi.Mode())
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("larger than %d bytes", maxFileSize)
	}
	return data, nil
}

func notRegular(m fs.FileMode) error {
	return fmt.Errorf("it is a %s, not a regular file; fluffy reads only regular files", fileKind(m))
}

func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "FIFO (named pipe)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m.IsDir():
		return "directory"
	}
	return "file of type " + m.Type().String()
}
