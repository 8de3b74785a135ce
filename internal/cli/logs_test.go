package cli

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/datadir"
)

// The daemon's log on a full disk: every line the daemon logs still goes
// to its standard error, the failure is said there once, and logging
// goes on (the daemon is not stopped by its own log).
func TestServeLogOnAFullDisk(t *testing.T) {
	dir := t.TempDir()
	var stderr bytes.Buffer
	a := &App{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr, Cwd: dir, Self: "/nonexistent/fluffy-core",
		Environ: []string{"HOME=" + dir, "FLUFFY_HOME=" + filepath.Join(dir, "data"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "config")}}
	d, err := a.DataDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/full", d.Path(datadir.Logs, ServeLog)); err != nil {
		t.Fatal(err)
	}
	f, err := a.openLog(ServeLog, &stderr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	log := slog.New(slog.NewTextHandler(io.MultiWriter(&stderr, f), nil))
	for i := range 20 {
		log.Info("a daemon's line", "n", i)
	}
	out := stderr.String()
	if n := strings.Count(out, "fluffy: cannot write logs/serve.log in the data directory"); n != 1 {
		t.Errorf("the failure is said %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "a daemon's line"); n != 20 {
		t.Errorf("%d of 20 lines reached standard error", n)
	}
	if !strings.Contains(out, "no space left on device") {
		t.Errorf("the report does not name the cause:\n%s", out)
	}
}
