package serve

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fluffy-agent/fluffy/internal/kernel"
)

// Status is the daemon's readiness and its channels' states, as /readyz
// and "fluffy status" show them. The daemon only runs once the audit log
// verified at start (the kernel refuses to start otherwise), so readiness
// is the store answering and every channel connected.
func (d *Daemon) Status(ctx context.Context) kernel.ServeStatus {
	st := kernel.ServeStatus{Channels: []kernel.ChannelStatus{}}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := d.o.DB.PingContext(pctx); err != nil {
		st.NotReady = append(st.NotReady, fmt.Sprintf("store: fluffy.db does not answer: %v", err))
	}
	d.mu.Lock()
	stopping := d.stopping
	for _, name := range d.order {
		c := *d.states[name]
		st.Channels = append(st.Channels, c)
		if c.State != kernel.ChannelConnected {
			line := fmt.Sprintf("channel %s: %s", name, c.State)
			if c.LastError != "" && c.State != kernel.ChannelStopped {
				line += ": " + c.LastError
			}
			st.NotReady = append(st.NotReady, line)
		}
	}
	d.mu.Unlock()
	if stopping {
		st.NotReady = append(st.NotReady, "the daemon is stopping")
	}
	st.Ready = len(st.NotReady) == 0
	return st
}

// HealthHandler serves GET /healthz (200 while the process serves) and
// GET /readyz (200 "ready", or 503 with one line per thing that is not),
// and with Options.Metrics GET /metrics (the Prometheus text format).
func (d *Daemon) HealthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		st := d.Status(r.Context())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if st.Ready {
			fmt.Fprintln(w, "ready")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready\n%s\n", strings.Join(st.NotReady, "\n"))
	})
	if d.o.Metrics != nil && !d.o.NoMetricsEndpoint {
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			_ = d.o.Metrics.WritePrometheus(w)
		})
	}
	return mux
}
