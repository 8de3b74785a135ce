package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/kernel"
)

// errReturned is a channel's Run that returned nil while the daemon still
// ran: a failure like any other, restarted.
var errReturned = errors.New("the channel stopped by itself")

// supervise runs c until the daemon stops, restarting it with backoff
// each time its Run returns: the wait doubles from Options.Backoff up to
// MaxBackoff, and starts over once a run lasted MaxBackoff.
func (d *Daemon) supervise(c channel.Channel) {
	defer d.wg.Done()
	ctx, name := d.chanCtx, c.Name()
	delay := d.o.Backoff
	for {
		started := d.o.Now()
		err := d.runChannel(ctx, c)
		if ctx.Err() != nil {
			d.setState(name, kernel.ChannelStopped, nil, false)
			return
		}
		if err == nil {
			err = errReturned
		}
		if d.o.Now().Sub(started) >= d.o.MaxBackoff {
			delay = d.o.Backoff
		}
		d.setState(name, kernel.ChannelFailing, err, false)
		d.log.Warn("channel failed; restarting", "channel", name, "err", err, "backoff", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			d.setState(name, kernel.ChannelStopped, nil, false)
			return
		case <-t.C:
		}
		delay = min(2*delay, d.o.MaxBackoff)
		d.setState(name, kernel.ChannelStarting, nil, true)
	}
}

// runChannel is c.Run with a panic turned into an error: one channel's
// bug does not take the daemon down.
func (d *Daemon) runChannel(ctx context.Context, c channel.Channel) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{v: p}
		}
	}()
	return c.Run(ctx, d)
}

type panicError struct{ v any }

func (e *panicError) Error() string { return fmt.Sprintf("the channel panicked: %v", e.v) }

// Ready implements channel.Sink: a channel reports itself connected or
// lost.
func (d *Daemon) Ready(name string, ready bool, why error) {
	if ready {
		d.setState(name, kernel.ChannelConnected, nil, false)
		d.log.Info("channel connected", "channel", name)
		return
	}
	d.setState(name, kernel.ChannelFailing, why, false)
	d.log.Warn("channel lost", "channel", name, "err", why)
}

func (d *Daemon) setState(name string, s kernel.ChannelState, why error, restarted bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.states[name]
	if st == nil {
		return // not a channel of this daemon
	}
	if st.State != s {
		st.State, st.Since = s, d.o.Now().UTC()
	}
	if why != nil {
		st.LastError = why.Error()
	}
	if restarted {
		st.Restarts++
	}
}

// Mount serves every HTTP channel on mux at its pattern.
func (d *Daemon) Mount(mux *http.ServeMux) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, name := range d.order {
		if h, ok := d.channels[name].(channel.HTTPChannel); ok {
			mux.Handle(h.Pattern(), h.Handler(d))
		}
	}
}
