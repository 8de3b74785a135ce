package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The chaos test's knobs: 'make test' runs the full 200 kills
// (docs/operations.md); fewer while working on it.
var (
	chaosKills = flag.Int("chaos.kills", 200, "kill -9s of the kernel in TestChaosKill")
	chaosSeed  = flag.Uint64("chaos.seed", 0, "the PRNG seed of TestChaosKill (0: from the clock; printed on failure)")
)

// chaosLanes is how many clients run sessions at once.
const chaosLanes = 3

// TestChaosKill kills the kernel (kill -9) at random points while sessions
// run and apply their change sets, again and again, then starts it once
// more and checks: the audit log verifies entry by entry; every session a
// client saw succeed has its changeset.apply entry and its files; no
// change set is half applied (each writes two files: both are in the
// workspace or neither); every session is resumable (paused) or ended
// (closed, failed), none left running.
func TestChaosKill(t *testing.T) {
	if testing.Short() {
		t.Skip("kills the kernel many times")
	}
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -chaos.seed=%d -chaos.kills=%d)", seed, seed, *chaosKills)
	defer func() {
		if t.Failed() {
			t.Logf("failed with seed %d: rerun with go test ./cmd/fluffy -run TestChaosKill -chaos.seed=%d -chaos.kills=%d", seed, seed, *chaosKills)
		}
	}()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	core := buildCore(t)
	work := t.TempDir()
	ws := filepath.Join(work, "ws")
	home := filepath.Join(work, "data")
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work, "FLUFFY_HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(work, "config"), "XDG_RUNTIME_DIR=", "FLUFFY_SANDBOX_SERVER=off",
		"FLUFFY_KERNEL_IDLE_TIMEOUT=2s"}
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "init", "-q", ws).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	fluffy := func(args ...string) *exec.Cmd {
		cmd := exec.Command(core, args...)
		cmd.Dir, cmd.Env = ws, env
		return cmd
	}
	sock := filepath.Join(home, "kernel.sock")
	var (
		mu    sync.Mutex
		acked []string // tasks whose client exited 0
		tasks []string
	)
	// delay bounds how long a kill waits after the clients start: the
	// first round lets its sessions finish and measures them, so kills
	// land anywhere from the kernel's first request to the last apply.
	var delay time.Duration
	for kill := range *chaosKills {
		k := fluffy("kernel")
		var kout bytes.Buffer
		k.Stdout, k.Stderr = &kout, &kout
		if err := k.Start(); err != nil {
			t.Fatal(err)
		}
		if !waitSocket(sock, 20*time.Second) {
			_ = k.Process.Kill()
			_ = k.Wait()
			t.Fatalf("kill %d: the kernel did not start:\n%s", kill, kout.String())
		}
		start := time.Now()
		var wg sync.WaitGroup
		for lane := range chaosLanes {
			task := fmt.Sprintf("k%03dl%d", kill, lane)
			script := filepath.Join(work, task+".jsonl")
			if err := os.WriteFile(script, []byte(chaosScript(task)), 0o644); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			tasks = append(tasks, task)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := fluffy("-m", "replay/"+script, "--yes", "write the notes of "+task)
				if err := c.Run(); err == nil {
					mu.Lock()
					acked = append(acked, task)
					mu.Unlock()
				}
			}()
		}
		if delay == 0 {
			wg.Wait()
			delay = time.Since(start) + time.Since(start)/10
			t.Logf("sessions take %v here: kills land within %v of their start", time.Since(start), delay)
		} else {
			time.Sleep(time.Duration(rng.Int64N(int64(delay))))
		}
		_ = k.Process.Signal(syscall.SIGKILL)
		_ = k.Wait()
		wg.Wait()
		// A client that connected after the kill started a kernel of
		// its own (on demand): stop it before the next round.
		if out, err := fluffy("kernel", "stop").CombinedOutput(); err != nil {
			t.Fatalf("kill %d: kernel stop: %v %s", kill, err, out)
		}
	}
	// The last start: it must come up, verify the log and recover.
	if out, err := fluffy("status").CombinedOutput(); err != nil {
		t.Fatalf("the kernel does not start after %d kills: %v\n%s", *chaosKills, err, out)
	}
	defer fluffy("kernel", "stop").Run()
	if out, err := fluffy("audit", "verify", "--full").CombinedOutput(); err != nil {
		t.Fatalf("audit verify --full: %v\n%s", err, out)
	}
	applied := map[string]bool{}
	out, err := fluffy("audit", "log", "--kind", "changeset.apply", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var e struct {
			Payload struct {
				Paths []string `json:"paths"`
			} `json:"payload"`
		}
		if line == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		for _, p := range e.Payload.Paths {
			applied[p] = true
		}
	}
	exists := func(p string) bool { _, err := os.Stat(filepath.Join(ws, p)); return err == nil }
	for _, task := range acked {
		a, b := task+"-a.txt", task+"-b.txt"
		if !applied[a] || !applied[b] || !exists(a) || !exists(b) {
			t.Errorf("%s: its client saw it applied; changeset.apply recorded %v/%v, files present %v/%v", task, applied[a], applied[b], exists(a), exists(b))
		}
	}
	halves := 0
	for _, task := range tasks {
		if exists(task+"-a.txt") != exists(task+"-b.txt") {
			halves++
			t.Errorf("%s: half applied (a %v, b %v)", task, exists(task+"-a.txt"), exists(task+"-b.txt"))
		}
	}
	out, err = fluffy("session", "ls", "--all", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var sessions []struct {
		ID, Status string
	}
	if err := json.Unmarshal(out, &sessions); err != nil {
		t.Fatal(err)
	}
	for _, s := range sessions {
		switch s.Status {
		case "paused", "closed", "failed":
		default:
			t.Errorf("session %s is %q after the last start: neither resumable nor ended", s.ID, s.Status)
		}
	}
	t.Logf("%d kills, %d sessions started, %d acknowledged, %d sessions in fluffy.db, %d applied paths", *chaosKills, len(tasks), len(acked), len(sessions), len(applied))
}

// chaosScript is a replay model that writes task's two files and stops.
func chaosScript(task string) string {
	return fmt.Sprintf(`{"turn": {"text": "Writing.", "tool_calls": [{"id": "a", "name": "fs.write", "args": {"path": "%[1]s-a.txt", "content": "%[1]s\n"}}, {"id": "b", "name": "fs.write", "args": {"path": "%[1]s-b.txt", "content": "%[1]s\n"}}]}}
{"turn": {"text": "Done."}}
{"end": {}}
`, task)
}

// waitSocket waits until something accepts connections on sock.
func waitSocket(sock string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// buildCore builds fluffy-core into a directory of the test's.
func buildCore(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build fluffy-core with")
	}
	path := filepath.Join(t.TempDir(), "fluffy-core")
	cmd := exec.Command(goBin, "build", "-o", path, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return path
}
