package kernel

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// MethodHandover asks an on-demand kernel to give its socket to a
// "fluffy serve" starting up (docs/serve.md#an-on-demand-kernel-in-the-way):
// an idle kernel stops as "fluffy kernel stop" stops it and answers
// HandoverResult; a busy one answers CodeBusy with the reasons; a daemon
// (serve, or a kernel started by hand) answers unavailable.
const MethodHandover = "handover"

// Daemon modes, DaemonStatus.Mode.
const (
	ModeOnDemand = "on-demand" // started by a command, exits when idle
	ModeKernel   = "kernel"    // "fluffy kernel" started by hand
	ModeServe    = "serve"     // "fluffy serve", the assistant daemon
)

// CodeBusy is the IPC error code of a handover refused because the kernel
// is doing something; the error's data is BusyData.
const CodeBusy = "busy"

// ErrKernelBusy is a CodeBusy error received over IPC.
var ErrKernelBusy = &ipc.Error{Code: CodeBusy}

// HandoverParams name who takes over, for the kernel's log and its
// kernel.stop record.
type HandoverParams struct {
	PID int `json:"pid"`
}

// HandoverResult is the answer of a kernel that hands over: it then
// stops, and its process exits.
type HandoverResult struct {
	PID int `json:"pid"`
}

// BusyData is the data of a CodeBusy error: what keeps the kernel busy,
// one line each.
type BusyData struct {
	Reasons []string `json:"reasons"`
}

// BusyError is the refusal of Quiesce: the kernel is doing something a
// stop would interrupt.
type BusyError struct {
	Reasons []string
}

func (e *BusyError) Error() string { return "kernel: busy: " + strings.Join(e.Reasons, "; ") }

// Wire is the error as the handover method answers it: CodeBusy with
// the reasons as data.
func (e *BusyError) Wire() *ipc.Error {
	b, _ := json.Marshal(BusyData{Reasons: e.Reasons})
	return &ipc.Error{Code: CodeBusy, Message: strings.Join(e.Reasons, "; "), Data: b}
}

// BusyReasons reads the reasons out of a CodeBusy error received over
// IPC; nil when err is not one.
func BusyReasons(err error) []string {
	var ie *ipc.Error
	if !errors.As(err, &ie) || ie.Code != CodeBusy {
		return nil
	}
	var d BusyData
	if json.Unmarshal(ie.Data, &d) != nil || len(d.Reasons) == 0 {
		return []string{ie.Message}
	}
	return d.Reasons
}

// Busy lists what the sessions are doing now: a session running a turn
// (or a tool call of an external session, or an operation on its change
// set). Empty when no session runs.
func (k *Kernel) Busy() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.busyLocked()
}

func (k *Kernel) busyLocked() []string {
	ids := make([]string, 0, len(k.running))
	for id := range k.running {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []string
	for _, id := range ids {
		if k.running[id].em == nil {
			out = append(out, fmt.Sprintf("session %s is busy with its change set", id))
			continue
		}
		out = append(out, fmt.Sprintf("session %s is running a turn", id))
	}
	return out
}

// Quiesce decides a handover: under the lock every run takes to start, it
// refuses with a *BusyError when a session runs or others (what the
// daemon knows beside the sessions: pending approvals, streaming clients)
// names something, and otherwise sets the kernel stopping, so that no run
// starts after it (ErrStopping). Of a run starting and a handover at the
// same moment, exactly one wins. ErrStopping when the kernel is stopping
// already.
func (k *Kernel) Quiesce(others []string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopping {
		return ErrStopping
	}
	if reasons := append(k.busyLocked(), others...); len(reasons) > 0 {
		return &BusyError{Reasons: reasons}
	}
	k.stopping = true
	return nil
}
