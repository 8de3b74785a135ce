// Package config owns fluffy's configuration: the Config type, its defaults,
// and the hierarchy that builds the effective value of every key —
// built-in defaults < user file < project .fluffy/config.yaml < FLUFFY_*
// environment < flags — remembering where each value came from.
//
// Loading is all or nothing: any error (bad YAML, unknown key, wrong type,
// invalid value, a project file setting a key reserved to the user) stops the
// load and names the file, line, column and key. Nothing is half-loaded.
//
// Keys tagged scope:"user" can only be set by the user (user file,
// environment, flags), never by a project file: a repository the agent works
// on must not be able to loosen fluffy's own protections.
package config

import (
	"os"
	"path/filepath"

	"github.com/fluffy-agent/fluffy/internal/units"
)

// Config is the effective configuration. Every leaf field is a key named by
// the dotted path of its yaml tags (sandbox.runtime); the loader discovers
// them by reflection, so adding a field here is all a new key needs. Struct
// tags:
//
//	enum:"a,b,c"   the value must be one of these
//	scope:"user"   a project file may not set it
type Config struct {
	// Home is the data directory ($FLUFFY_HOME).
	Home string `yaml:"home" scope:"user"`
	Log  Log    `yaml:"log"`
	// Model is the default model, "provider/name".
	Model   string  `yaml:"model"`
	Sandbox Sandbox `yaml:"sandbox"`
	Audit   Audit   `yaml:"audit"`
	Policy  Policy  `yaml:"policy"`
	TDD     TDD     `yaml:"tdd"`
	// Approval configures asking a person.
	Approval Approval `yaml:"approval"`
}

// Approval configures asking a person.
type Approval struct {
	// Timeout denies what is still open when it elapses.
	Timeout units.Duration `yaml:"timeout" scope:"user"`
}

// Log configures fluffy's own logs (not the audit log).
type Log struct {
	Level  string `yaml:"level" enum:"debug,info,warn,error"`
	Format string `yaml:"format" enum:"text,json"`
}

// Sandbox configures where and how commands run.
type Sandbox struct {
	// Runtime chooses the backend.
	Runtime string `yaml:"runtime" enum:"native,docker,podman"`
	// Image is the container image of the docker and podman runtimes.
	Image string `yaml:"image"`
	// Template is the template used when a caller names none.
	Template string `yaml:"template"`
	// AllowDegraded runs sandboxes with whatever protection the host
	// offers, loudly, instead of refusing.
	AllowDegraded bool `yaml:"allow_degraded" scope:"user"`
	// Timeout is the default wall-time limit of one execution.
	Timeout units.Duration `yaml:"timeout"`
	// Memory is the default memory limit of one execution.
	Memory units.Size `yaml:"memory"`
	// Pids is the default process-count limit of one execution.
	Pids int `yaml:"pids"`
	// TmpSize is the size of the sandbox's tmpfs /tmp.
	TmpSize units.Size `yaml:"tmp_size"`
	// OutputLimit caps captured stdout and stderr, each.
	OutputLimit units.Size `yaml:"output_limit"`
}

// Audit configures the tamper-evident audit log.
type Audit struct {
	FlushEntries    int            `yaml:"flush_entries" scope:"user"`
	FlushInterval   units.Duration `yaml:"flush_interval" scope:"user"`
	CheckpointEvery int            `yaml:"checkpoint_every" scope:"user"`
	CheckpointAfter units.Duration `yaml:"checkpoint_after" scope:"user"`
	// RetentionDays of 0 keeps everything.
	RetentionDays int        `yaml:"retention_days" scope:"user"`
	WarnSize      units.Size `yaml:"warn_size" scope:"user"`
}

// Policy configures the policy engine.
type Policy struct {
	// Default is the effect when no rule matches.
	Default string `yaml:"default" enum:"allow,approve,block" scope:"user"`
}

// TDD configures the coding agent's test-first discipline.
type TDD struct {
	Mode string `yaml:"mode" enum:"strict,explore,debug" scope:"user"`
}

// Default returns the built-in defaults for a process with the given
// environment (used only to place the data directory).
func Default(env Env) Config {
	return Config{
		Home:  defaultHome(env),
		Log:   Log{Level: "info", Format: "text"},
		Model: "replay/demo",
		Sandbox: Sandbox{
			Runtime:     "native",
			Image:       "fluffy-base:latest",
			Template:    "code-executor",
			Timeout:     units.Duration(10 * 60e9),
			Memory:      2 << 30,
			Pids:        512,
			TmpSize:     256 << 20,
			OutputLimit: 1 << 20,
		},
		Audit: Audit{
			FlushEntries:    100,
			FlushInterval:   units.Duration(500e6),
			CheckpointEvery: 1000,
			CheckpointAfter: units.Duration(60e9),
			RetentionDays:   0,
			WarnSize:        1 << 30,
		},
		Policy:   Policy{Default: "approve"},
		TDD:      TDD{Mode: "strict"},
		Approval: Approval{Timeout: units.Duration(10 * 60e9)},
	}
}

// Env is the process environment as a lookup function (os.LookupEnv in
// production, a map in tests).
type Env func(key string) (string, bool)

func (e Env) get(key string) string {
	if e == nil {
		return ""
	}
	v, _ := e(key)
	return v
}

func defaultHome(env Env) string {
	if x := env.get("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "fluffy")
	}
	return filepath.Join(env.get("HOME"), ".local", "share", "fluffy")
}

// UserFile is the user's configuration file: $XDG_CONFIG_HOME/fluffy/config.yaml.
func UserFile(env Env) string {
	if x := env.get("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "fluffy", "config.yaml")
	}
	return filepath.Join(env.get("HOME"), ".config", "fluffy", "config.yaml")
}

// ProjectRoot returns the nearest directory at or above dir that holds a
// .fluffy directory or a .git entry, or "" when there is none.
func ProjectRoot(dir string) string {
	dir = filepath.Clean(dir)
	for {
		for _, marker := range []string{".fluffy", ".git"} {
			if _, err := os.Stat(filepath.Join(dir, marker)); err == nil {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// ProjectFile is the project configuration file of the project holding dir,
// or "" outside any project.
func ProjectFile(dir string) string {
	root := ProjectRoot(dir)
	if root == "" {
		return ""
	}
	return filepath.Join(root, ".fluffy", "config.yaml")
}
