package logfile

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Past MaxSize the log moves to .1 and the older generations up by one;
// those past Keep are gone, and what is kept is what was written, in
// order, no file over MaxSize.
func TestRotatesBySize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serve.log")
	var opened int
	l, err := Open(path, Options{MaxSize: 100, Keep: 2, Opened: func(*os.File) error { opened++; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for i := range 12 {
		line := fmt.Sprintf("line %02d %s\n", i, bytes.Repeat([]byte("x"), 20)) // 30 bytes
		all = append(all, line)
		if n, err := l.Write([]byte(line)); n != len(line) || err != nil {
			t.Fatalf("write: %d, %v", n, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// 3 lines (90 bytes) a file: 12 lines are 4 files, the oldest dropped.
	kept := read(t, path+".2") + read(t, path+".1") + read(t, path)
	want := ""
	for _, s := range all[3:] {
		want += s
	}
	if kept != want {
		t.Errorf("kept generations:\n%s\nwant:\n%s", kept, want)
	}
	for _, name := range []string{path, path + ".1", path + ".2"} {
		if st, err := os.Stat(name); err != nil || st.Size() > 100 || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", name, st, err)
		}
	}
	if _, err := os.Stat(path + ".3"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a generation past Keep: %v", err)
	}
	if opened != 4 {
		t.Errorf("Opened saw %d files, want 4 (the first and one per rotation)", opened)
	}
}

// With Compress each rotated generation is gzipped and shifts as .N.gz.
func TestRotateCompresses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kernel.log")
	for _, gen := range []string{"first\n", "second\n", "third\n"} {
		if err := os.WriteFile(path, []byte(gen), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := Rotate(path, 2, true); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{path + ".1.gz": "third\n", path + ".2.gz": "second\n"} {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(zr)
		f.Close()
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", name, b, err, want)
		}
	}
	for _, name := range []string{path, path + ".1", path + ".3.gz"} {
		if _, err := os.Stat(name); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists: %v", name, err)
		}
	}
}

// A full disk: every write fails with ENOSPC, yet Write reports success
// (the daemon logging goes on) and the failure is reported once.
func TestFullDiskIsReportedOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serve.log")
	if err := os.Symlink("/dev/full", path); err != nil {
		t.Fatal(err)
	}
	var reported []error
	l, err := Open(path, Options{MaxSize: 1 << 20, Keep: 1, OnError: func(err error) { reported = append(reported, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 100 {
		if n, err := l.Write([]byte("a line the disk has no room for\n")); n != 32 || err != nil {
			t.Fatalf("write: %d, %v", n, err)
		}
	}
	if len(reported) != 1 || !errors.Is(reported[0], syscall.ENOSPC) {
		t.Fatalf("%d reports (the first: %v), want one ENOSPC", len(reported), reported[:min(1, len(reported))])
	}
}

// After a failure, a write that succeeds clears it (OnResume hears how
// many writes were lost, and may log that into the file): the next
// failure is reported again.
func TestFailureReportedAgainAfterRecovery(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "serve.log")
	var reported, resumed int
	var l *File
	l, err := Open(path, Options{OnError: func(error) { reported++ },
		OnResume: func(lost int, err error) {
			resumed++
			if lost != 2 || !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("resumed after %d lost writes (%v), want 2 and ENOSPC", lost, err)
			}
			fmt.Fprintf(l, "%d lines lost\n", lost)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	good := l.f
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	for _, step := range []struct {
		f    *os.File
		want int
	}{{full, 1}, {full, 1}, {good, 1}, {full, 2}} {
		l.f = step.f
		_, _ = l.Write([]byte("x\n"))
		if reported != step.want {
			t.Fatalf("after a write to %s: %d reports, want %d", step.f.Name(), reported, step.want)
		}
	}
	if resumed != 1 {
		t.Errorf("OnResume called %d times, want 1", resumed)
	}
	l.f = good
	if got := read(t, path); got != "x\n2 lines lost\n" {
		t.Errorf("the log holds %q", got)
	}
}
