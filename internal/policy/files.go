package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"

	"github.com/fluffy-agent/fluffy/internal/regfile"
)

// Files names the policy files that define policy (the meta-policy: no
// other file does). Either may be empty or missing.
type Files struct {
	User    string
	Project string
}

// maxExtensions bounds the .star files read next to one policy file.
const maxExtensions = 64

// Read reads the files and the Starlark files next to them. Missing files
// are skipped. It returns the sources and a hash of each file read (for
// change detection).
func (f Files) Read() ([]Source, map[string]string, error) {
	var srcs []Source
	hashes := map[string]string{}
	for _, x := range []struct {
		path  string
		layer Layer
	}{{f.User, LayerUser}, {f.Project, LayerProject}} {
		if x.path == "" {
			continue
		}
		src, err := readSource(x.path, x.layer, hashes)
		if errors.Is(err, fs.ErrNotExist) {
			hashes[x.path] = "absent"
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("policy: %w", err)
		}
		srcs = append(srcs, src)
	}
	return srcs, hashes, nil
}

// ReadSource reads one policy file and the extensions (*.star) beside it,
// as a source of the given layer: what a session loads, and what `fluffy
// policy lint FILE` checks.
func ReadSource(path string, layer Layer) (Source, error) {
	return readSource(path, layer, map[string]string{})
}

// readSource reads path and its extensions, noting the hash of each file
// read in hashes. An extension that cannot be read (too large, not a
// regular file) is left out; the rules that name it then fail to compile.
func readSource(path string, layer Layer, hashes map[string]string) (Source, error) {
	data, err := readLimited(path, maxFileSize)
	if err != nil {
		return Source{}, err
	}
	hashes[path] = hash(data)
	src := Source{Name: path, Layer: layer, Data: data, Extensions: map[string][]byte{}}
	stars, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*.star"))
	sort.Strings(stars)
	if len(stars) > maxExtensions {
		stars = stars[:maxExtensions]
	}
	for _, s := range stars {
		code, err := readLimited(s, maxExtensionSize+1)
		if err != nil {
			continue
		}
		src.Extensions[filepath.Base(s)] = code
		hashes[s] = hash(code)
	}
	return src, nil
}

// readLimited reads a policy or extension file from a user's or a
// project's directory. A project's comes with the repository and may be a
// FIFO, whose plain open waits for a writer for ever (every session in
// that repository would hang as it starts) or a device: regfile opens
// without waiting and reads regular files only.
func readLimited(path string, limit int64) ([]byte, error) {
	return regfile.ReadFile(path, limit)
}

func hash(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Load reads files and compiles them with opts.
func Load(opts Options, files Files) (*Engine, error) {
	srcs, _, err := files.Read()
	if err != nil {
		return nil, err
	}
	return Compile(opts, srcs...)
}
