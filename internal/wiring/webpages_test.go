package wiring

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeTestFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestWebMemory: the memory page's files (a source's file found in its
// own folder) with their sizes, and a search's hit with its file and
// line, through the index opened for the page when the daemon holds none.
func TestWebMemory(t *testing.T) {
	dir := t.TempDir()
	u := testUser(t, dir, dir)
	src := filepath.Join(dir, "notes")
	writeTestFile(t, filepath.Join(dir, "config", "fluffy", "config.yaml"), "memory:\n  sources: ["+src+"]\n")
	ws := filepath.Join(dir, ".fluffy", "workspace")
	want := map[string]string{"MEMORY.md": "# Core\n\nx\n", "memory/a.md": "# A\n\nThe deploy runs on Fridays.\n",
		"sources/notes/b.md": "# B\n\nlonger text of a source file\n"}
	writeTestFile(t, filepath.Join(ws, "MEMORY.md"), want["MEMORY.md"])
	writeTestFile(t, filepath.Join(ws, "memory", "a.md"), want["memory/a.md"])
	writeTestFile(t, filepath.Join(src, "b.md"), want["sources/notes/b.md"])
	m := webMemory{u: u, ws: ws, held: &heldMemory{}}
	files, err := m.Files(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, f := range files {
		got[f.Path] = f.Size
		if f.Modified.IsZero() {
			t.Errorf("%s: no modification time", f.Path)
		}
	}
	if len(got) != len(want) {
		t.Errorf("files %v, want %v", got, want)
	}
	for p, body := range want {
		if got[p] != int64(len(body)) {
			t.Errorf("%s: size %d, want %d", p, got[p], len(body))
		}
	}
	res, err := m.Search(t.Context(), "deploy")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Hits) == 0 || res.Hits[0].Path != "memory/a.md" || res.Hits[0].Line != 1 || !strings.Contains(res.Hits[0].Snippet, "deploy") {
		t.Errorf("search: %+v", res)
	}
}

// TestWebSchedules: the schedules page's jobs from the configuration,
// each with its next slot, the heartbeat after them.
func TestWebSchedules(t *testing.T) {
	dir := t.TempDir()
	u := testUser(t, dir, dir)
	writeTestFile(t, filepath.Join(dir, "config", "fluffy", "config.yaml"),
		"serve:\n  cron:\n    - name: inbox\n      schedule: \"30 7 * * mon-fri\"\n      timezone: UTC\n      prompt: Sort my inbox.\n      report: {channel: cli, room: me}\n")
	l, err := u.Config()
	if err != nil {
		t.Fatal(err)
	}
	v, err := webSchedules{u: u, l: l}.Schedules(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// The heartbeat (on by default) follows the configured jobs.
	if v.Scheduler != nil || len(v.Jobs) == 0 {
		t.Fatalf("schedules: %+v", v)
	}
	j := v.Jobs[0]
	if j.Name != "inbox" || j.Schedule != "30 7 * * mon-fri" || j.TimeZone != "UTC" || j.Next.IsZero() || len(j.Runs) != 0 {
		t.Errorf("job: %+v", j)
	}
}
