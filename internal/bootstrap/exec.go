package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/fluffy-agent/fluffy/internal/logfile"
)

// Exec launches the kernel as a detached child process: its own session
// (Ctrl-C in the terminal does not reach it), stdin from /dev/null, stdout
// and stderr appended to Log.
type Exec struct {
	Path string   // required: the binary
	Args []string // arguments after the program name, e.g. ["kernel"]
	Env  []string // nil inherits this process's environment
	Dir  string   // working directory; "" is the current one
	// Log receives the kernel's output (created 0600, appended); ""
	// discards it. When the kernel exits at start, its last lines become
	// part of the error.
	Log string
	// LogRotation says when a launch first rotates Log (MaxSize, Keep,
	// Compress): MaxSize 0 is MaxKernelLog with one older generation
	// kept, a negative MaxSize never rotates.
	LogRotation logfile.Options
}

var _ Launcher = Exec{}

// MaxKernelLog is the size past which a launch starts a fresh kernel log
// when Exec.LogRotation names none.
const MaxKernelLog = 8 << 20

// Launch starts the process.
func (e Exec) Launch(context.Context) (Process, error) {
	cmd := exec.Command(e.Path, e.Args...) // not CommandContext: the kernel outlives us
	cmd.Env, cmd.Dir = e.Env, e.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	p := &proc{cmd: cmd, done: make(chan struct{}), log: e.Log}
	if e.Log != "" {
		r := e.LogRotation
		if r.MaxSize == 0 {
			r.MaxSize, r.Keep = MaxKernelLog, 1
		}
		if st, err := os.Stat(e.Log); err == nil && r.MaxSize > 0 && st.Size() > r.MaxSize {
			// A failed rotation appends to the log as it is: better a long
			// log than no kernel.
			_ = logfile.Rotate(e.Log, r.Keep, r.Compress)
		}
		f, err := os.OpenFile(e.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("kernel log: %w", err)
		}
		defer f.Close() // the child has its own descriptor
		if p.offset, err = f.Seek(0, io.SeekEnd); err != nil {
			return nil, fmt.Errorf("kernel log: %w", err)
		}
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

type proc struct {
	cmd    *exec.Cmd
	done   chan struct{}
	err    error // set before done closes
	log    string
	offset int64 // where this run's output starts in log
}

func (p *proc) Pid() int                { return p.cmd.Process.Pid }
func (p *proc) Exited() <-chan struct{} { return p.done }
func (p *proc) Kill() error             { return p.cmd.Process.Kill() }

// ExitErr is the exit status and the last lines the process wrote.
func (p *proc) ExitErr() error {
	err := p.err
	if err == nil {
		err = errors.New("exit status 0")
	}
	if tail := p.tail(); tail != "" {
		return fmt.Errorf("%w; its last output (%s):\n%s", err, p.log, tail)
	}
	return err
}

func (p *proc) tail() string {
	if p.log == "" {
		return ""
	}
	f, err := os.Open(p.log)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 2048
	b, _ := io.ReadAll(io.NewSectionReader(f, p.offset, 1<<20))
	if len(b) > max {
		b = b[len(b)-max:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n")
}
