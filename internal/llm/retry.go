package llm

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math/rand/v2"
	"time"
)

// RetryOptions bound the retries of one model call.
type RetryOptions struct {
	// Attempts is the total number of tries, first included (default 4).
	Attempts int
	// BaseDelay is the first backoff (default 1s); each retry doubles it,
	// up to MaxDelay (default 30s), with full jitter.
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// MaxElapsed bounds the time spent waiting across all retries of one
	// call (default 2m). A Retry-After beyond what is left ends the call.
	MaxElapsed time.Duration
	// Sleep waits for d or until ctx ends; nil means a real timer. Tests
	// replace it to observe the delays.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a number in [0,1) for jitter; nil means math/rand/v2.
	Rand   func() float64
	Logger *slog.Logger
}

func (o *RetryOptions) defaults() {
	if o.Attempts <= 0 {
		o.Attempts = 4
	}
	if o.BaseDelay <= 0 {
		o.BaseDelay = time.Second
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 30 * time.Second
	}
	if o.MaxElapsed <= 0 {
		o.MaxElapsed = 2 * time.Minute
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Retry wraps p so that a failed call is tried again when, and only when,
// it is safe and useful:
//
//   - the error is retryable (Retryable() reports true: 408, 409, 429,
//     5xx, overloaded, a connection failure before any output);
//   - no event has been yielded yet: once output has started the caller
//     has seen it, so the error is returned as is. A model call never runs
//     tools, so a retry can never repeat a tool's effect;
//   - attempts and waiting time are within bounds.
//
// The delay is the provider's Retry-After when it sent one, else
// exponential backoff with full jitter.
func Retry(p Provider, opts RetryOptions) Provider {
	opts.defaults()
	return &retrying{p: p, o: opts}
}

type retrying struct {
	p Provider
	o RetryOptions
}

type retryable interface{ Retryable() bool }

func (r *retrying) Stream(ctx context.Context, req Request) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		var waited time.Duration
		for attempt := 1; ; attempt++ {
			started := false
			var failure error
			for ev, err := range r.p.Stream(ctx, req) {
				if err != nil {
					failure = err
					break
				}
				started = true
				if !yield(ev, nil) {
					return
				}
			}
			if failure == nil {
				return
			}
			var rt retryable
			if started || ctx.Err() != nil || !errors.As(failure, &rt) || !rt.Retryable() || attempt >= r.o.Attempts {
				yield(Event{}, failure)
				return
			}
			delay := r.backoff(attempt)
			var e *Error
			if errors.As(failure, &e) && e.RetryAfter > 0 {
				delay = e.RetryAfter
			}
			if waited+delay > r.o.MaxElapsed {
				yield(Event{}, fmt.Errorf("giving up after %d attempts (next wait %v exceeds the retry budget): %w", attempt, delay, failure))
				return
			}
			r.o.Logger.Warn("model call failed, retrying", "attempt", attempt, "delay", delay, "err", failure)
			if err := r.o.Sleep(ctx, delay); err != nil {
				yield(Event{}, fmt.Errorf("%w while waiting to retry: %w", err, failure))
				return
			}
			waited += delay
		}
	}
}

// backoff is full jitter: uniform in [0, min(MaxDelay, Base·2^(n-1))],
// never below a tenth of it so that a retry storm is still spread out.
func (r *retrying) backoff(attempt int) time.Duration {
	ceil := r.o.BaseDelay << (attempt - 1)
	if ceil > r.o.MaxDelay || ceil <= 0 {
		ceil = r.o.MaxDelay
	}
	d := time.Duration(float64(ceil) * r.o.Rand())
	if d < ceil/10 {
		d = ceil / 10
	}
	return d
}
