package assistant

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fluffy-agent/fluffy/internal/regfile"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadOrderAndDailyLogs(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		Soul:                    "You are Fluff, terse and kind.",
		User:                    "The person is Ada; she works in Berlin.",
		Tools:                   "Prefer ripgrep.",
		Memory:                  "Ada's cat is called Turing.",
		Heartbeat:               "- check the inbox",
		"memory/2026-11-25.md":  "older day",
		"memory/2026-11-27.md":  "today: shipped the daemon",
		"memory/2026-11-26.md":  "yesterday",
		"memory/notes.md":       "not a daily log",
		"memory/2026-13-01.md":  "not a date",
		"memory/2026-11-24.txt": "wrong suffix",
	})
	l, err := Load(dir, 10000)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{Soul, User, Tools, Memory, "memory/2026-11-27.md", "memory/2026-11-26.md", "memory/2026-11-25.md"}
	if diff := cmp.Diff(want, l.Files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if strings.Contains(l.Prompt, "check the inbox") {
		t.Error("HEARTBEAT.md is in every turn's prompt; the heartbeat delivers it")
	}
	if strings.Contains(l.Prompt, "not a daily log") || strings.Contains(l.Prompt, "not a date") {
		t.Error("a file that is not memory/YYYY-MM-DD.md was loaded as a daily log")
	}
	// The persona comes first, the most recent log before older ones.
	if i, j := strings.Index(l.Prompt, "Fluff"), strings.Index(l.Prompt, "Turing"); i < 0 || j < i {
		t.Errorf("persona not before memory:\n%s", l.Prompt)
	}
	if i, j := strings.Index(l.Prompt, "today:"), strings.Index(l.Prompt, "older day"); i < 0 || j < i {
		t.Errorf("daily logs not most recent first:\n%s", l.Prompt)
	}
	if l.Tokens <= 0 || len(l.Cut) != 0 || len(l.Left) != 0 {
		t.Errorf("tokens %d cut %v left %v", l.Tokens, l.Cut, l.Left)
	}
}

func TestLoadBudgetKeepsRecentLogs(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("a line of the daily log\n", 40) // ~960 bytes
	writeFiles(t, dir, map[string]string{
		Soul:                   "persona",
		"memory/2026-11-27.md": "newest " + big,
		"memory/2026-11-26.md": "middle " + big,
		"memory/2026-11-25.md": "oldest " + big,
	})
	l, err := Load(dir, 600) // ~2400 bytes: the persona and two logs, at most
	if err != nil {
		t.Fatal(err)
	}
	if l.Tokens > 600+100 {
		t.Errorf("prompt of ~%d tokens exceeds the budget of 600 by more than the preamble", l.Tokens)
	}
	if !strings.Contains(l.Prompt, "newest") {
		t.Error("the most recent log was dropped before older ones")
	}
	if strings.Contains(l.Prompt, "oldest") {
		t.Error("the oldest log was kept although the budget is spent")
	}
	if !contains(l.Left, "memory/2026-11-25.md") {
		t.Errorf("left out %v does not name the oldest log", l.Left)
	}
	if !strings.Contains(l.Prompt, "left out for space") {
		t.Error("the prompt does not tell the agent that files were left out")
	}
}

func TestLoadCutsLongCoreFile(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		Soul:   "persona\n" + strings.Repeat("ü", 5000), // multi-byte: the cut must stay UTF-8
		Memory: "memory",
	})
	l, err := Load(dir, 500)
	if err != nil {
		t.Fatal(err)
	}
	if !contains(l.Cut, Soul) {
		t.Errorf("cut %v does not name %s", l.Cut, Soul)
	}
	if !strings.Contains(l.Prompt, "cut to fit the prompt budget") {
		t.Error("the cut is not marked")
	}
	if !strings.Contains(l.Prompt, "persona") {
		t.Error("the start of the persona was lost")
	}
	if !contains(l.Left, Memory) {
		t.Errorf("MEMORY.md should be left out once the budget is spent; left %v files %v", l.Left, l.Files)
	}
	if !isUTF8(l.Prompt) {
		t.Error("the cut broke a UTF-8 sequence")
	}
}

func TestLoadRefusesWhatIsNotAFileOfTheWorkspace(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("the person's secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("symlink out", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Symlink(outside, filepath.Join(dir, User)); err != nil {
			t.Fatal(err)
		}
		l, err := Load(dir, 1000)
		if err == nil {
			t.Fatalf("loaded a symlink out of the workspace: %q", l.Prompt)
		}
		if !strings.Contains(err.Error(), User) {
			t.Errorf("error %q does not name the file", err)
		}
	})
	t.Run("daily log symlink out", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, MemoryDir), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(dir, MemoryDir, "2026-11-27.md")); err != nil {
			t.Fatal(err)
		}
		l, err := Load(dir, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(l.Prompt, "secret") {
			t.Error("a daily log that is a symlink out of the workspace was read")
		}
	})
	t.Run("fifo does not hang", func(t *testing.T) {
		dir := t.TempDir()
		if err := syscall.Mkfifo(filepath.Join(dir, Soul), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(dir, 1000)
		if !errors.Is(err, regfile.ErrNotRegular) {
			t.Fatalf("err = %v, want ErrNotRegular", err)
		}
	})
	t.Run("not UTF-8", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{Soul: "\xff\xfe"})
		if _, err := Load(dir, 1000); err == nil || !strings.Contains(err.Error(), "UTF-8") {
			t.Fatalf("err = %v, want a UTF-8 error", err)
		}
	})
}

func TestLoadEmptyWorkspace(t *testing.T) {
	l, err := Load(t.TempDir(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if l.Prompt != "" || len(l.Files) != 0 {
		t.Errorf("empty workspace gave %+v", l)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing"), 1000); err == nil {
		t.Error("a missing workspace directory loaded")
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func isUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
