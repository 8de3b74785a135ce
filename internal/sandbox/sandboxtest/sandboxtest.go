// Package sandboxtest is the adversarial test suite every sandbox.Runtime
// backend must pass (native now, Docker later): each case tries to escape
// or to harm the host, and asserts both that the attempt failed and that
// the host is unchanged (files, mounts, processes, cgroups, temporary
// directories).
//
// Some attacks need a real program making raw system calls; the suite
// mounts the test binary itself into the sandbox as a probe. A test binary
// using the suite must call ProbeMain from its TestMain when IsProbe
// reports true.
package sandboxtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// Options configure the suite.
type Options struct {
	// Runtime is the backend under test; required.
	Runtime sandbox.Runtime
	// MemoryKills says whether the backend enforces memory and pids with
	// a cgroup (an OOM kill, a counted refusal) rather than with rlimits
	// (failed allocations and forks, not reported).
	MemoryKills bool
	// BaseDir is where the suite creates its host files; it must not be
	// mounted into the sandbox by the backend. Empty means /var/tmp.
	BaseDir string
	// MountDirs are host directories where the backend itself mounts
	// (beyond the case's own directory, always checked); a mount left
	// there after a run is a leak. Keep them specific to this test
	// process: mounts elsewhere (a Docker engine's, other tests') change
	// on their own and are not judged.
	MountDirs []string
}

// host is the host-side fixture of one case.
type host struct {
	base, ws, cs, outside, home, datadir, probe string
	// mountDirs are where leaked mounts are looked for.
	mountDirs []string
}

func newHost(t *testing.T, base string) *host {
	t.Helper()
	if base == "" {
		base = "/var/tmp"
	}
	dir, err := os.MkdirTemp(base, "fluffy-sbxtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h := &host{base: dir, ws: filepath.Join(dir, "ws"), cs: filepath.Join(dir, "cs"), outside: filepath.Join(dir, "outside.txt"),
		home: filepath.Join(dir, "home"), datadir: filepath.Join(dir, "home", ".local", "share", "fluffy"), probe: filepath.Join(dir, "probe")}
	must := func(err error) {
		if err != nil {
			t.Helper()
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(h.ws, "sub"), 0o755))
	must(os.WriteFile(filepath.Join(h.ws, "file.txt"), []byte("original\n"), 0o644))
	must(os.WriteFile(h.outside, []byte("outside\n"), 0o644))
	must(os.MkdirAll(filepath.Join(h.home, ".ssh"), 0o700))
	must(os.WriteFile(filepath.Join(h.home, ".ssh", "id_ed25519"), []byte("SECRET-KEY\n"), 0o600))
	must(os.MkdirAll(h.datadir, 0o700))
	must(os.WriteFile(filepath.Join(h.datadir, "fluffy.db"), []byte("SECRET-DB\n"), 0o600))
	must(os.Symlink(h.outside, filepath.Join(h.ws, "link-out")))
	must(os.Symlink("../outside.txt", filepath.Join(h.ws, "rel-link-out")))
	// The probe is this test binary, copied where the sandbox may read it.
	self, err := os.Executable()
	must(err)
	b, err := os.ReadFile(self)
	must(err)
	must(os.WriteFile(h.probe, b, 0o755))
	must(os.Chmod(dir, 0o755))
	return h
}

// snapshot is what must not change on the host.
type snapshot struct {
	files map[string]string
	// mounts holds the host mount points that a sandbox could leak:
	// those under the case's directory and the backend's MountDirs.
	mounts map[string]int
}

func (h *host) snapshot(t *testing.T) snapshot {
	t.Helper()
	s := snapshot{files: map[string]string{}}
	_ = filepath.WalkDir(h.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == h.cs || strings.HasPrefix(p, h.cs+"/") {
			if d != nil && d.IsDir() && p != h.base {
				return filepath.SkipDir
			}
			return nil
		}
		info, _ := os.Lstat(p)
		v := info.Mode().String()
		if info.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			v += fmt.Sprintf(" %x", sha256.Sum256(b))
		} else if info.Mode()&fs.ModeSymlink != 0 {
			l, _ := os.Readlink(p)
			v += " -> " + l
		}
		s.files[p] = v
		return nil
	})
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	s.mounts = map[string]int{}
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		for _, d := range append([]string{h.base}, h.mountDirs...) {
			if mp := f[4]; mp == d || strings.HasPrefix(mp, d+"/") {
				s.mounts[mp]++
				break
			}
		}
	}
	return s
}

