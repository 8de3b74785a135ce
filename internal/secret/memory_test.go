package secret

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// memChildEnv marks the test binary re-executed as the process whose
// memory TestValueGoneAfterSessionEnd searches.
const memChildEnv = "FLUFFY_SECRET_MEMTEST_FILE"

// TestValueGoneAfterSessionEnd runs a process that resolves a secret
// through the broker (the file backend, as a daemon would) and searches
// that process's whole memory through /proc/PID/mem: while the session
// holds the value it is found (the search works), after the session has
// ended it is nowhere.
func TestValueGoneAfterSessionEnd(t *testing.T) {
	if p := os.Getenv(memChildEnv); p != "" {
		memChild(p)
		return
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	value := []byte(hex.EncodeToString(raw))
	file := filepath.Join(t.TempDir(), "value")
	if err := os.WriteFile(file, value, 0o600); err != nil {
		t.Fatal(err)
	}
	in, expect, pid := startChild(t, "TestValueGoneAfterSessionEnd", memChildEnv+"="+file)
	expect("held")
	if n := searchMemory(t, pid, value); n == 0 {
		t.Fatal("the value is not found while the session holds it: the search finds nothing")
	}
	fmt.Fprintln(in, "end")
	expect("ended")
	if n := searchMemory(t, pid, value); n != 0 {
		t.Errorf("the value is in the process's memory %d times after the session ended", n)
	}
}

// startChild runs the test binary again as the process a test
// searches, running only test with env added: it returns the child's
// stdin, a check of the next line it prints, and its pid.
func startChild(t *testing.T, test, env string) (io.Writer, func(want string), int) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	out := bufio.NewReader(outPipe)
	expect := func(want string) {
		t.Helper()
		line, err := out.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != want {
			t.Fatalf("child said %q, %v; want %q", line, err, want)
		}
	}
	return in, expect, cmd.Process.Pid
}

// memChild is the searched process: it uses the secret for a session,
// says "held", waits, ends the session, collects garbage, says "ended",
// and waits for its stdin to close.
func memChild(file string) {
	b, err := New(Options{Backends: map[string]Backend{"file": File{}}, Key: make([]byte, 32)})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	ref := Ref{Backend: "file", Path: file}
	if _, err := b.Use(ctx, "s", ref, func(v []byte) error { return nil }); err != nil {
		panic(err)
	}
	in := bufio.NewReader(os.Stdin)
	fmt.Println("held")
	if _, err := in.ReadString('\n'); err != nil {
		panic(err)
	}
	b.EndSession(ctx, "s")
	runtime.GC()
	debug.FreeOSMemory()
	fmt.Println("ended")
	_, _ = io.Copy(io.Discard, in)
	os.Exit(0)
}

// searchMemory counts the occurrences of v in every readable mapping of
// process pid.
func searchMemory(t *testing.T, pid int, v []byte) int {
	t.Helper()
	maps, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		t.Skipf("cannot read another process's memory here (%v): run as the same user without a ptrace restriction", err)
	}
	defer mem.Close()
	n := 0
	for line := range strings.SplitSeq(strings.TrimSpace(string(maps)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[1][0] != 'r' || (len(f) >= 6 && (f[5] == "[vvar]" || f[5] == "[vsyscall]" || f[5] == "[vvar_vclock]")) {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end-start > 1<<32 {
			continue
		}
		buf := make([]byte, end-start)
		m, _ := mem.ReadAt(buf, int64(start))
		n += bytes.Count(buf[:m], v)
	}
	return n
}
