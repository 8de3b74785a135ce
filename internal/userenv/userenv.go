// Package userenv owns one invocation's view of its user: the global
// flags, the environment, the working directory and fluffy's own binary,
// and what derives from them only — the loaded configuration, the data
// directory, the logger, the policy engine, fluffy's protected files, the
// sandbox masks that hide them, the capability-token key and the
// sandbox's default environment. The CLI and the daemon side (internal/wiring)
// both build on it, so each computes these the same way.
package userenv

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// ErrUsage marks errors that are the caller's input (flags, arguments,
// configuration), not a failure: the CLI exits 2 on them.
var ErrUsage = errors.New("usage")

// Env is one invocation. Environ, Cwd and Self are required; the flag
// fields are the global flags as given (empty: not given).
type Env struct {
	// Environ is the process environment (os.Environ()), or the
	// caller's in the sandbox server.
	Environ []string
	// Cwd is the working directory (the caller's in the sandbox server).
	Cwd string
	// Self is the path of the running fluffy binary.
	Self string
	// Stderr receives the logger's output.
	Stderr io.Writer

	// Global flags: --home, --config, --set, --log-level, --debug.
	Home       string
	UserConfig string
	Sets       []string
	LogLevel   string
	Debug      bool

	mu     sync.Mutex
	loaded *config.Loaded
	logger *slog.Logger
}

// WithCwd is a copy of e for another working directory (a session's
// workspace): its configuration and policy are that directory's.
func (e *Env) WithCwd(dir string) *Env {
	return &Env{Environ: e.Environ, Cwd: dir, Self: e.Self, Stderr: e.Stderr, Home: e.Home,
		UserConfig: e.UserConfig, Sets: e.Sets, LogLevel: e.LogLevel, Debug: e.Debug}
}

// Getenv looks a variable up in the invocation's environment.
func (e *Env) Getenv(key string) (string, bool) {
	for i := len(e.Environ) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(e.Environ[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// Abs makes a path from the command line absolute against the
// invocation's working directory, which is not the process's in the
// sandbox server.
func (e *Env) Abs(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(e.Cwd, p)
}

// TempDir is the directory for temporary files: $TMPDIR of the
// invocation's environment, else the system's.
func (e *Env) TempDir() string {
	if d, ok := e.Getenv("TMPDIR"); ok && filepath.IsAbs(d) {
		return d
	}
	return os.TempDir()
}

// UserFile is the user configuration file: --config, else the default.
func (e *Env) UserFile() string {
	if e.UserConfig != "" {
		return e.Abs(e.UserConfig)
	}
	return config.UserFile(e.Getenv)
}

// LoadOptions returns the configuration sources for this invocation.
func (e *Env) LoadOptions() config.Options {
	flags := append([]string(nil), e.Sets...)
	if e.Home != "" {
		flags = append(flags, "home="+e.Abs(e.Home))
	}
	if e.LogLevel != "" {
		flags = append(flags, "log.level="+e.LogLevel)
	} else if e.Debug {
		flags = append(flags, "log.level=debug")
	}
	return config.Options{
		Env:         e.Getenv,
		UserFile:    e.UserFile(),
		ProjectFile: config.ProjectFile(e.Cwd),
		Flags:       flags,
	}
}

// Config loads the effective configuration once. An error names the file,
// line and key; the command must stop.
func (e *Env) Config() (*config.Loaded, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.loaded != nil {
		return e.loaded, nil
	}
	errs := config.UnknownEnv(e.Environ)
	l, err := config.Load(e.LoadOptions())
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: invalid configuration:\n%w", ErrUsage, errors.Join(errs...))
	}
	e.loaded = l
	return l, nil
}

// DataDir returns the data directory, created with 0700 permissions.
func (e *Env) DataDir() (datadir.Dir, error) {
	l, err := e.Config()
	if err != nil {
		return datadir.Dir{}, err
	}
	d, err := datadir.New(l.Config.Home)
	if err != nil {
		return datadir.Dir{}, err
	}
	return d, d.Ensure()
}

// CacheDir is where sandboxes keep their persistent build caches (the
// data directory's cache/, one directory per workspace; see
// sandbox.Template.ApplyCaches). Empty when the data directory is not
// usable: sandboxes then run without caches.
func (e *Env) CacheDir() string {
	d, err := e.DataDir()
	if err != nil {
		return ""
	}
	return d.Path(datadir.Cache)
}

// Logger returns the logger for fluffy's own diagnostics (Stderr), at
// the configured level and format.
func (e *Env) Logger() *slog.Logger {
	l, cerr := e.Config()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.logger != nil {
		return e.logger
	}
	level := slog.LevelInfo
	format := "text"
	if cerr == nil {
		_ = level.UnmarshalText([]byte(l.Config.Log.Level))
		format = l.Config.Log.Format
	}
	w := e.Stderr
	if w == nil {
		w = io.Discard
	}
	opts := &slog.HandlerOptions{Level: level}
	// A line logged with a traced context names its trace.
	if format == "json" {
		e.logger = slog.New(telemetry.LogHandler(slog.NewJSONHandler(w, opts)))
	} else {
		e.logger = slog.New(telemetry.LogHandler(slog.NewTextHandler(w, opts)))
	}
	return e.logger
}

// Workspace is the project root of the working directory, or the working
// directory itself.
func (e *Env) Workspace() string {
	if root := config.ProjectRoot(e.Cwd); root != "" {
		return root
	}
	return e.Cwd
}

// SandboxEnv is the environment a sandboxed command starts from:
// sandbox.BaseEnv with this invocation's PATH.
func (e *Env) SandboxEnv() []string {
	path, _ := e.Getenv("PATH")
	return sandbox.BaseEnv(path)
}