func (h *host) assertUnchanged(t *testing.T, before snapshot) {
	t.Helper()
	after := h.snapshot(t)
	for p, v := range before.files {
		if after.files[p] != v {
			t.Errorf("host changed: %s: %q -> %q", p, v, after.files[p])
		}
	}
	for p := range after.files {
		if _, ok := before.files[p]; !ok {
			t.Errorf("host changed: new file %s", p)
		}
	}
	for mp, n := range after.mounts {
		if before.mounts[mp] != n {
			t.Errorf("host mount table changed: %s mounted %d times, was %d", mp, n, before.mounts[mp])
		}
	}
	for mp, n := range before.mounts {
		if _, ok := after.mounts[mp]; !ok {
			t.Errorf("host mount table changed: %s (mounted %d times) is gone", mp, n)
		}
	}
}

// Case is one escape attempt.
type Case struct {
	Name string
	// Script runs with /bin/sh -c; Probe runs the probe binary instead.
	Script string
	Probe  []string
	// Setup adjusts the spec.
	Setup func(s *sandbox.Spec)
	// Check asserts on the result (the attempt failed); the host check
	// runs afterwards for every case.
	Check func(t *testing.T, h *host, res sandbox.Result)
}

// ran fails the test when the attempt never ran, so that no case takes
// an attempt that did not happen for a refused one: every attempt's
// output starts with ProbeStarted, and a probe ends with its verdict: "succeeded" and exit 0, or "refused: …" and
// ProbeRefusedExit. Under a tight RLIMIT_AS (an ordinary user's memory
// limit) a Go probe may die at its start (pthread_create: EAGAIN); that
// is a failure to test, not a refusal.
func ran(t *testing.T, c Case, res sandbox.Result) {
	t.Helper()
	if !bytes.HasPrefix(res.Stdout, []byte(ProbeStarted+"\n")) {
		t.Errorf("the attempt never ran (no %q first): exit %d, signal %d, stdout=%q stderr=%q", ProbeStarted, res.ExitCode, res.Signal, res.Stdout, res.Stderr)
		return
	}
	if c.Probe == nil {
		return
	}
	succeeded := res.ExitCode == 0 && res.Signal == 0 && bytes.Contains(res.Stdout, []byte("\nsucceeded\n"))
	refused := res.ExitCode == ProbeRefusedExit && res.Signal == 0 && bytes.Contains(res.Stdout, []byte("\nrefused: "))
	if !succeeded && !refused {
		t.Errorf("the probe reached no verdict (died?): exit %d, signal %d, stdout=%q stderr=%q", res.ExitCode, res.Signal, res.Stdout, res.Stderr)
	}
}

// socketProbe tries AF_NETLINK, AF_PACKET, AF_VSOCK, AF_ALG, AF_INET
// and AF_NETLINK with high bits set, and AF_UNIX with them.
var socketProbe = []string{"sockets", "16:3", "17:3", "40:1", "38:5", "0x100000002:1", "0x100000010:3", "0x100000001:1"}

// refusedFamilies: every socket of the socket probe was refused with
// EAFNOSUPPORT (seccomp's answer to a family outside the profile's
// allowlist).
func refusedFamilies(t *testing.T, _ *host, res sandbox.Result) {
	t.Helper()
	failed(t, res)
	if n := strings.Count(string(res.Stdout), ": address family not supported"); n != len(socketProbe)-1 {
		t.Errorf("stdout %q: %d sockets refused with EAFNOSUPPORT, want %d", res.Stdout, n, len(socketProbe)-1)
	}
}

func failed(t *testing.T, res sandbox.Result) {
	t.Helper()
	if res.ExitCode == 0 && res.Signal == 0 {
		t.Errorf("the attempt succeeded; stdout=%q stderr=%q", res.Stdout, res.Stderr)
	}
}

func notContains(t *testing.T, res sandbox.Result, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if bytes.Contains(res.Stdout, []byte(s)) || bytes.Contains(res.Stderr, []byte(s)) {
			t.Errorf("secret %q visible inside: stdout=%q", s, res.Stdout)
		}
	}
}

