package audit_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
)

// TestMain lets the test binary act as a second process: with
// AUDIT_HELPER set it runs that helper instead of the tests.
func TestMain(m *testing.M) {
	switch os.Getenv("AUDIT_HELPER") {
	case "":
		os.Exit(m.Run())
	case "append":
		os.Exit(helperAppend(os.Getenv("AUDIT_DB"), os.Getenv("AUDIT_KEYS")))
	case "buffered":
		os.Exit(helperBuffered(os.Getenv("AUDIT_DB"), os.Getenv("AUDIT_KEYS")))
	case "hold":
		os.Exit(helperHold(os.Getenv("AUDIT_DB"), os.Getenv("AUDIT_KEYS")))
	case "cycles":
		os.Exit(helperCycles(os.Getenv("AUDIT_DIR")))
	}
	os.Exit(3)
}

// helperAppend appends as fast as it can, mixing buffered and
// synchronous entries, and prints "ack SEQ" after every synchronous
// Append returned: those entries must survive a kill -9.
func helperAppend(path, keys string) int {
	ctx := context.Background()
	l, err := audit.Open(ctx, audit.Options{Path: path, KeyDir: keys, CheckpointEvery: 50, FlushEntries: 20, FlushInterval: 5 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	w := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		kind := audit.KindExecStart
		if i%4 == 0 {
			kind = audit.KindGatePolicy
		}
		seq, err := l.Append(ctx, audit.Entry{Kind: kind, Actor: "agent", Session: "kill", Payload: map[string]int{"i": i}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if kind.Synchronous() {
			fmt.Fprintf(w, "ack %d %d\n", seq, i)
			w.Flush()
		}
	}
}

// bufferedMaxPending is the queue bound of helperBuffered's log: the
// most a crash may lose of its buffered entries.
const bufferedMaxPending = 800

// helperBuffered appends buffered entries only, with the default flush
// policy (every 100 entries or 500 ms, on the background writer), as the
// tool router's fast path does (canonical audit.Object payloads). It
// prints "appended SEQ" after each Append returned and "flushed SEQ"
// after an explicit Flush (every 1,000 entries).
func helperBuffered(path, keys string) int {
	ctx := context.Background()
	l, err := audit.Open(ctx, audit.Options{Path: path, KeyDir: keys, MaxPending: bufferedMaxPending})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	w := bufio.NewWriter(os.Stdout)
	var o audit.Object
	for i := 1; ; i++ {
		o.Reset()
		o.Int("i", int64(i))
		o.String("tool", "fs.read")
		seq, err := l.Append(ctx, audit.Entry{Kind: "tool.read", Actor: "agent", Session: "kill", Payload: &o})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(w, "appended %d\n", seq)
		if i%1000 == 0 {
			if err := l.Flush(ctx); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Fprintf(w, "flushed %d\n", seq)
		}
		if i%50 == 0 {
			w.Flush()
		}
	}
}

// helperHold opens the log, says "ready" and holds it until stdin closes.
func helperHold(path, keys string) int {
	l, err := audit.Open(context.Background(), audit.Options{Path: path, KeyDir: keys})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	return boolInt(l.Close() != nil)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func helper(t *testing.T, kind, dir string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), "AUDIT_HELPER="+kind, "AUDIT_DB="+filepath.Join(dir, "audit.db"), "AUDIT_KEYS="+filepath.Join(dir, "keys"))
	cmd.Stderr = os.Stderr
	return cmd
}

// killAppender runs the appending helper, kills it with SIGKILL after
// acks acknowledged synchronous entries, and returns them (seq -> i).
func killAppender(t *testing.T, dir string, acks int) map[uint64]int {
	t.Helper()
	cmd := helper(t, "append", dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[uint64]int{}
	sc := bufio.NewScanner(out)
	for len(acked) < acks && sc.Scan() {
		var seq uint64
		var i int
		if _, err := fmt.Sscanf(sc.Text(), "ack %d %d", &seq, &i); err != nil {
			t.Fatalf("helper said %q", sc.Text())
		}
		acked[seq] = i
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Whatever it printed between our last read and the kill was also
	// acknowledged.
	for sc.Scan() {
		var seq uint64
		var i int
		if _, err := fmt.Sscanf(sc.Text(), "ack %d %d", &seq, &i); err == nil {
			acked[seq] = i
		}
	}
	cmd.Wait()
	if len(acked) < acks {
		t.Fatalf("helper acknowledged only %d entries", len(acked))
	}
	return acked
}

func verifyDir(t *testing.T, dir string) (audit.Report, error) {
	t.Helper()
	keys := filepath.Join(dir, "keys")
	k, err := audit.LoadKey(keys)
	if err != nil {
		t.Fatal(err)
	}
	trusted, err := audit.TrustedCheckpoints(keys)
	if err != nil {
		t.Fatal(err)
	}
	r, err := audit.OpenReader(t.Context(), filepath.Join(dir, "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	return r.Verify(t.Context(), audit.VerifyOptions{Verifier: k.Verifier, Full: true, Trusted: trusted})
}

func TestKill9KeepsAcknowledgedEntries(t *testing.T) {
	dir := t.TempDir()
	acked := killAppender(t, dir, 300)
	if _, err := os.Stat(filepath.Join(dir, "audit.db-wal")); err != nil {
		t.Logf("no WAL after the kill: %v", err)
	}
	rep, err := verifyDir(t, dir)
	if err != nil {
		t.Fatalf("after kill -9: %v", err)
	}
	r, err := audit.OpenReader(t.Context(), filepath.Join(dir, "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	found := 0
	err = r.Entries(t.Context(), audit.Filter{Kind: audit.KindGatePolicy}, func(e audit.Entry) error {
		if i, ok := acked[e.Seq]; ok {
			if got, want := string(e.Payload.(json.RawMessage)), fmt.Sprintf(`{"i":%d}`, i); got != want {
				return fmt.Errorf("entry %d payload %s, want %s", e.Seq, got, want)
			}
			found++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found != len(acked) {
		t.Fatalf("%d of %d acknowledged synchronous entries survived (log has %d entries)", found, len(acked), rep.Size)
	}
	// The lock died with the process: the log opens and continues.
	l, err := audit.Open(t.Context(), audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys")})
	if err != nil {
		t.Fatal(err)
	}
	seq, err := l.Append(t.Context(), audit.Entry{Kind: audit.KindKernelStart, Actor: "kernel"})
	if err != nil || seq != rep.Size+1 {
		t.Fatalf("append after reopen: seq %d, %v (log had %d)", seq, err, rep.Size)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := verifyDir(t, dir); err != nil {
		t.Fatal(err)
	}
}

// TestKill9DuringBufferedFlush kills a process appending buffered
// entries as fast as it can (so the background writer is mid-write most
// of the time): the log must verify, hold every entry an explicit Flush
// confirmed, hold entries 1..n without a gap and with their payloads,
// and lose at most the documented window (MaxPending entries) of what
// Append had returned.
func TestKill9DuringBufferedFlush(t *testing.T) {
	for round := range 3 {
		dir := t.TempDir()
		cmd := helper(t, "buffered", dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var appended, flushed uint64
		sc := bufio.NewScanner(out)
		target := uint64(2500 + 700*round) // not a multiple of the flush size
		for appended < target && sc.Scan() {
			var seq uint64
			if _, err := fmt.Sscanf(sc.Text(), "appended %d", &seq); err == nil {
				appended = seq
			} else if _, err := fmt.Sscanf(sc.Text(), "flushed %d", &seq); err == nil {
				flushed = seq
			}
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for sc.Scan() {
			var seq uint64
			if _, err := fmt.Sscanf(sc.Text(), "appended %d", &seq); err == nil {
				appended = seq
			} else if _, err := fmt.Sscanf(sc.Text(), "flushed %d", &seq); err == nil {
				flushed = seq
			}
		}
		cmd.Wait()
		if appended < target || flushed == 0 {
			t.Fatalf("helper appended %d, flushed %d", appended, flushed)
		}
		rep, err := verifyDir(t, dir)
		if err != nil {
			t.Fatalf("round %d: after kill -9 during buffered writes: %v", round, err)
		}
		if rep.Size < flushed {
			t.Fatalf("round %d: log has %d entries, but %d were confirmed by Flush", round, rep.Size, flushed)
		}
		if appended > rep.Size+bufferedMaxPending {
			t.Fatalf("round %d: log has %d entries of %d appended: lost more than MaxPending (%d): queued plus the batch being written", round, rep.Size, appended, bufferedMaxPending)
		}
		r, err := audit.OpenReader(t.Context(), filepath.Join(dir, "audit.db"))
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		err = r.Entries(t.Context(), audit.Filter{}, func(e audit.Entry) error {
			if e.Kind != "tool.read" {
				return nil
			}
			n++
			if want := fmt.Sprintf(`{"i":%d,"tool":"fs.read"}`, n); e.Seq != n || string(e.Payload.(json.RawMessage)) != want {
				return fmt.Errorf("entry %d: seq %d payload %s, want %s", n, e.Seq, e.Payload, want)
			}
			return nil
		})
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: appended at least %d, flushed %d, survived %d", round, appended, flushed, n)
		// The log reopens and continues from where the disk is.
		l, err := audit.Open(t.Context(), audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys")})
		if err != nil {
			t.Fatal(err)
		}
		if seq, err := l.Append(t.Context(), audit.Entry{Kind: audit.KindKernelStart, Actor: "kernel"}); err != nil || seq != rep.Size+1 {
			t.Fatalf("append after reopen: seq %d, %v (log had %d)", seq, err, rep.Size)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := verifyDir(t, dir); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWALLoss kills an appender, then deletes or tears its WAL file. The
// database must still open, and verify must either pass on what remains
// or report the lost tail as truncation against the checkpoint copy kept
// under keys/ — never anything silently shorter than that checkpoint.
func TestWALLoss(t *testing.T) {
	for _, mode := range []string{"deleted", "torn"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			killAppender(t, dir, 200)
			wal := filepath.Join(dir, "audit.db-wal")
			fi, err := os.Stat(wal)
			if err != nil {
				t.Skipf("no WAL left after the kill (%v)", err)
			}
			switch mode {
			case "deleted":
				os.Remove(wal)
				os.Remove(filepath.Join(dir, "audit.db-shm"))
			case "torn":
				if err := os.Truncate(wal, fi.Size()/2+1234); err != nil {
					t.Fatal(err)
				}
			}
			cp, err := os.ReadFile(filepath.Join(dir, "keys", audit.CheckpointFile))
			if err != nil {
				t.Fatal(err)
			}
			k, err := audit.LoadKey(filepath.Join(dir, "keys"))
			if err != nil {
				t.Fatal(err)
			}
			c, err := audit.ParseCheckpoint(cp, k.Verifier)
			if err != nil {
				t.Fatal(err)
			}
			cpSize := c.Size
			rep, err := verifyDir(t, dir)
			var de *audit.DamageError
			switch {
			case err == nil:
				if rep.Size < cpSize {
					t.Fatalf("verify passed on %d entries, the checkpoint copy covers %d", rep.Size, cpSize)
				}
				t.Logf("WAL %s: %d entries remain, all verified (checkpoint copy at %d)", mode, rep.Size, cpSize)
			case errors.As(err, &de) && de.Damage == audit.DamageTruncated:
				t.Logf("WAL %s: reported as %v", mode, err)
			default:
				t.Fatalf("WAL %s: %v", mode, err)
			}
			// A writer refuses to continue on a log behind its checkpoint
			// copy: a new chain would overwrite the evidence.
			l, err := audit.Open(t.Context(), audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys")})
			if rep.Size < cpSize || err != nil {
				if !errors.Is(err, audit.ErrDamaged) {
					t.Fatalf("Open on a truncated log: %v, want ErrDamaged", err)
				}
				return
			}
			l.Close()
		})
	}
}

func TestSecondProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := helper(t, "hold", dir)
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("helper: %q", line)
	}
	opts := audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys")}
	_, err := audit.Open(t.Context(), opts)
	if !errors.Is(err, audit.ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", cmd.Process.Pid)) {
		t.Fatalf("second writer: %v, want ErrLocked naming pid %d", err, cmd.Process.Pid)
	}
	// Readers are not blocked.
	r, err := audit.OpenReader(t.Context(), opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Stats(t.Context()); err != nil {
		t.Fatal(err)
	}
	r.Close()
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	l, err := audit.Open(t.Context(), opts)
	if err != nil {
		t.Fatalf("after the first process closed: %v", err)
	}
	l.Close()
}

// TestDiskFull fills a small tmpfs: appends then fail closed with
// ErrUnavailable, nothing acknowledged is lost, and once there is room
// again the log continues and verifies.
func TestDiskFull(t *testing.T) {
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("cannot mount a small tmpfs to fill (needs root / CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	opts := audit.Options{Path: filepath.Join(mnt, "audit.db"), KeyDir: filepath.Join(t.TempDir(), "keys"), CheckpointEvery: 20, FlushEntries: 10, MaxPending: 50}
	l, err := audit.Open(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 2000)
	var acked []uint64
	var failErr error
	for i := 0; i < 10000; i++ {
		seq, err := l.Append(t.Context(), audit.Entry{Kind: audit.KindGatePolicy, Actor: "agent", Payload: map[string]string{"pad": big}})
		if err != nil {
			failErr = err
			break
		}
		acked = append(acked, seq)
	}
	if failErr == nil {
		t.Fatal("256 KiB never filled up")
	}
	if !errors.Is(failErr, audit.ErrUnavailable) {
		t.Fatalf("disk full: %v, want ErrUnavailable", failErr)
	}
	t.Logf("disk full after %d entries: %v", len(acked), failErr)
	// Still failing closed; buffered appends fail too once the queue is full.
	if _, err := l.Append(t.Context(), audit.Entry{Kind: audit.KindGatePolicy, Actor: "agent", Payload: map[string]string{"pad": big}}); !errors.Is(err, audit.ErrUnavailable) {
		t.Fatalf("second append on a full disk: %v", err)
	}
	var bufErr error
	for i := 0; i < 2000 && bufErr == nil; i++ {
		_, bufErr = l.Append(t.Context(), audit.Entry{Kind: audit.KindExecStart, Actor: "agent", Payload: map[string]string{"pad": big}})
	}
	if !errors.Is(bufErr, audit.ErrUnavailable) {
		t.Fatalf("buffered appends on a full disk never failed: %v", bufErr)
	}
	// Room again: the queued entries and new ones are written.
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT, "size=64m"); err != nil {
		t.Fatal(err)
	}
	seq, err := l.Append(t.Context(), audit.Entry{Kind: audit.KindGatePolicy, Actor: "agent"})
	if err != nil {
		t.Fatalf("append after space was freed: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	k, _ := audit.LoadKey(opts.KeyDir)
	r, err := audit.OpenReader(t.Context(), opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	trusted, _ := audit.TrustedCheckpoints(opts.KeyDir)
	rep, err := r.Verify(t.Context(), audit.VerifyOptions{Verifier: k.Verifier, Full: true, Trusted: trusted})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Size != seq || seq <= acked[len(acked)-1] {
		t.Fatalf("log has %d entries, last append got %d, last acknowledged before the disk filled %d", rep.Size, seq, acked[len(acked)-1])
	}
}

// TestLockedTooLong holds the database's write lock from another
// connection (as a sqlite3 shell would): a synchronous append fails
// closed after the busy timeout, and succeeds once the lock is released.
func TestLockedTooLong(t *testing.T) {
	dir := t.TempDir()
	opts := audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys"), BusyTimeout: 100 * time.Millisecond}
	l, err := audit.Open(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Append(t.Context(), audit.Entry{Kind: audit.KindKernelStart, Actor: "kernel"}); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", "file:"+opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	_, err = l.Append(t.Context(), audit.Entry{Kind: audit.KindApprovalDecision, Actor: "user:ann", Payload: map[string]string{"decision": "allow"}})
	if !errors.Is(err, audit.ErrUnavailable) || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("append while locked: %v, want ErrUnavailable (database locked)", err)
	}
	if _, err := conn.ExecContext(t.Context(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	seq, err := l.Append(t.Context(), audit.Entry{Kind: audit.KindApprovalDecision, Actor: "user:ann", Payload: map[string]string{"decision": "deny"}})
	if err != nil {
		t.Fatal(err)
	}
	// The entry whose write failed stayed queued and was written first.
	if seq != 3 {
		t.Fatalf("seq %d, want 3", seq)
	}
	rep, err := l.VerifyAtStart(t.Context())
	if err != nil || rep.Size != 3 {
		t.Fatalf("VerifyAtStart: %+v, %v", rep, err)
	}
}

// TestKill9DuringCycles kills a process running the CLI's cycle (open,
// exec.start, exec.end, close with KeepWAL) at arbitrary points, several
// times over: wherever it dies (mid-commit, between a commit and the
// checkpoint file's write, mid-close), the next writer opens the log
// without a false alarm and the log verifies against the checkpoint file.
func TestKill9DuringCycles(t *testing.T) {
	dir := cycleDir(t)
	seedLog(t, dir, 20)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for i, delay := range []time.Duration{3, 7, 11, 17, 23, 31, 41, 53} {
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), "AUDIT_HELPER=cycles", "AUDIT_DIR="+dir, "AUDIT_CYCLES=100000")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		l, err := audit.Open(t.Context(), cycleOptions(dir))
		if err != nil {
			t.Fatalf("kill %d (after %v): reopen: %v", i, delay*time.Millisecond, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		rep, err := verifyDir(t, dir)
		if err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
		t.Logf("kill %d after %v: %d entries verify", i, delay*time.Millisecond, rep.Size)
	}
}
