package kernel

import (
	"errors"
	"time"
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
}
