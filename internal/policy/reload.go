package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

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

// Change describes one policy file that changed, for the audit log
// (event policy.change).
type Change struct {
	File    string `json:"file"`
	OldHash string `json:"old_hash"`
	NewHash string `json:"new_hash"`
}

// ReloaderOptions configure a Reloader. Engine and Files are required;
// OnChange and OnError may be nil.
type ReloaderOptions struct {
	Engine Options
	Files  Files
	// OnChange is called after new rules were swapped in, once per
	// changed file: the kernel records it as policy.change.
	OnChange func(Change)
	// OnError is called when changed files do not compile; the old rules
	// stay in force.
	OnError func(error)
	// Interval between polls in Run; zero means one second.
	Interval time.Duration
}

// Reloader holds the current engine and replaces it when the policy files
// change, keeping the old rules when the new files are invalid.
type Reloader struct {
	opts ReloaderOptions
	cur  atomic.Pointer[Engine]

	mu     sync.Mutex // guards hashes
	hashes map[string]string
}

// NewReloader loads the policy once; an invalid policy is an error here
// (start-up stops).
func NewReloader(opts ReloaderOptions) (*Reloader, error) {
	srcs, hashes, err := opts.Files.Read()
	if err != nil {
		return nil, err
	}
	e, err := Compile(opts.Engine, srcs...)
	if err != nil {
		return nil, err
	}
	r := &Reloader{opts: opts, hashes: hashes}
	r.cur.Store(e)
	return r, nil
}

// Engine returns the engine in force.
func (r *Reloader) Engine() *Engine { return r.cur.Load() }

// Reload checks the files now. It returns whether new rules were loaded,
// and the compile error when the changed files are invalid (the old rules
// then stay in force).
func (r *Reloader) Reload() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	srcs, hashes, err := r.opts.Files.Read()
	if err != nil {
		r.report(err)
		return false, err
	}
	var changes []Change
	for f, h := range hashes {
		if r.hashes[f] != h {
			changes = append(changes, Change{File: f, OldHash: r.hashes[f], NewHash: h})
		}
	}
	for f, h := range r.hashes {
		if _, ok := hashes[f]; !ok {
			changes = append(changes, Change{File: f, OldHash: h, NewHash: "absent"})
		}
	}
	if len(changes) == 0 {
		return false, nil
	}
	e, err := Compile(r.opts.Engine, srcs...)
	if err != nil {
		// Remember the bad content so the error is reported once per
		// change, not on every poll; the old engine stays.
		r.hashes = hashes
		r.report(err)
		return false, err
	}
	r.cur.Store(e)
	r.hashes = hashes
	sort.Slice(changes, func(i, j int) bool { return changes[i].File < changes[j].File })
	if r.opts.OnChange != nil {
		for _, c := range changes {
			r.opts.OnChange(c)
		}
	}
	return true, nil
}

func (r *Reloader) report(err error) {
	if r.opts.OnError != nil {
		r.opts.OnError(err)
	}
}

// Run polls the files until ctx ends.
func (r *Reloader) Run(ctx context.Context) error {
	iv := r.opts.Interval
	if iv <= 0 {
		iv = time.Second
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			_, _ = r.Reload() // errors go to OnError
		}
	}
}
