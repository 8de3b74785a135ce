package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/bootstrap"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/logfile"
)

// openLog opens the data directory's logs/name with the rotation log.*
// configures. A write that fails (a full disk) is reported once on
// report, and the daemon goes on; when writes work again the log itself
// says how many lines were lost.
func (a *App) openLog(name string, report io.Writer, opened func(*os.File) error) (*logfile.File, error) {
	l, err := a.Config()
	if err != nil {
		return nil, err
	}
	d, err := a.DataDir()
	if err != nil {
		return nil, err
	}
	o := bootstrap.LogRotation(l.Config.Log)
	o.Opened = opened
	rel := "logs/" + name
	if report != nil {
		o.OnError = func(err error) {
			fmt.Fprintf(report, "fluffy: cannot write %s in the data directory (%v); its lines are lost until a write succeeds again\n", rel, err)
		}
	}
	var f *logfile.File
	o.OnResume = func(lost int, err error) {
		// A logger of its own: the daemon's handler holds its lock
		// around the write that got here.
		var h slog.Handler = slog.NewTextHandler(f, nil)
		if l.Config.Log.Format == "json" {
			h = slog.NewJSONHandler(f, nil)
		}
		slog.New(h).Warn("log lines were lost", "log", rel, "lost_writes", lost, "error", err)
	}
	f, err = logfile.Open(d.Path(datadir.Logs, name), o)
	if err != nil {
		return nil, fmt.Errorf("open the daemon's log: %w", err)
	}
	return f, nil
}

// kernelLog opens the kernel's log for the kernel itself when its
// standard error is that file (a kernel bootstrap launched), so the
// kernel rotates it while it runs; every rotation points standard output
// and error at the new file too (a panic's trace lands there). It returns
// nil when standard error is something else (a terminal, a unit's
// journal).
func (a *App) kernelLog() (*logfile.File, error) {
	d, err := a.DataDir()
	if err != nil {
		return nil, err
	}
	path := d.Path(datadir.Logs, bootstrap.KernelLog)
	mine, err := os.Stderr.Stat()
	if err != nil {
		return nil, nil
	}
	st, err := os.Stat(path)
	if err != nil || !os.SameFile(mine, st) {
		return nil, nil
	}
	return a.openLog(bootstrap.KernelLog, nil, func(f *os.File) error {
		for _, fd := range []int{1, 2} {
			if err := unix.Dup3(int(f.Fd()), fd, 0); err != nil {
				return fmt.Errorf("point fd %d at the new log: %w", fd, err)
			}
		}
		return nil
	})
}
