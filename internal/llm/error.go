package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Error is a failed model call. Status is the HTTP status when the
// provider answered (0 for connection failures and broken streams).
type Error struct {
	Provider string
	Status   int
	// RetryAfter is the provider's Retry-After, when it sent one.
	RetryAfter time.Duration
	// Transient marks failures worth another attempt: 408, 409, 429, 5xx,
	// "overloaded", and connection failures before any output.
	Transient bool
	Err       error
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s: HTTP %d: %v", e.Provider, e.Status, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Provider, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether the call may be tried again.
func (e *Error) Retryable() bool { return e.Transient }

// RetryableStatus reports whether an HTTP status is worth retrying.
func RetryableStatus(status int) bool {
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusConflict, status == http.StatusTooManyRequests:
		return true
	case status >= 500:
		return true
	}
	return false
}

// ConnectionError reports whether err is a transport failure (reset,
// refused, dropped mid-read) rather than an answer or a cancellation.
func ConnectionError(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return false // a wrong host name does not heal by waiting
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe)
}

// ParseRetryAfter reads a Retry-After header: delay-seconds or an
// HTTP date. It returns 0 when the header is absent or unreadable.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if ms := h.Get("Retry-After-Ms"); ms != "" {
		if n, err := strconv.ParseFloat(ms, 64); err == nil && n > 0 {
			return time.Duration(n * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(n * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Exchange records what the HTTP layer saw during one model call: the
// status and Retry-After of the last response. SDKs do not all expose
// response headers on their errors, so adapters route their requests
// through [ObservingClient] and read the Exchange from the context.
type Exchange struct {
	mu         sync.Mutex
	status     int
	retryAfter time.Duration
}

type exchangeKey struct{}

// WithExchange returns a context that records the HTTP exchange of calls
// made with it.
func WithExchange(ctx context.Context) (context.Context, *Exchange) {
	x := &Exchange{}
	return context.WithValue(ctx, exchangeKey{}, x), x
}

// Last returns the status and Retry-After of the last response seen.
func (x *Exchange) Last() (status int, retryAfter time.Duration) {
	if x == nil {
		return 0, 0
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.status, x.retryAfter
}

type observingTransport struct{ base http.RoundTripper }

func (t observingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if x, ok := req.Context().Value(exchangeKey{}).(*Exchange); ok && resp != nil {
		x.mu.Lock()
		x.status = resp.StatusCode
		x.retryAfter = ParseRetryAfter(resp.Header, time.Now())
		x.mu.Unlock()
	}
	return resp, err
}

// ObservingClient returns an HTTP client like base (http.DefaultTransport
// when nil) whose responses are recorded in the request context's
// [Exchange].
func ObservingClient(base *http.Client) *http.Client {
	c := &http.Client{}
	if base != nil {
		*c = *base
	}
	rt := c.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	c.Transport = observingTransport{base: rt}
	return c
}

// Classify turns an SDK error into an *Error using what the HTTP layer
// saw. started says whether any event was already yielded. Context
// errors pass through wrapped but never transient.
func Classify(ctx context.Context, provider string, err error, started bool) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	status, ra := 0, time.Duration(0)
	if x, ok := ctx.Value(exchangeKey{}).(*Exchange); ok {
		status, ra = x.Last()
	}
	out := &Error{Provider: provider, Err: err}
	if ctx.Err() != nil {
		out.Err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		return out
	}
	if status >= 400 {
		out.Status = status
		out.RetryAfter = ra
		out.Transient = RetryableStatus(status)
		return out
	}
	out.Transient = !started && ConnectionError(err)
	return out
}
