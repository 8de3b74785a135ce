package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox/sandboxtest"
)

// A signal to `fluffy sandbox run` while its command runs (Ctrl-C in a
// terminal, a kill) stops the sandbox with everything in it and exits
// 128+signal, saying so: through the sandbox server (the client forwards
// the signal) and in-process (FLUFFY_SANDBOX_SERVER=off).
func TestSandboxInterrupt(t *testing.T) {
	bin, _, _, env := frontInstall(t)
	for i, tc := range []struct {
		name   string
		server string
		sig    syscall.Signal
		want   int
	}{
		{"server SIGINT", "auto", syscall.SIGINT, 130},
		{"server SIGTERM", "auto", syscall.SIGTERM, 143},
		{"in-process SIGINT", "off", syscall.SIGINT, 130},
		{"in-process SIGTERM", "off", syscall.SIGTERM, 143},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A sleep that no other process on the machine runs.
			marker := fmt.Sprintf("%d.%03d", 600+i, os.Getpid()%1000)
			cmd := exec.Command(filepath.Join(bin, "fluffy"), "sandbox", "run", "--no-workspace", "--",
				"/bin/sh", "-c", "echo started; sleep "+marker+"; echo not reached")
			cmd.Env = append(append([]string(nil), env...), "FLUFFY_SANDBOX_SERVER="+tc.server)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			rd := bufio.NewReader(out)
			if line, err := rd.ReadString('\n'); err != nil || line != "started\n" {
				t.Fatalf("first line %q, %v; stderr %q", line, err, stderr.String())
			}
			// The client takes signals over after its first 50 ms (before,
			// a signal ends it the default way); the command may have
			// started sooner than that.
			time.Sleep(150 * time.Millisecond)
			if sandboxtest.CountProcs("sleep "+marker) == 0 {
				t.Fatalf("nothing runs 'sleep %s' before the signal", marker)
			}
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			rest, _ := rd.ReadString(0)
			_ = cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != tc.want {
				t.Errorf("exit status %d (%v), want %d; stderr %q", code, cmd.ProcessState, tc.want, stderr.String())
			}
			name := map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[tc.sig]
			if want := "fluffy: sandbox: interrupted by " + name; !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr %q, want it to say %q", stderr.String(), want)
			}
			if rest != "" {
				t.Errorf("the command went on after the signal: %q", rest)
			}
			if n := sandboxtest.CountProcs("sleep " + marker); n != 0 {
				t.Errorf("%d processes still run 'sleep %s' after fluffy exited", n, marker)
			}
		})
	}
}

// A sandbox server started by a nohup'd command does not hand its ignored
// SIGHUP down to the commands of later callers: an ignored signal stays
// ignored across exec, so without care every sandbox after `nohup fluffy
// sandbox run ...` would be immune to hang-ups.
func TestServerStartedUnderNohup(t *testing.T) {
	nohup, err := exec.LookPath("nohup")
	if err != nil {
		t.Skip("no nohup command")
	}
	bin, work, _, env := frontInstall(t)
	sigIgn := func(viaNohup bool) uint64 {
		t.Helper()
		argv := []string{filepath.Join(bin, "fluffy"), "sandbox", "run", "--no-workspace", "--", "/bin/sh", "-c", "grep '^SigIgn:' /proc/self/status"}
		if viaNohup {
			argv = append([]string{nohup}, argv...)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir, cmd.Env = work, env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%q: %v", argv, err)
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(string(out), "SigIgn:")), 16, 64)
		if err != nil {
			t.Fatalf("%q printed %q: %v", argv, out, err)
		}
		return mask
	}
	const hup = 1 << (syscall.SIGHUP - 1)
	// The first call starts the server, from a process that ignores SIGHUP.
	sigIgn(true)
	if m := sigIgn(false); m&hup != 0 {
		t.Errorf("a command run after the server was started under nohup ignores SIGHUP (SigIgn %#x)", m)
	}
}
