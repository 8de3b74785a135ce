// Package doctor owns `fluffy doctor`: it checks what this machine offers
// fluffy (kernel, container engines, toolchains, data directory, disk, and —
// through the native sandbox's own detection, so the two never disagree —
// namespaces, landlock, seccomp, overlayfs and cgroups) and explains each
// finding with a fix. Checks are data; the CLI renders them.
//
// A check is Required when fluffy cannot work without it for the configured
// sandbox runtime; only a failed required check makes the report fail.
package doctor

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// Status is a check's verdict.
type Status string

// The verdicts, best first.
const (
	OK   Status = "OK"
	Warn Status = "WARN"
	Fail Status = "FAIL"
)

// Check is one finding.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	// Fix says how to get from WARN or FAIL to OK.
	Fix string `json:"fix,omitempty"`
	// Required is true when fluffy cannot work without this check
	// passing (given the configured runtime).
	Required bool `json:"required"`
	// Doc is the section of docs/troubleshooting.md about this check
	// (Run fills it in from Sections).
	Doc string `json:"doc"`
}

// TroubleshootingDoc is the page every check links to.
const TroubleshootingDoc = "docs/troubleshooting.md"

// Sections maps each check's name to its section's anchor in
// docs/troubleshooting.md; a test fails when a check has none, or a
// section is missing.
var Sections = map[string]string{
	"kernel":              "linux-too-old",
	"user namespaces":     "no-user-namespaces",
	"overlayfs in userns": "no-overlayfs-in-a-user-namespace",
	"landlock":            "no-landlock",
	"seccomp":             "no-seccomp",
	"cgroups":             "cgroups-not-delegated",
	"sandbox-init":        "the-sandbox-init-is-missing",
	"native sandbox":      "the-sandbox-init-is-missing",
	"docker engine":       "docker-socket-missing-or-not-permitted",
	"podman":              "docker-socket-missing-or-not-permitted",
	"git":                 "a-toolchain-is-missing",
	"go":                  "a-toolchain-is-missing",
	"python3":             "a-toolchain-is-missing",
	"node":                "a-toolchain-is-missing",
	"cargo":               "a-toolchain-is-missing",
	"data directory":      "the-data-directory-is-not-private",
	"free disk":           "disk-full",
	"audit log":           "a-damaged-audit-log",
	"fluffy.db":           "a-damaged-database",
	"backups":             "no-recent-backup",
	"fluffy binaries":     "the-small-client-is-missing",
	"sandbox server":      "the-sandbox-server-will-not-start",
	"memory search":       "memory-search-is-stale",
	"oom protection":      "the-daemon-was-killed-for-memory",
}

// DocLink returns the link of the check called name ("" when Sections has
// none).
func DocLink(name string) string {
	a, ok := Sections[name]
	if !ok {
		return ""
	}
	return TroubleshootingDoc + "#" + a
}

// Report is the result of a doctor run, in a stable order.
type Report struct {
	Checks []Check `json:"checks"`
}

// Healthy reports whether every required check passed. WARN never fails a
// report; FAIL does only for required checks.
func (r Report) Healthy() bool {
	for _, c := range r.Checks {
		if c.Required && c.Status == Fail {
			return false
		}
	}
	return true
}

// Options says what to check. Self and Home are required.
type Options struct {
	// Home is the data directory.
	Home string
	// Runtime is the configured sandbox runtime: native, docker or podman.
	Runtime string
	// Facilities reports what the native sandbox uses (user namespaces,
	// landlock, seccomp, overlayfs in a user namespace, cgroups); the CLI
	// passes native.Detect so doctor and the sandbox share one detection.
	// Required.
	Facilities func(context.Context) []sandbox.Facility
	// Getenv reads the environment (DOCKER_HOST). Nil means none.
	Getenv func(string) (string, bool)
	// LookPath finds programs; nil means exec.LookPath.
	LookPath func(string) (string, error)
	// Timeout bounds each external probe; default 3s.
	Timeout time.Duration
	// Extra checks contributed by other packages (the audit log's size,
	// ...), run after the built-in ones.
	Extra []func(context.Context) Check
}

