package config

import (
	"errors"
	"fmt"
	"os"

	"github.com/fluffy-agent/fluffy/internal/regfile"
)

// maxFileSize bounds a configuration file.
const maxFileSize = 1 << 20

// readFile reads a configuration file, which must be a regular file of at
// most maxFileSize bytes. A project's file comes with the repository, so
// it may be a FIFO (opening one to read waits for a writer for ever, and
// fluffy would hang in that directory) or a device: regfile opens without
// waiting and judges the type on the opened descriptor. Symbolic links
// are followed: dotfiles managers link configuration files. The message
// leaves the path out: the caller's Error names the file.
func readFile(path string) ([]byte, error) {
	if path == os.DevNull {
		// "--config /dev/null": no user file, said explicitly (the demo
		// does). Only this exact name: a project's config.yaml that is a
		// symlink to a device is refused like any other device.
		return nil, nil
	}
	data, err := regfile.ReadFile(path, maxFileSize)
	var nr *regfile.NotRegularError
	switch {
	case errors.As(err, &nr):
		return nil, fmt.Errorf("it is a %s, not a regular file; fluffy reads only regular files: %w", nr.Kind, regfile.ErrNotRegular)
	case errors.Is(err, regfile.ErrTooLarge):
		return nil, fmt.Errorf("larger than %d bytes", maxFileSize)
	}
	return data, err
}
