package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// memoryCgroup makes a memory cgroup of its own for the test, limited to
// limit bytes with no swap, and returns its cgroup.procs file: a v2 group
// where the unified hierarchy has the memory controller, else a child of
// this process's v1 memory group. It skips where no group can be made
// (not root, no memory controller, or a v2 root that holds processes and
// so cannot hand the controller down, as in a container): 'make test'
// runs as root, as CI does.
func memoryCgroup(t *testing.T, limit int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a memory cgroup (run it as 'make test' does)")
	}
	name := fmt.Sprintf("fluffy-pressure-%d", os.Getpid())
	var dir, limitFile, swapFile string
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil && strings.Contains(string(b), "memory") {
			_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+memory"), 0)
			dir, limitFile, swapFile = filepath.Join(root, name), "memory.max", "memory.swap.max"
			break
		}
	}
	if dir == "" {
		b, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			t.Skip(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[1] == "memory" {
				dir, limitFile, swapFile = filepath.Join("/sys/fs/cgroup/memory", parts[2], name), "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"
			}
		}
	}
	if dir == "" {
		t.Skip("no memory cgroup controller on this host (cgroup v2 with memory, or v1 memory)")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a memory cgroup: %v", err)
	}
	t.Cleanup(func() {
		// Whatever is left in it is the test's: kill it, then remove.
		for range 100 {
			b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			pids := strings.Fields(string(b))
			if len(pids) == 0 {
				break
			}
			for _, p := range pids {
				if n, err := strconv.Atoi(p); err == nil {
					_ = syscall.Kill(n, syscall.SIGKILL)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		removeCgroupTree(dir)
	})
	if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		t.Skipf("cannot limit the cgroup's memory: %v", err)
	}
	// On a host with swap a hog would be swapped out rather than killed.
	// v2 counts swap apart (0: none), v1 memory and swap together (the
	// same limit: none); either file is missing without swap accounting,
	// where the swap is not limited and a hog may run.
	swap := strconv.FormatInt(limit, 10)
	if swapFile == "memory.swap.max" {
		swap = "0"
	}
	if err := os.WriteFile(filepath.Join(dir, swapFile), []byte(swap), 0); err != nil {
		t.Logf("the cgroup's swap is not limited: %v", err)
	}
	return filepath.Join(dir, "cgroup.procs")
}

// removeCgroupTree removes a cgroup and the groups under it, deepest
// first.
func removeCgroupTree(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			removeCgroupTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = os.Remove(dir)
}

// TestMemoryPressure runs the kernel in a cgroup of 384 MiB and floods it:
// sessions whose sandboxed commands each try to take 400 MiB, and many
// sessions at once with large tasks. The daemon must stay alive (it
// lowered its own oom_score_adj to -500; the OOM killer takes sandboxes,
// whose oom_score_adj they raised to 1000; the daemon refuses sessions
// above kernel.memory_high), keep answering, and leave an audit log that
// verifies.
func TestMemoryPressure(t *testing.T) {
	if testing.Short() {
		t.Skip("floods a daemon")
	}
	procs := memoryCgroup(t, 384<<20)
	core := buildCore(t)
	work := t.TempDir()
	ws, home, cfg := filepath.Join(work, "ws"), filepath.Join(work, "data"), filepath.Join(work, "config")
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work, "FLUFFY_HOME=" + home,
		"XDG_CONFIG_HOME=" + cfg, "XDG_RUNTIME_DIR=", "FLUFFY_SANDBOX_SERVER=off",
		"FLUFFY_KERNEL_MEMORY_LIMIT=160MiB", "FLUFFY_KERNEL_MEMORY_HIGH=128MiB"}
	for _, d := range []string{ws, filepath.Join(cfg, "fluffy")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("git", "init", "-q", ws).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	policy := "rules:\n  - id: hog\n    effect: allow\n    match: {tool: shell.exec, exec_capable: true, argv: [[python3, \"...\"]]}\n"
	if err := os.WriteFile(filepath.Join(cfg, "fluffy", "policy.yaml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	hog := filepath.Join(work, "hog.jsonl")
	if err := os.WriteFile(hog, []byte(`{"turn": {"text": "Eat.", "tool_calls": [{"id": "h", "name": "shell.exec", "args": {"command": "python3 -c 'b = bytearray(400 << 20); b[::4096] = b\"x\" * len(b[::4096]); print(len(b))'"}}]}}
{"turn": {"text": "Done."}}
{"end": {}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	talk := filepath.Join(work, "talk.jsonl")
	if err := os.WriteFile(talk, []byte(`{"turn": {"text": "Noted."}}
{"end": {}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	fluffy := func(args ...string) *exec.Cmd {
		cmd := exec.Command(core, args...)
		cmd.Dir, cmd.Env = ws, env
		return cmd
	}
	// The kernel joins the cgroup before it becomes fluffy: everything
	// it starts is inside, sandboxes included.
	k := exec.Command("/bin/sh", "-c", `echo $$ > "$1" && exec "$2" kernel`, "sh", procs, core)
	k.Dir, k.Env = ws, env
	var klog bytes.Buffer
	k.Stdout, k.Stderr = &klog, &klog
	if err := k.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- k.Wait() }()
	defer func() {
		_ = k.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = k.Process.Kill()
			<-exited
		}
	}()
	if !waitSocket(filepath.Join(home, "kernel.sock"), 30*time.Second) {
		t.Fatalf("the kernel did not start:\n%s", klog.String())
	}
	// The daemon lowered its own score where it may (CAP_SYS_RESOURCE,
	// which a container's root may lack): the OOM killer's last choice
	// in the group.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", k.Process.Pid)); !hasCapSysResource(t) {
		t.Logf("no CAP_SYS_RESOURCE: the kernel's oom_score_adj stays %q", bytes.TrimSpace(b))
	} else if err != nil || strings.TrimSpace(string(b)) != "-500" {
		t.Errorf("the kernel's oom_score_adj: %q, %v; want -500 (kernel.oom_protect)", b, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	failures := map[string]string{}
	count := func(what string, out []byte) {
		mu.Lock()
		defer mu.Unlock()
		outcomes[what]++
		if strings.HasSuffix(what, "failed") && failures[what] == "" {
			failures[what] = string(out)
		}
	}
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := fluffy("-m", "replay/"+hog, "--no-apply", fmt.Sprintf("eat memory %d", i)).CombinedOutput()
			switch {
			case err == nil && bytes.Contains(out, []byte("exit status 137")):
				count("hog killed", out)
			case err == nil:
				count("hog ran", out)
			case bytes.Contains(out, []byte("too busy for a new session")):
				count("hog refused", out)
			default:
				count("hog failed", out)
			}
		}()
	}
	task := strings.Repeat("remember this line of the flood; ", 3000) // ~100 KB
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := fluffy("-m", "replay/"+talk, "--no-apply", fmt.Sprintf("flood %d: %s", i, task)).CombinedOutput()
			switch {
			case err == nil:
				count("flood ran", out)
			case bytes.Contains(out, []byte("too busy for a new session")):
				count("flood refused", out)
			default:
				count("flood failed", out)
			}
		}()
	}
	wg.Wait()
	t.Logf("outcomes: %v", outcomes)
	for what, out := range failures {
		t.Logf("first %s:\n%s", what, out)
	}
	select {
	case err := <-exited:
		t.Fatalf("the kernel died under the flood: %v\n%s", err, klog.String())
	default:
	}
	if out, err := fluffy("status").CombinedOutput(); err != nil {
		t.Fatalf("the kernel does not answer after the flood: %v\n%s", err, out)
	}
	if out, err := fluffy("audit", "verify", "--full").CombinedOutput(); err != nil {
		t.Fatalf("audit verify --full after the flood: %v\n%s", err, out)
	}
	// Every hog that started was killed by the OOM killer (the daemon
	// was not), and recorded.
	out, err := fluffy("audit", "log", "--kind", "exec.end", "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("audit log: %v\n%s", err, out)
	}
	if n := bytes.Count(out, []byte("\n")); outcomes["hog ran"] > 0 || n != outcomes["hog killed"] {
		t.Errorf("hogs: %v; %d exec.end recorded: want every hog that ran killed and recorded", outcomes, n)
	}
	if outcomes["hog killed"]+outcomes["flood ran"] == 0 {
		t.Errorf("nothing ran at all: %v", outcomes)
	}
}

// hasCapSysResource reports whether this process (and so the kernel it
// starts) has CAP_SYS_RESOURCE, which lowering an oom_score_adj needs.
func hasCapSysResource(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("CapEff %q: %v", v, err)
			}
			const capSysResource = 24
			return caps&(1<<capSysResource) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}