// Run performs every check. Checks run concurrently; the report keeps a
// fixed order.
func Run(ctx context.Context, opts Options) Report {
	if opts.LookPath == nil {
		opts.LookPath = exec.LookPath
	}
	if opts.Getenv == nil {
		opts.Getenv = func(string) (string, bool) { return "", false }
	}
	if opts.Timeout == 0 {
		opts.Timeout = 3 * time.Second
	}
	native := opts.Runtime == "" || opts.Runtime == "native" || opts.Runtime == "auto"
	probes := []func(context.Context) Check{
		func(context.Context) Check { return checkKernel() },
		func(ctx context.Context) Check { return checkDocker(ctx, opts, opts.Runtime == "docker") },
		func(ctx context.Context) Check { return checkPodman(ctx, opts, opts.Runtime == "podman") },
		func(ctx context.Context) Check {
			return checkTool(ctx, opts, "git", []string{"--version"}, "apt-get install git")
		},
		func(ctx context.Context) Check {
			return checkTool(ctx, opts, "go", []string{"version"}, "install Go from go.dev/dl")
		},
		func(ctx context.Context) Check {
			return checkTool(ctx, opts, "python3", []string{"--version"}, "apt-get install python3")
		},
		func(ctx context.Context) Check {
			return checkTool(ctx, opts, "node", []string{"--version"}, "apt-get install nodejs")
		},
		func(ctx context.Context) Check {
			return checkTool(ctx, opts, "cargo", []string{"--version"}, "install Rust with rustup")
		},
		func(context.Context) Check { return checkDataDir(opts.Home) },
		func(context.Context) Check { return checkDisk(opts.Home) },
	}
	probes = append(probes, opts.Extra...)
	out := make([][]Check, len(probes)+1)
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = []Check{p(ctx)}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		out[len(probes)] = facilityChecks(ctx, opts, native)
	}()
	wg.Wait()
	// The sandbox's facilities go right after the kernel line.
	rep := Report{Checks: out[0]}
	rep.Checks = append(rep.Checks, out[len(probes)]...)
	for _, cs := range out[1:len(probes)] {
		rep.Checks = append(rep.Checks, cs...)
	}
	for i := range rep.Checks {
		if rep.Checks[i].Doc == "" {
			rep.Checks[i].Doc = DocLink(rep.Checks[i].Name)
		}
	}
	return rep
}

// facilityNames gives the sandbox's facility names their doctor labels.
var facilityNames = map[string]string{
	"userns":         "user namespaces",
	"overlay-userns": "overlayfs in userns",
	"landlock":       "landlock",
	"seccomp":        "seccomp",
	"cgroup":         "cgroups",
}

// facilityChecks turns the native sandbox's facility report into checks.
// A missing required facility fails the report only when the native
// runtime is configured.
func facilityChecks(ctx context.Context, opts Options, native bool) []Check {
	if opts.Facilities == nil {
		return []Check{{Name: "native sandbox", Status: Fail, Required: native, Detail: "no facility detection wired in"}}
	}
	var out []Check
	for _, f := range opts.Facilities(ctx) {
		name := facilityNames[f.Name]
		if name == "" {
			name = f.Name
		}
		c := Check{Name: name, Detail: f.Detail, Fix: f.Fix, Required: f.Required && native}
		switch {
		case f.Available:
			c.Status = OK
		case c.Required:
			c.Status = Fail
		default:
			c.Status = Warn
		}
		out = append(out, c)
	}
	return out
}

// runVersion runs name args with a timeout and returns the first line of
// its output.
func runVersion(ctx context.Context, timeout time.Duration, path string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	out, err := cmd.CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if err != nil {
		if line != "" {
			return "", fmt.Errorf("%w: %s", err, line)
		}
		return "", err
	}
	return line, nil
}

func checkTool(ctx context.Context, opts Options, name string, args []string, fix string) Check {
	c := Check{Name: name}
	path, err := opts.LookPath(name)
	if err != nil {
		c.Status, c.Detail, c.Fix = Warn, "not found on PATH: fluffy cannot drive "+name+" tests here", fix
		return c
	}
	v, err := runVersion(ctx, opts.Timeout, path, args...)
	if err != nil {
		c.Status, c.Detail, c.Fix = Warn, fmt.Sprintf("%s does not run: %v", path, err), fix
		return c
	}
	c.Status, c.Detail = OK, v
	return c
}