// Run runs every case against opts.Runtime, holding the host lock (see
// LockHost).
func Run(t *testing.T, opts Options) {
	LockHost(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	hostHome, _ := os.UserHomeDir()
	t.Setenv("FLUFFY_SBXTEST_API_KEY", "sk-host-secret-123")

	// A marker unique to this run, so that sleeping processes of another
	// suite running at the same time (another backend, another package)
	// are not counted as ours.
	marker := strconv.Itoa(1_000_000 + rand.IntN(8_000_000))
	cases := []Case{
		{Name: "write-host-tmp", Script: `echo pwned > "$OUTSIDE"`, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "write-home", Script: `echo pwned > "$HOSTHOME/fluffy-escape" || exit 1; echo pwned > /root/fluffy-escape`, Check: func(t *testing.T, h *host, r sandbox.Result) {
			failed(t, r)
			if _, err := os.Stat(filepath.Join(hostHome, "fluffy-escape")); err == nil {
				os.Remove(filepath.Join(hostHome, "fluffy-escape"))
				t.Error("wrote into the host home")
			}
		}},
		{Name: "write-lower-directly", Script: `echo pwned > file.txt && cat file.txt`, Check: func(t *testing.T, h *host, r sandbox.Result) {
			// The write succeeds inside, into the change set only.
			if b, _ := os.ReadFile(filepath.Join(h.cs, "file.txt")); string(b) != "pwned\n" {
				t.Errorf("change set has %q, want the write", b)
			}
		}},
		{Name: "symlink-out", Script: `echo pwned > link-out`, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "relative-symlink-out", Script: `echo pwned > rel-link-out`, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "dotdot", Script: `echo pwned > ../outside.txt`, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "dotdot-deep", Script: `echo pwned > sub/../../../../../../$OUTSIDE`, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "read-root", Script: `ls /root || cat /root/.bashrc`, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "read-ssh", Script: `cat "$HOSTHOME"/.ssh/* || cat "$FAKEHOME"/.ssh/id_ed25519`, Check: func(t *testing.T, h *host, r sandbox.Result) {
			failed(t, r)
			notContains(t, r, "SECRET-KEY")
		}},
		{Name: "read-datadir", Script: `cat "$DATADIR"/fluffy.db`, Check: func(t *testing.T, h *host, r sandbox.Result) {
			failed(t, r)
			notContains(t, r, "SECRET-DB")
		}},
		{Name: "tcp-to-host", Probe: []string{"connect", "127.0.0.1:" + strconv.Itoa(port)}, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "tcp-to-host-standard-net", Probe: []string{"connect", "127.0.0.1:" + strconv.Itoa(port)}, Setup: func(s *sandbox.Spec) { s.Seccomp = "standard-net" },
			Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "ptrace-host", Probe: []string{"ptrace", strconv.Itoa(os.Getpid())}, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "ptrace-init", Probe: []string{"ptrace", "1"}, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "mount", Probe: []string{"mount"}, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "unshare", Probe: []string{"unshare"}, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "setns", Probe: []string{"setns"}, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "clone-newuser", Probe: []string{"clone-newuser"}, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "keyctl", Probe: []string{"keyctl"}, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "io_uring_setup", Probe: []string{"io_uring"}, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "bpf", Probe: []string{"bpf"}, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "tiocsti", Probe: []string{"tiocsti"}, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "tiocsti-high-bits", Probe: []string{"tiocsti-high"}, Check: func(t *testing.T, h *host, r sandbox.Result) { failed(t, r) }},
		{Name: "capabilities", Script: `grep -q '^CapEff:.0000000000000000' /proc/self/status && grep -q '^CapBnd:.0000000000000000' /proc/self/status && grep -q '^NoNewPrivs:.1' /proc/self/status && grep -q '^Seccomp:.2' /proc/self/status && echo restricted`,
			Check: func(t *testing.T, h *host, r sandbox.Result) {
				if !bytes.Contains(r.Stdout, []byte("restricted")) {
					t.Errorf("capabilities, no_new_privs or seccomp missing: %q %q", r.Stdout, r.Stderr)
				}
			}},
		// The shell stays a second: its own job ends at once (each b
		// backgrounds the next), and the sandbox ends with the command.
		{Name: "fork-bomb", Script: `b(){ b|b& }; b; sleep 1; wait`, Setup: func(s *sandbox.Spec) { s.Limits.Pids = 64; s.Limits.Wall = 3 * time.Second },
			Check: func(t *testing.T, h *host, r sandbox.Result) {
				if opts.MemoryKills && !r.HitLimit(sandbox.LimitPids) {
					t.Errorf("fork bomb: limits hit %v, want pids", r.Hit)
				}
				if err := exec.Command("/bin/true").Run(); err != nil {
					t.Errorf("the host cannot fork after the bomb: %v", err)
				}
			}},
		// A shell, not the Go probe: under RLIMIT_AS (an ordinary user's
		// fallback) a Go program cannot even start within 64 MiB (its
		// runtime reserves more address space than that), so the probe's
		// death would say nothing about the limit.
		{Name: "memory-hog", Script: `x=$(head -c 1073741824 /dev/zero | tr '\0' x) && echo allocated ${#x}`, Setup: func(s *sandbox.Spec) { s.Limits.Memory = 64 << 20; s.Limits.Wall = 20 * time.Second },
			Check: func(t *testing.T, h *host, r sandbox.Result) {
				failed(t, r)
				if opts.MemoryKills && r.Killed != sandbox.LimitMemory {
					t.Errorf("memory hog: killed %q (signal %d, exit %d), want memory", r.Killed, r.Signal, r.ExitCode)
				}
			}},
		{Name: "fill-tmp", Script: `head -c 16777216 /dev/zero > /tmp/fill`, Setup: func(s *sandbox.Spec) { s.TmpSize = 4 << 20 },
			Check: func(t *testing.T, h *host, r sandbox.Result) {
				failed(t, r)
				if !r.HitLimit(sandbox.LimitTmp) {
					t.Errorf("fill /tmp: limits hit %v, want tmp", r.Hit)
				}
			}},
		{Name: "timeout-grandchildren", Script: fmt.Sprintf(`trap "" TERM; (trap "" TERM; sleep %[1]s & sleep %[1]s) & sleep %[1]s`, marker), Setup: func(s *sandbox.Spec) { s.Limits.Wall = 500 * time.Millisecond },
			Check: func(t *testing.T, h *host, r sandbox.Result) {
				if r.Killed != sandbox.LimitTime {
					t.Errorf("killed %q, want time", r.Killed)
				}
				if n := CountProcs(marker); n > 0 {
					t.Errorf("%d sandboxed processes survived the timeout", n)
				}
			}},
		{Name: "host-env", Script: `env`, Check: func(t *testing.T, h *host, r sandbox.Result) {
			notContains(t, r, "sk-host-secret-123", "FLUFFY_SBXTEST_API_KEY")
		}},
		// Sockets of families no template needs (netlink, packet,
		// vsock, alg), and families with high bits set (the kernel reads
		// an int): refused by seccomp (EAFNOSUPPORT), with and without
		// network.
		{Name: "sockets", Probe: socketProbe, Check: refusedFamilies},
		{Name: "sockets-standard-net", Probe: socketProbe, Setup: func(s *sandbox.Spec) { s.Seccomp = "standard-net" }, Check: refusedFamilies},
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			h := newHost(t, opts.BaseDir)
			h.mountDirs = opts.MountDirs
			before := h.snapshot(t)
			spec := sandbox.Spec{
				Env:       []string{"PATH=/usr/bin:/bin", "OUTSIDE=" + h.outside, "HOSTHOME=" + hostHome, "FAKEHOME=" + h.home, "DATADIR=" + h.datadir},
				Workspace: h.ws, ChangeSet: h.cs, TmpSize: 64 << 20, Seccomp: "standard",
				Mounts: []sandbox.Mount{{Source: h.probe, Target: "/opt/probe"}},
				Limits: sandbox.Limits{Wall: 20 * time.Second, Pids: 256, Memory: 1 << 30, Output: 1 << 20},
			}
			if c.Probe != nil {
				spec.Argv = append([]string{"/opt/probe"}, c.Probe...)
				spec.Env = append(spec.Env, "FLUFFY_SANDBOX_PROBE=1")
				// No memory limit for the Go probe: under RLIMIT_AS (an
				// ordinary user's fallback) the Go runtime's start
				// (reservations of address space, threads) sometimes
				// fails within 1 GiB, and a probe that never ran proves
				// nothing (ran). Its attacks do not depend on the limit.
				spec.Limits.Memory = 0
			} else {
				spec.Argv = []string{"/bin/sh", "-c", "echo '" + ProbeStarted + "'; " + c.Script}
			}
			if c.Setup != nil {
				c.Setup(&spec)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := opts.Runtime.Run(ctx, spec)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			ran(t, c, res)
			c.Check(t, h, res)
			h.assertUnchanged(t, before)
			if t.Failed() {
				t.Logf("stdout: %s\nstderr: %s", res.Stdout, res.Stderr)
			}
		})
	}
	select {
	case <-accepted:
		t.Error("a sandbox connected to the host's 127.0.0.1 listener")
	default:
	}
}

// CountProcs counts host processes whose command line contains s (test
// binaries excluded).
func CountProcs(s string) int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(s)) && !bytes.Contains(b, []byte("-test.")) {
			n++
		}
	}
	return n
}
