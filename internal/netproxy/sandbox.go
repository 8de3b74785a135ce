package netproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
)

// DefaultListen is where the in-sandbox forwarder listens: the sandbox has
// its own network namespace, so the port is free there.
const DefaultListen = "127.0.0.1:3128"

// ClientEnv returns the environment that points programs inside a sandbox
// at the forwarder listening on listen (host:port): HTTP_PROXY and
// HTTPS_PROXY in both cases (curl reads only the lower-case http_proxy),
// NO_PROXY, and FLUFFY_EGRESS_SOCKET naming the proxy's socket inside (for
// clients that may only use AF_UNIX, as under the strict seccomp profile:
// they send the same proxy requests to the socket directly). NO_PROXY keeps the sandbox's own loopback direct — a test
// server the command starts itself stays reachable — unless the
// allow-list names a loopback address: then loopback requests must go
// through the proxy to reach the host's service, and NO_PROXY is empty.
func ClientEnv(listen, socket string, al AllowList) []string {
	u := "http://" + listen
	noProxy := "localhost,127.0.0.1,::1"
	for _, r := range al.rules {
		if r.IP.IsValid() && r.IP.IsLoopback() {
			noProxy = ""
		}
	}
	return []string{
		"HTTP_PROXY=" + u, "http_proxy=" + u,
		"HTTPS_PROXY=" + u, "https_proxy=" + u,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
		"FLUFFY_EGRESS_SOCKET=" + socket,
	}
}

// JSONRecorder is a Recorder that writes each record as one JSON line to
// w. It is what the CLI uses when no audit log is wired in.
type JSONRecorder struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

var _ Recorder = (*JSONRecorder)(nil)

// NewJSONRecorder writes records to w.
func NewJSONRecorder(w io.Writer) *JSONRecorder { return &JSONRecorder{w: w} }

// RecordEgress writes r as one line.
func (j *JSONRecorder) RecordEgress(_ context.Context, r Record) error {
	b, err := json.Marshal(recordJSON(r))
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err = j.w.Write(append(b, '\n'))
	return err
}

type jsonRecord struct {
	Time      string   `json:"time"`
	Sandbox   string   `json:"sandbox,omitempty"`
	Session   string   `json:"session,omitempty"`
	Method    string   `json:"method"`
	Host      string   `json:"host"`
	Port      int      `json:"port,omitempty"`
	Addr      string   `json:"addr,omitempty"`
	Decision  string   `json:"decision"`
	Rule      string   `json:"rule"`
	Reason    string   `json:"reason,omitempty"`
	Status    int      `json:"status"`
	BytesUp   int64    `json:"bytes_up"`
	BytesDown int64    `json:"bytes_down"`
	Millis    int64    `json:"ms"`
	Err       string   `json:"error,omitempty"`
	Phase     string   `json:"phase,omitempty"`
	ID        string   `json:"id,omitempty"`
	Secrets   []string `json:"secrets,omitempty"`
	TLS       bool     `json:"tls,omitempty"`
}

func recordJSON(r Record) jsonRecord {
	return jsonRecord{
		ID: r.ID, Phase: string(r.Phase), Time: r.Time.UTC().Format("2006-01-02T15:04:05.000Z"), Sandbox: r.Sandbox, Session: r.Session,
		Method: r.Method, Host: r.Host, Port: r.Port, Addr: r.Addr, Decision: string(r.Decision),
		Rule: r.Rule, Reason: r.Reason, Status: r.Status, BytesUp: r.BytesUp, BytesDown: r.BytesDown,
		Millis: r.Duration.Milliseconds(), Err: r.Err, Secrets: r.Secrets, TLS: r.TLS,
	}
}

// Summary is a one-line human description of a record, for terminals.
func (r Record) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Method, r.Host)
	if r.Port != 0 {
		fmt.Fprintf(&b, ":%d", r.Port)
	}
	fmt.Fprintf(&b, " %s", r.Decision)
	if r.Decision == Denied {
		fmt.Fprintf(&b, " (%s: %s)", r.Rule, r.Reason)
	} else {
		fmt.Fprintf(&b, " by %s, %d up, %d down", r.Rule, r.BytesUp, r.BytesDown)
	}
	if r.Err != "" {
		fmt.Fprintf(&b, ", %s", r.Err)
	}
	return b.String()
}
