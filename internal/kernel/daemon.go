package kernel

import (
	"errors"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sched"
)

// The kernel daemon's own IPC methods, beside the session methods. The
// daemon (internal/wiring) serves them; "fluffy status" and "fluffy kernel
// stop" call them.
const (
	MethodStatus   = "status"   // → DaemonStatus
	MethodShutdown = "shutdown" // → {"pid": N}; the daemon then stops
)

// ErrAuditUnavailable: the kernel daemon could not open the audit log at
// start; it does not start without it.
var ErrAuditUnavailable = errors.New("the kernel cannot open the audit log")

// DaemonOptions say how the kernel daemon runs ("fluffy kernel").
type DaemonOptions struct {
	// Oneshot: exit after kernel.idle_timeout without clients (a kernel
	// started on demand); otherwise it runs until stopped.
	Oneshot bool
	// Serve runs the kernel as the assistant daemon ("fluffy serve"):
	// the channels, the HTTP listeners and the health endpoints of the
	// serve: section beside the sessions; never an idle exit.
	Serve bool
}

// DaemonStatus is the result of MethodStatus.
type DaemonStatus struct {
	PID       int       `json:"pid"`
	Version   string    `json:"version"`
	Commit    string    `json:"commit"`
	GoVersion string    `json:"go_version"`
	Protocol  int       `json:"protocol"`
	StartedAt time.Time `json:"started_at"`
	UptimeMS  int64     `json:"uptime_ms"`
	Socket    string    `json:"socket"`
	Home      string    `json:"home"`
	// Clients is the number of connected clients, this one included;
	// Served counts every connection since the start.
	Clients int    `json:"clients"`
	Served  uint64 `json:"served"`
	// Refused counts connections refused because the peer was another
	// user (SO_PEERCRED).
	Refused int64 `json:"refused"`
	// IdleTimeout is how long the kernel waits without clients before
	// exiting; empty when it stays up.
	IdleTimeout string `json:"idle_timeout,omitempty"`
	// Serve is the assistant daemon's channels and readiness; nil for a
	// kernel that serves no channels ("fluffy kernel").
	Serve *ServeStatus `json:"serve,omitempty"`
	// Sched is what the scheduler runs and why the rest waits
	// (docs/sched.md); nil before the sessions started.
	Sched *sched.Status `json:"sched,omitempty"`
	// Mode is how the kernel runs: ModeOnDemand, ModeKernel or
	// ModeServe. Only an on-demand kernel hands its socket over to
	// "fluffy serve" (MethodHandover).
	Mode string `json:"mode,omitempty"`
	// Busy is what the kernel is doing that a stop would interrupt, one
	// line each (a session running a turn, an approval waiting, a client
	// streaming a session's events; the caller not counted); empty when
	// idle.
	Busy []string `json:"busy,omitempty"`
}

// ServeStatus is the assistant daemon's part of DaemonStatus: a kernel run
// by "fluffy serve" serves channels beside the sessions (docs/serve.md).
type ServeStatus struct {
	// Ready is what /readyz answers: the audit log verified at start,
	// the store open and every enabled channel connected. NotReady says
	// what is not, one line each.
	Ready    bool     `json:"ready"`
	NotReady []string `json:"not_ready,omitempty"`
	// Listen and Health are the daemon's HTTP addresses (serve.listen,
	// serve.health); empty when not served.
	Listen string `json:"listen,omitempty"`
	Health string `json:"health,omitempty"`
	// Web is the web console's URL (http or https, the address
	// serve.web.listen is bound to); empty when not served.
	Web      string          `json:"web,omitempty"`
	Channels []ChannelStatus `json:"channels"`
}

// ChannelState is a supervised channel's state.
type ChannelState string

// Channel states: starting until the channel says it is connected;
// failing after it returned an error or reported itself lost (the daemon
// restarts it with backoff); stopped once the daemon stops.
const (
	ChannelStarting  ChannelState = "starting"
	ChannelConnected ChannelState = "connected"
	ChannelFailing   ChannelState = "failing"
	ChannelStopped   ChannelState = "stopped"
)

// ChannelStatus is one channel under the daemon's supervision.
type ChannelStatus struct {
	Name      string       `json:"name"`
	State     ChannelState `json:"state"`
	Since     time.Time    `json:"since"`
	LastError string       `json:"last_error,omitempty"`
	Restarts  int          `json:"restarts"`
}
